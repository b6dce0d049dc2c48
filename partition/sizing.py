"""Pilot size: what a pilot description needs of its resource (no processes).

`pilot_size()` derives a pilot's size by allocating its initial partitions, in order, on an empty
copy of the resource (`PilotResources.allocate`, partition/resources.py): the bootstrap later
allocates the same partitions in the same order on the real pilot, so the derived size always fits.
partition/plan.py calls it at submit, once the partitions are checked against the resource.

    node-granular  the copy has the pilot's nodes= (or cores= rounded up to whole nodes), else all
                   of the resource's nodes; without an explicit size the pilot holds the nodes
                   its partitions used
    core-granular  the copy is one node of the pilot's cores= and gpus=, else of the cores its
                   partitions ask for by count (at least the machine's) and every GPU; without an
                   explicit size the pilot holds exactly the cores and GPUs its partitions used,
                   their agents' overhead included
Relative partition sizes ("P%", FILL) need an explicit pilot size.  How each request resolves,
and the granularities, are told in partition/resources.py.

Errors are ValueError naming the description and the field.
"""

from __future__ import annotations

import logging
import math

from pilot.config.resource_keys import ResourceConfig
from pilot.partition.resources import AllocationError, PilotResources

log = logging.getLogger("partition.sizing")


def _asked_cores(pd, cfg: ResourceConfig) -> int:
    """The cores a pilot's partitions ask for by count, with their agents' overhead: a pilot
    sized from its partitions on a local resource has at least these (logical cores, as an
    explicit `cores=` beyond the machine gets: the same rule, the same warning)."""
    return sum((p.cores or 0) + cfg.agent_overhead.cores for p in pd.parts)


def pilot_size(pd, cfg: ResourceConfig) -> dict:
    """The pilot's size for description `pd` on resource `cfg`; ValueError when it cannot fit.
    (partition/plan.py checks the partitions against the resource first.)"""
    where = f"ComputePilotDescription(resource={pd.resource!r})"
    node_granular = cfg.nodes > 1 or cfg.batch_system != "local"
    explicit = pd.nodes is not None or pd.cores is not None
    _check_asked(pd, cfg, where, explicit)
    if pd.nodes is not None and pd.nodes > cfg.nodes:  # (a core-granular one too: not fewer)
        raise ValueError(f"{where}: needs {pd.nodes} nodes, the resource has {cfg.nodes}")
    probe = _node_probe(pd, cfg, where) if node_granular else _core_probe(pd, cfg, where)
    for i, p in enumerate(pd.parts):
        try:
            probe.allocate(p)
        except AllocationError as exc:
            raise ValueError(f"{where}: parts[{i}] does not fit the resource: {exc}") from None
    return _size_of(probe, cfg, node_granular, explicit)


def _check_asked(pd, cfg: ResourceConfig, where: str, explicit: bool) -> None:
    """ValueError when a partition's size is relative to a pilot that has no explicit size, or
    the pilot asks for GPUs the resource does not have."""
    relative = [i for i, p in enumerate(pd.parts) if p.size is not None]
    if relative and not explicit:
        raise ValueError(
            f"{where}: parts[{relative[0]}].size={pd.parts[relative[0]].size!r} is "
            "relative; give the pilot an explicit size with nodes= or cores="
        )
    if pd.gpus and cfg.gpus_per_node == 0:
        raise ValueError(f"{where}: gpus={pd.gpus} but the resource has no GPUs")


def _node_probe(pd, cfg: ResourceConfig, where: str) -> PilotResources:
    """The empty copy of a node-granular resource: the pilot's nodes= (cores= in whole nodes),
    else every node of the resource."""
    cpn, gpn = cfg.cores_per_node, cfg.gpus_per_node
    max_nodes = cfg.nodes
    if pd.nodes is not None:
        max_nodes = pd.nodes
    elif pd.cores is not None:
        max_nodes = math.ceil(pd.cores / cpn)
    if max_nodes > cfg.nodes:
        raise ValueError(f"{where}: needs {max_nodes} nodes, the resource has {cfg.nodes}")
    return PilotResources.for_pilot(
        {
            "nodes": max_nodes,
            "cores_per_node": cpn,
            "gpus_per_node": gpn,
            "node_granular": True,
        },
        cfg,
    )


def _core_probe(pd, cfg: ResourceConfig, where: str) -> PilotResources:
    """The empty copy of a core-granular resource: one node of the pilot's cores= and gpus=,
    else of the cores its partitions ask for (at least the machine's) and every GPU."""
    cpn, gpn = cfg.cores_per_node, cfg.gpus_per_node
    cores = pd.cores if pd.cores is not None else max(cpn, _asked_cores(pd, cfg))
    gpus = pd.gpus if pd.gpus is not None else gpn
    if cores > cpn and gpus <= gpn and cfg.batch_system == "local":
        # as RP allows for testing: logical cores, bound round-robin onto the real ones
        log.warning(
            "%s: cores=%d exceeds this machine's %d; the pilot's cores are logical "
            "and share the real ones",
            where,
            cores,
            cpn,
        )
        cpn = cores
    if cores > cpn or gpus > gpn:
        raise ValueError(
            f"{where}: cores={cores}, gpus={gpus} exceed the resource's {cpn} cores, {gpn} GPUs"
        )
    return PilotResources.for_pilot(
        {"nodes": 1, "cores_per_node": cores, "gpus_per_node": gpus, "node_granular": False},
        cfg,
    )


def _size_of(
    probe: PilotResources, cfg: ResourceConfig, node_granular: bool, explicit: bool
) -> dict:
    """The pilot's size once its partitions are allocated on `probe`: all of the copy when the
    pilot's size is explicit, else what the partitions used (whole nodes when node-granular)."""
    cpn, gpn = cfg.cores_per_node, cfg.gpus_per_node
    if explicit:
        nodes, cores_n, gpus_n = len(probe.nodes), cpn, gpn
        if not node_granular:
            cores_n, gpus_n = len(probe.nodes[0].cores), len(probe.nodes[0].gpus)
    elif node_granular:
        nodes = sum(1 for n in probe.nodes if n.in_use)
        cores_n, gpus_n = cpn, gpn
    else:
        used = probe.nodes[0]
        nodes = 1
        cores_n = len(used.cores) - len(used.free_cores)
        gpus_n = len(used.gpus) - len(used.free_gpus)
        # the agent overhead is part of the pilot even when the partitions' sizes hide it
    return {
        "nodes": nodes,
        "cores_per_node": cores_n,
        "gpus_per_node": gpus_n,
        "cores": nodes * cores_n,
        "gpus": nodes * gpus_n,
        "node_granular": node_granular,
    }
