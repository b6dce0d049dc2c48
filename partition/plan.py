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

from dataclasses import dataclass

from pilot import network as net
from pilot import resource_config
from pilot.descriptions import FILL, ComputePartitionDescription, ComputePilotDescription
from pilot.partition.sizing import pilot_size
from pilot.resource_config import ResourceConfig


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


def plan_pilot(pd: ComputePilotDescription) -> PilotPlan:
    where = "ComputePilotDescription"
    pd = with_parts(pd)
    try:
        cfg = resource_config.load(pd.resource)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
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
    return PilotPlan(pd, cfg, size, network)
