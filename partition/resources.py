"""The pilot's resources (PilotResources), and how a partition is carved out of them (no processes).

The pilot's resources are a list of nodes, each with core ids and GPU ids.  Two granularities:
    core-granular  a single-node resource run as a local process tree (local.localhost): the pilot
                   holds exactly the cores and GPUs its partitions (plus agent overhead) need
    node-granular  every other resource: the pilot holds whole nodes

`PilotResources.allocate()` carves one partition out of the free resources, all or nothing, and says
what was missing when it cannot (AllocationError); `release()` gives a partition's resources back;
`mark_down()` takes a lost (or given back) node out for good; `add_nodes()` takes in the
nodes of a job that grew the pilot (partition/growth.py), like its first nodes.  One
algorithm for both uses: the bootstrap's partition manager (partition/manager.py) allocates
partitions on the real pilot, and `pilot_size()` (partition/sizing.py) sizes a pilot by
allocating its initial partitions, in order, on an empty copy of the resource, so the derived
size always fits.

How requests resolve (agent overhead = the resource config's agent_overhead, per partition):
    nodes=k        k wholly free nodes, plus overhead.nodes whole nodes for the agent
    cores/gpus     overhead.nodes whole nodes for the agent, then cores + overhead.cores and
                   gpus + overhead.gpus packed onto nodes already in use first, then onto free
                   ones; gpus=ALL takes every free GPU; gpus without cores= (N or ALL) take one
                   core per GPU too
    "P%"           node-granular: floor(P% * pilot nodes) nodes in all, agent nodes inside them;
                   core-granular: floor(P% * pilot cores) cores and floor(P% * pilot GPUs) GPUs,
                   agent overhead inside them.  Shares round down, so shares that add up to 100%
                   always fit together.
    FILL           every free core and GPU, agent overhead taken out of it
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pilot.config.resource_keys import AgentOverhead, ResourceConfig
from pilot.descriptions import ALL, FILL


@dataclass
class Node:
    index: int
    name: str
    cores: list[int]  # all core ids of the node held by the pilot
    gpus: list[int]
    free_cores: list[int] = field(default_factory=list)
    free_gpus: list[int] = field(default_factory=list)
    extra: dict[str, list] = field(default_factory=dict)  # user-defined types: instance ids
    free_extra: dict[str, list] = field(default_factory=dict)
    host_id: int | None = None  # from the network config; the node index when there is none
    down: bool = False  # lost or never came up: nothing on it is ever allocated again
    released: bool = False  # given back with its job (down too): no longer part of the pilot

    def __post_init__(self) -> None:
        if not self.free_cores and not self.free_gpus:
            self.free_cores, self.free_gpus = list(self.cores), list(self.gpus)
        if not self.free_extra:
            self.free_extra = {t: list(ids) for t, ids in self.extra.items()}

    @property
    def wholly_free(self) -> bool:
        return (
            len(self.free_cores) == len(self.cores)
            and len(self.free_gpus) == len(self.gpus)
            and all(len(self.free_extra[t]) == len(ids) for t, ids in self.extra.items())
        )

    def take_extra(self, wanted: dict[str, int] | None) -> dict[str, list]:
        """Instances of user-defined types: all free ones (wanted None) or up to the counts."""
        out = {}
        for t, free in self.free_extra.items():
            k = len(free) if wanted is None else min(wanted.get(t, 0), len(free))
            if k:
                out[t], self.free_extra[t] = free[:k], free[k:]
                if wanted is not None:
                    wanted[t] -= k
        return out

    @property
    def in_use(self) -> bool:
        return not self.wholly_free


@dataclass
class PartitionResources:
    """What one partition holds: per node, core and GPU ids; agent_nodes hold only its agent."""

    slots: dict[int, tuple[list[int], list[int]]]
    agent_nodes: list[int]
    extra: dict[int, dict[str, list]] = field(default_factory=dict)  # node -> type -> ids
    own: dict[str, list[dict]] = field(default_factory=dict)  # types only this partition has

    @property
    def cores(self) -> int:
        return sum(len(c) for c, _ in self.slots.values())

    @property
    def gpus(self) -> int:
        return sum(len(g) for _, g in self.slots.values())

    def to_dict(self, res: PilotResources) -> dict:
        return {
            "cores": self.cores,
            "gpus": self.gpus,
            "nodes": [
                {
                    "index": i,
                    "name": res.nodes[i].name,
                    "host_id": res.nodes[i].host_id if res.nodes[i].host_id is not None else i,
                    "cores": c,
                    "gpus": g,
                    "pool": dict(
                        res.node_pool(i, g, self.extra.get(i, {})),
                        **(self.own if i == min(self.slots) else {}),
                    ),
                }
                for i, (c, g) in sorted(self.slots.items())
            ],
            "agent_nodes": [res.nodes[i].name for i in self.agent_nodes],
        }


def _instances(spec) -> list[dict]:
    """A count (k instances "0".."k-1", one slot each) or a list of {id, slots}."""
    if isinstance(spec, int):
        return [{"id": str(i), "slots": 1} for i in range(spec)]
    return [{"id": str(i["id"]), "slots": int(i.get("slots", 1))} for i in spec]


class AllocationError(Exception):
    """A partition does not fit the free resources; the message says what was missing."""


class PilotResources:
    """The pilot's nodes and what is free on them."""

    def __init__(
        self,
        nodes: list[Node],
        node_granular: bool,
        overhead: AgentOverhead,
        slots: dict[str, dict] | None = None,
    ) -> None:
        self.nodes = nodes
        self.node_granular = node_granular
        self.overhead = overhead
        self.slots = slots or {}  # type -> {instance id: slots} where not 1

    @classmethod
    def for_pilot(
        cls, size: dict, cfg: ResourceConfig, network: dict | None = None
    ) -> PilotResources:
        """The pilot's nodes: named by the network config when there is one (node i is its
        entry i, with its host_id), else by the resource config."""
        n, cpn, gpn = size["nodes"], size["cores_per_node"], size["gpus_per_node"]
        extra = {t: [i["id"] for i in inst] for t, inst in cfg.resource_pool.items() if t != "gpus"}
        net = {int(k): v for k, v in (network or {}).items()}
        nodes = [
            Node(
                i,
                net[i]["name"] if i in net else cfg.node_name(i),
                list(range(cpn)),
                list(range(gpn)),
                extra=extra,
                host_id=net[i]["host_id"] if i in net else None,
            )
            for i in range(n)
        ]
        slots = {t: {i["id"]: i["slots"] for i in inst} for t, inst in cfg.resource_pool.items()}
        return cls(nodes, size["node_granular"], cfg.agent_overhead, slots)

    def node_pool(self, index: int, gpus: list[int], extra: dict[str, list]) -> dict:
        """The resource pool an agent gets for one node: per type, instances {id, slots}."""
        pool = {"gpus": [{"id": g, "slots": self.slots.get("gpus", {}).get(g, 1)} for g in gpus]}
        for t in self.nodes[index].extra:
            pool[t] = [{"id": i, "slots": self.slots[t][i]} for i in extra.get(t, [])]
        return pool

    @property
    def total(self) -> tuple[int, int, int]:
        held = [n for n in self.nodes if not n.released]  # (shares: of what the pilot has)
        return (
            len(held),
            sum(len(n.cores) for n in held),
            sum(len(n.gpus) for n in held),
        )

    @property
    def free(self) -> dict:
        return {
            "nodes": sum(n.wholly_free for n in self.nodes),
            "cores": sum(len(n.free_cores) for n in self.nodes),
            "gpus": sum(len(n.free_gpus) for n in self.nodes),
        }

    # -- allocation ---------------------------------------------------------------------------
    def allocate(self, desc) -> PartitionResources:
        """Carve `desc` (a ComputePartitionDescription) out of the free resources, or raise.
        User-defined types the resource config declares are allocated like GPUs; types only
        the partition description declares become the partition's own, on its first node."""
        known = set(self.nodes[0].extra) if self.nodes else set()
        asked = desc.resources or {}
        counts = {t: v for t, v in asked.items() if t in known}
        own = {t: v for t, v in asked.items() if t not in known}
        for t, v in counts.items():
            if not isinstance(v, int):
                raise AllocationError(
                    f"resources[{t!r}]: {t} come from the resource config; "
                    "ask for a count, not a list of instances"
                )
        alloc = self._allocate(desc, counts)
        alloc.own = {t: _instances(v) for t, v in own.items()}
        return alloc

    def _allocate(self, desc, counts: dict[str, int]) -> PartitionResources:
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
            extra = {
                t: math.floor(share * sum(len(n.extra[t]) for n in self.nodes))
                for t in (self.nodes[0].extra if self.nodes else {})
            }
            return self._packed(cores + ov.cores, max(gpus, 0) + ov.gpus, ov.nodes, extra=extra)
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
        # (no cores= with GPUs: one core per GPU, gpus=N as gpus=ALL; a partition of GPUs
        # and no core could run no unit: every unit has a core a rank)
        cores = desc.cores if desc.cores is not None else gpus
        return self._packed(cores + ov.cores, gpus + ov.gpus, agent_nodes=agent_nodes, extra=counts)

    def _take_whole(self, count: int, what: str) -> list[int]:
        free = [n.index for n in self.nodes if n.wholly_free]
        if len(free) < count:
            raise AllocationError(
                f"needs {count} wholly free node(s) for the {what}, {len(free)} free"
            )
        return free[:count]

    def _whole_nodes(self, count: int, agent: int) -> PartitionResources:
        free = [n for n in self.nodes if n.wholly_free]
        if len(free) < count + agent:
            need = (
                f"{count + agent} wholly free nodes ({count} + {agent} for the agent)"
                if agent
                else f"{count} wholly free nodes"
            )
            raise AllocationError(f"needs {need}, {len(free)} free")
        slots, extra = {}, {}
        for n in free[agent : agent + count]:
            slots[n.index] = (n.free_cores, n.free_gpus)
            n.free_cores, n.free_gpus = [], []
            extra[n.index] = n.take_extra(None)
        agent_nodes = [n.index for n in free[:agent]]
        for i in agent_nodes:
            self.nodes[i].free_cores, self.nodes[i].free_gpus = [], []
            self.nodes[i].take_extra(None)
        return PartitionResources(slots, agent_nodes, extra)

    def _packed(
        self,
        cores: int,
        gpus: int,
        agent_count: int = 0,
        agent_nodes: list[int] | None = None,
        extra: dict[str, int] | None = None,
    ) -> PartitionResources:
        """Cores and GPUs packed onto nodes; `extra`: counts of user-defined types (None: all
        that are free on the nodes it uses)."""
        if agent_nodes is None:
            agent_nodes = self._take_whole(agent_count, "agent") if agent_count else []
        usable = [n for n in self.nodes if n.index not in agent_nodes]
        have_c = sum(len(n.free_cores) for n in usable)
        have_g = sum(len(n.free_gpus) for n in usable)
        have_x = {t: sum(len(n.free_extra.get(t, ())) for n in usable) for t in extra or {}}
        missing = []
        if have_c < cores:
            missing.append(f"{cores} cores, {have_c} free")
        if have_g < gpus:
            missing.append(f"{gpus} GPUs, {have_g} free")
        missing += [f"{k} {t}, {have_x[t]} free" for t, k in (extra or {}).items() if have_x[t] < k]
        if missing:
            raise AllocationError("needs " + "; ".join(missing))
        wanted = dict(extra) if extra is not None else None
        # nodes already in use first (keeps whole nodes whole), then by index
        order = sorted(usable, key=lambda n: (not n.in_use, n.index))
        slots: dict[int, tuple[list[int], list[int]]] = {}
        taken: dict[int, dict[str, list]] = {}
        for n in order:
            more = wanted is not None and any(wanted.values())
            if cores == 0 and gpus == 0 and not more:
                break
            tc, tg = n.free_cores[:cores], n.free_gpus[:gpus]
            if not tc and not tg and not more:
                continue
            n.free_cores, n.free_gpus = n.free_cores[len(tc) :], n.free_gpus[len(tg) :]
            cores, gpus = cores - len(tc), gpus - len(tg)
            slots[n.index] = (tc, tg)
            taken[n.index] = n.take_extra(wanted)
        for i in agent_nodes:
            self.nodes[i].free_cores, self.nodes[i].free_gpus = [], []
            self.nodes[i].take_extra(None)
        return PartitionResources(slots, agent_nodes, taken)

    def add_nodes(self, named: list[tuple[int, str, int | None]], ready: bool = True) -> None:
        """Nodes of a job that grew the pilot, each (index, name, host_id), the next indices in
        order: as many cores, GPUs and instances of each type as the pilot's other nodes (the
        same resource config), all free; not `ready`: held back (down, nothing offered) until
        `bring_up` (their daemons have not confirmed yet)."""
        model = self.nodes[0]
        for index, name, host_id in named:
            if index != len(self.nodes):
                raise ValueError(f"add_nodes: node index {index}, expected {len(self.nodes)}")
            node = Node(
                index,
                name,
                list(model.cores),
                list(model.gpus),
                extra={t: list(ids) for t, ids in model.extra.items()},
                host_id=host_id,
            )
            self.nodes.append(node)
            if not ready:
                self.mark_down(index)

    def bring_up(self, index: int) -> None:
        """A node added held back is ready: all of it is free."""
        n = self.nodes[index]
        if n.down and not n.released:
            n.down = False
            n.free_cores, n.free_gpus = list(n.cores), list(n.gpus)
            n.free_extra = {t: list(ids) for t, ids in n.extra.items()}

    def mark_down(self, index: int, released: bool = False) -> None:
        """Node `index` is gone (lost; or `released`: given back with its job): what is free on
        it is no longer offered, and what partitions hold there is not given back when they
        end."""
        n = self.nodes[index]
        n.down = True
        n.released = released
        n.free_cores, n.free_gpus = [], []
        n.free_extra = {t: [] for t in n.extra}

    def release(self, alloc: PartitionResources) -> None:
        for i, (c, g) in alloc.slots.items():
            n = self.nodes[i]
            if n.down:
                continue
            n.free_cores = sorted(n.free_cores + c)
            n.free_gpus = sorted(n.free_gpus + g)
            for t, ids in alloc.extra.get(i, {}).items():
                n.free_extra[t] = [x for x in n.extra[t] if x in ids or x in n.free_extra[t]]
        for i in alloc.agent_nodes:
            n = self.nodes[i]
            if n.down:
                continue
            n.free_cores, n.free_gpus = list(n.cores), list(n.gpus)
            n.free_extra = {t: list(ids) for t, ids in n.extra.items()}
