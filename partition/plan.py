"""Where a pilot is sized: what `PilotManager.submit_pilots` does before anything starts.

    plan_pilot(pd) -> PilotPlan(description, config, size, network)
        fills in the partitions of a pilot given only a size (`with_parts`: one over all of it);
        reads the resource config (SITE.NAME or a YAML file) and the network config file, if
        the description names one; checks every partition against the resource
        (`check_partition`); sizes the pilot (partition/sizing.py: its partitions plus their
        agent overhead, allocated in order on an empty copy of the resource).
    check_partition(where, desc, gpus, holder)
        what a partition description is checked for wherever it is started: at submit, by a
        reconfig from the client, by a reconfig from a shell at the bootstrap.

Errors are ValueError naming the description and the field; nothing has been started then.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from pilot.config import network as net, resource_config
from pilot.config.resource_keys import ResourceConfig
from pilot.descriptions import FILL, ComputePartitionDescription, ComputePilotDescription
from pilot.partition.sizing import pilot_size


@dataclass(frozen=True)
class PilotPlan:
    description: ComputePilotDescription  # as submitted, with its partitions filled in
    config: ResourceConfig
    size: dict  # nodes, cores_per_node, gpus_per_node, cores, gpus, node_granular
    network: dict | None  # {index: node descriptor} from the network config file


def check_partition(
    where: str, desc: ComputePartitionDescription, gpus: int, holder: str = "the resource"
) -> None:
    """ValueError naming `where` when `desc` asks for GPUs that `holder` (with `gpus` GPUs)
    does not have, or names an agent config that does not exist."""
    if desc.asks_gpus and not gpus:
        raise ValueError(f"{where}.gpus={desc.gpus!r} but {holder} has no GPUs")
    resource_config.check_agent_config(where, desc.config)


def with_parts(pd: ComputePilotDescription) -> ComputePilotDescription:
    """`pd`, or (no parts: RADICAL-Pilot's cores=/gpus=/nodes= pilot) a copy holding one
    partition over all of it."""
    if pd.parts:
        return pd
    if pd.cores is None and pd.nodes is None and pd.gpus is None:
        raise ValueError(
            "ComputePilotDescription: parts=[] and no size; give parts=[...] or the pilot's "
            "size with cores=, gpus= or nodes= (then one partition holds all of it)"
        )
    whole = pd.to_stored()
    whole["parts"] = [ComputePartitionDescription(FILL)]
    return ComputePilotDescription.from_stored(whole)


def with_sandbox(
    where: str, pd: ComputePilotDescription, cfg: ResourceConfig
) -> ComputePilotDescription:
    """`pd` checked for the fields the resource requires, with the resource's `sandbox` (its
    $VARS and %(pd.project)s filled in) when it names none; ValueError naming what is missing."""
    for key in cfg.required:
        if getattr(pd, key) in (None, 0, ""):
            raise ValueError(f"{where}: resource {pd.resource!r} requires {key}= (now unset)")
    if pd.sandbox is not None or cfg.sandbox is None:
        return pd
    path = cfg.sandbox
    if "%(pd.project)s" in path:
        if not pd.project:
            raise ValueError(
                f"{where}: resource {pd.resource!r}: sandbox {path!r} names the project: "
                "give project="
            )
        path = path.replace("%(pd.project)s", pd.project)
    path = os.path.expanduser(path)
    unset = sorted(set(re.findall(r"\$\{?(\w+)", path)) - set(os.environ))
    if unset:
        raise ValueError(
            f"{where}: resource {pd.resource!r}: sandbox {cfg.sandbox!r} needs "
            f"{', '.join('$' + v for v in unset)}, unset here; give sandbox="
        )
    stored = pd.to_stored()
    stored["sandbox"] = os.path.expandvars(path)
    return type(pd).from_stored(stored)


def plan_pilot(pd: ComputePilotDescription) -> PilotPlan:
    where = "ComputePilotDescription"
    pd = with_parts(pd)
    try:
        cfg = resource_config.load(pd.resource, pd.access_schema)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    pd = with_sandbox(where, pd, cfg)
    for i, part in enumerate(pd.parts):
        check_partition(f"{where}(resource={pd.resource!r}): parts[{i}]", part, cfg.gpus_per_node)
    size = pilot_size(pd, cfg)
    network = None
    if pd.network_config is not None:
        try:
            network = net.load(pd.network_config)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if len(network) < size["nodes"]:
            raise ValueError(
                f"{where}: network_config={pd.network_config!r} names {len(network)} "
                f"node(s), the pilot needs {size['nodes']}"
            )
    _check_growth(where, pd, cfg, size)
    if cfg.launch_method == "sim":
        _check_simulation(where, pd, size)
    return PilotPlan(pd, cfg, size, network)


def _check_simulation(where: str, pd, size: dict) -> None:
    """A simulated pilot (launch method sim: partition/launch/sim.py) whose nodes would not fit
    in this machine's memory: ValueError naming the estimate (nothing is started)."""
    from pilot.partition.launch.sim import memory_estimate

    need = memory_estimate(size["nodes"], len(pd.parts))
    have = _available_memory()
    if have is not None and need > 0.8 * have:
        raise ValueError(
            f"{where}(resource={pd.resource!r}): {size['nodes']} simulated nodes need about "
            f"{need / 2**30:.1f} GiB (partition/launch/sim.py memory_estimate); this machine has "
            f"{have / 2**30:.1f} GiB available: fewer nodes, or a machine with more memory"
        )


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo, in bytes (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def most_nodes(pd) -> int | None:
    """The most nodes a pilot may grow to: max_nodes, else its adapt policy's (None: never)."""
    if pd.max_nodes is not None:
        return pd.max_nodes
    return pd.adapt.max_nodes if pd.adapt is not None else None


def _check_growth(where: str, pd, cfg, size: dict) -> None:
    """max_nodes / adapt against the resource: ValueError naming the field."""
    if pd.adapt is not None and most_nodes(pd) is None:
        raise ValueError(f"{where}: adapt needs max_nodes (on the pilot or in Adapt)")
    most = most_nodes(pd)
    if most is None:
        return
    field = "max_nodes" if pd.max_nodes is not None else "adapt.max_nodes"
    if not cfg.node_daemons or not size["node_granular"]:
        raise ValueError(
            f"{where}: {field}={most}: resource {pd.resource!r} runs no node daemons "
            "(node_daemons: true is needed for a pilot to take in more nodes)"
        )
    if most < size["nodes"]:
        raise ValueError(f"{where}: {field}={most} is less than its {size['nodes']} node(s)")
    if most > cfg.nodes:
        raise ValueError(
            f"{where}: {field}={most} is more than the {cfg.nodes} node(s) resource "
            f"{pd.resource!r} has"
        )
    low = pd.adapt.min_nodes if pd.adapt is not None else None
    if low is not None and low > most:
        raise ValueError(f"{where}: adapt.min_nodes={low} is more than {field}={most}")
