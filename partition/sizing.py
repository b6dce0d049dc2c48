"""Pilot size and partition allocation: one algorithm for both.

The pilot's resources are a list of nodes, each with core ids and GPU ids.  Two granularities:
    core-granular  a single-node resource run as a local process tree (local.localhost): the pilot
                   holds exactly the cores and GPUs its partitions (plus agent overhead) need
    node-granular  every other resource: the pilot holds whole nodes

`allocate()` carves one partition out of the free resources, all or nothing, and says what was
missing when it cannot.  `pilot_size()` derives a pilot's size by allocating its initial partitions,
in order, on an empty copy of the resource: the bootstrap later allocates the same partitions in the
same order on the real pilot, so the derived size always fits.

How requests resolve (agent overhead = the resource config's agent_overhead, per partition):
    nodes=k        k wholly free nodes, plus overhead.nodes whole nodes for the agent
    cores/gpus     overhead.nodes whole nodes for the agent, then cores + overhead.cores and
                   gpus + overhead.gpus packed onto nodes already in use first, then onto free
                   ones; gpus=ALL takes every free GPU (and, unless cores= says otherwise, one
                   core per GPU)
    "P%"           node-granular: floor(P% * pilot nodes) nodes in all, agent nodes inside them;
                   core-granular: floor(P% * pilot cores) cores and floor(P% * pilot GPUs) GPUs,
                   agent overhead inside them.  Shares round down, so shares that add up to 100%
                   always fit together.
    FILL           every free core and GPU, agent overhead taken out of it
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pilot.descriptions import ALL, FILL
from pilot.resource_config import AgentOverhead, ResourceConfig


@dataclass
class Node:
    index: int
    name: str
    cores: list[int]  # all core ids of the node held by the pilot
    gpus: list[int]
    free_cores: list[int] = field(default_factory=list)
    free_gpus: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.free_cores and not self.free_gpus:
            self.free_cores, self.free_gpus = list(self.cores), list(self.gpus)

    @property
    def wholly_free(self) -> bool:
        return len(self.free_cores) == len(self.cores) and len(self.free_gpus) == len(self.gpus)

    @property
    def in_use(self) -> bool:
        return not self.wholly_free


@dataclass
class Allocation:
    """What one partition holds: per node, core and GPU ids; agent_nodes hold only its agent."""

    slots: dict[int, tuple[list[int], list[int]]]
    agent_nodes: list[int]

    @property
    def cores(self) -> int:
        return sum(len(c) for c, _ in self.slots.values())

    @property
    def gpus(self) -> int:
        return sum(len(g) for _, g in self.slots.values())

    def to_dict(self, pool: Pool) -> dict:
        return {
            "cores": self.cores,
            "gpus": self.gpus,
            "nodes": [
                {"index": i, "name": pool.nodes[i].name, "cores": c, "gpus": g}
                for i, (c, g) in sorted(self.slots.items())
            ],
            "agent_nodes": [pool.nodes[i].name for i in self.agent_nodes],
        }


class AllocationError(Exception):
    """A partition does not fit the free resources; the message says what was missing."""


class Pool:
    """The pilot's nodes and what is free on them."""

    def __init__(self, nodes: list[Node], node_granular: bool, overhead: AgentOverhead) -> None:
        self.nodes = nodes
        self.node_granular = node_granular
        self.overhead = overhead

    @classmethod
    def for_pilot(cls, size: dict, cfg: ResourceConfig) -> Pool:
        n, cpn, gpn = size["nodes"], size["cores_per_node"], size["gpus_per_node"]
        nodes = [Node(i, cfg.node_name(i), list(range(cpn)), list(range(gpn))) for i in range(n)]
        return cls(nodes, size["node_granular"], cfg.agent_overhead)

    @property
    def total(self) -> tuple[int, int, int]:
        return (
            len(self.nodes),
            sum(len(n.cores) for n in self.nodes),
            sum(len(n.gpus) for n in self.nodes),
        )

    @property
    def free(self) -> dict:
        return {
            "nodes": sum(n.wholly_free for n in self.nodes),
            "cores": sum(len(n.free_cores) for n in self.nodes),
            "gpus": sum(len(n.free_gpus) for n in self.nodes),
        }

    # -- allocation ---------------------------------------------------------------------------
    def allocate(self, desc) -> Allocation:
        """Carve `desc` (a ComputePartitionDescription) out of the free resources, or raise."""
        ov = self.overhead
        nodes_total, cores_total, gpus_total = self.total
        share = desc.share
        if desc.nodes is not None:
            return self._whole_nodes(desc.nodes, ov.nodes)
        if share is not None and self.node_granular:
            n = math.floor(share * nodes_total)
            if n - ov.nodes < 1:
                raise AllocationError(
                    f"share {desc.size} of {nodes_total} nodes is {n} node(s), too few for one "
                    f"node of work plus {ov.nodes} agent node(s)"
                )
            return self._whole_nodes(n - ov.nodes, ov.nodes)
        if share is not None:
            cores = math.floor(share * cores_total) - ov.cores
            gpus = math.floor(share * gpus_total) - ov.gpus
            if cores < 1:
                raise AllocationError(
                    f"share {desc.size} of {cores_total} cores leaves "
                    f"{max(cores, 0)} core(s) after {ov.cores} for the agent"
                )
            return self._packed(cores + ov.cores, max(gpus, 0) + ov.gpus, ov.nodes)
        agent_nodes = self._take_whole(ov.nodes, "agent") if ov.nodes else []
        free_cores = sum(len(n.free_cores) for n in self.nodes if n.index not in agent_nodes)
        free_gpus = sum(len(n.free_gpus) for n in self.nodes if n.index not in agent_nodes)
        if desc.size == FILL:
            if free_cores - ov.cores < 1:
                raise AllocationError(
                    f"FILL: {free_cores} free core(s), none left after {ov.cores} for the agent"
                )
            return self._packed(free_cores, free_gpus, agent_nodes=agent_nodes)
        gpus = desc.gpus or 0
        if gpus == ALL:
            gpus = free_gpus - ov.gpus
            if gpus < 1:
                raise AllocationError(
                    f"gpus=ALL: no free GPU ({free_gpus} free, {ov.gpus} for the agent)"
                )
        cores = desc.cores if desc.cores is not None else (gpus if desc.gpus == ALL else 0)
        return self._packed(cores + ov.cores, gpus + ov.gpus, agent_nodes=agent_nodes)

    def _take_whole(self, count: int, what: str) -> list[int]:
        free = [n.index for n in self.nodes if n.wholly_free]
        if len(free) < count:
            raise AllocationError(
                f"needs {count} wholly free node(s) for the {what}, {len(free)} free"
            )
        return free[:count]

    def _whole_nodes(self, count: int, agent: int) -> Allocation:
        free = [n for n in self.nodes if n.wholly_free]
        if len(free) < count + agent:
            need = (
                f"{count + agent} wholly free nodes ({count} + {agent} for the agent)"
                if agent
                else f"{count} wholly free nodes"
            )
            raise AllocationError(f"needs {need}, {len(free)} free")
        slots = {}
        for n in free[agent : agent + count]:
            slots[n.index] = (n.free_cores, n.free_gpus)
            n.free_cores, n.free_gpus = [], []
        agent_nodes = [n.index for n in free[:agent]]
        for i in agent_nodes:
            self.nodes[i].free_cores, self.nodes[i].free_gpus = [], []
        return Allocation(slots, agent_nodes)

    def _packed(
        self, cores: int, gpus: int, agent_count: int = 0, agent_nodes: list[int] | None = None
    ) -> Allocation:
        if agent_nodes is None:
            agent_nodes = self._take_whole(agent_count, "agent") if agent_count else []
        usable = [n for n in self.nodes if n.index not in agent_nodes]
        have_c = sum(len(n.free_cores) for n in usable)
        have_g = sum(len(n.free_gpus) for n in usable)
        if have_c < cores or have_g < gpus:
            missing = []
            if have_c < cores:
                missing.append(f"{cores} cores, {have_c} free")
            if have_g < gpus:
                missing.append(f"{gpus} GPUs, {have_g} free")
            raise AllocationError("needs " + "; ".join(missing))
        # nodes already in use first (keeps whole nodes whole), then by index
        order = sorted(usable, key=lambda n: (not n.in_use, n.index))
        slots: dict[int, tuple[list[int], list[int]]] = {}
        for n in order:
            if cores == 0 and gpus == 0:
                break
            tc, tg = n.free_cores[:cores], n.free_gpus[:gpus]
            if not tc and not tg:
                continue
            n.free_cores, n.free_gpus = n.free_cores[len(tc) :], n.free_gpus[len(tg) :]
            cores, gpus = cores - len(tc), gpus - len(tg)
            slots[n.index] = (tc, tg)
        for i in agent_nodes:
            self.nodes[i].free_cores, self.nodes[i].free_gpus = [], []
        return Allocation(slots, agent_nodes)

    def release(self, alloc: Allocation) -> None:
        for i, (c, g) in alloc.slots.items():
            n = self.nodes[i]
            n.free_cores = sorted(n.free_cores + c)
            n.free_gpus = sorted(n.free_gpus + g)
        for i in alloc.agent_nodes:
            n = self.nodes[i]
            n.free_cores, n.free_gpus = list(n.cores), list(n.gpus)


def pilot_size(pd, cfg: ResourceConfig) -> dict:
    """The pilot's size for description `pd` on resource `cfg`; ValueError when it cannot fit."""
    where = f"ComputePilotDescription(resource={pd.resource!r})"
    for i, p in enumerate(pd.parts):
        if (p.gpus == ALL or (p.gpus or 0) > 0) and cfg.gpus_per_node == 0:
            raise ValueError(f"{where}: parts[{i}].gpus={p.gpus!r} but the resource has no GPUs")
    node_granular = cfg.nodes > 1 or cfg.batch_system != "local"
    relative = [i for i, p in enumerate(pd.parts) if p.size is not None]
    explicit = pd.nodes is not None or pd.cores is not None
    if relative and not explicit:
        raise ValueError(
            f"{where}: parts[{relative[0]}].size={pd.parts[relative[0]].size!r} is "
            "relative; give the pilot an explicit size with nodes= or cores="
        )
    if pd.gpus and cfg.gpus_per_node == 0:
        raise ValueError(f"{where}: gpus={pd.gpus} but the resource has no GPUs")
    cpn, gpn = cfg.cores_per_node, cfg.gpus_per_node
    if node_granular:
        max_nodes = cfg.nodes
        if pd.nodes is not None:
            max_nodes = pd.nodes
        elif pd.cores is not None:
            max_nodes = math.ceil(pd.cores / cpn)
        if max_nodes > cfg.nodes:
            raise ValueError(f"{where}: needs {max_nodes} nodes, the resource has {cfg.nodes}")
        probe = Pool.for_pilot(
            {
                "nodes": max_nodes,
                "cores_per_node": cpn,
                "gpus_per_node": gpn,
                "node_granular": True,
            },
            cfg,
        )
    else:
        cores = pd.cores if pd.cores is not None else cpn
        gpus = pd.gpus if pd.gpus is not None else gpn
        if cores > cpn or gpus > gpn:
            raise ValueError(
                f"{where}: cores={cores}, gpus={gpus} exceed the resource's {cpn} cores, {gpn} GPUs"
            )
        probe = Pool.for_pilot(
            {"nodes": 1, "cores_per_node": cores, "gpus_per_node": gpus, "node_granular": False},
            cfg,
        )
    for i, p in enumerate(pd.parts):
        try:
            probe.allocate(p)
        except AllocationError as exc:
            raise ValueError(f"{where}: parts[{i}] does not fit the resource: {exc}") from None
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
