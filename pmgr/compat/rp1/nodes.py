"""RADICAL-Pilot 1.x's node list (rp.Node, rp.NodeList, rp.RankRequirements, rp.RO, rp.Slot),
the shape its scripts use to find and release slots on nodes, over this project's resource
pools (agent/pool.py: the agent's own placement, best fit within a node).

    nl = rp.NodeList(nodes=[rp.Node({"index": 0, "name": "n0",
                                     "cores": [rp.RO(index=i, occupation=rp.FREE) ...],
                                     "gpus": [...], "lfs": MB, "mem": MB})])
    slots = nl.find_slots(rp.RankRequirements(n_cores=2, n_gpus=1, mem=0, lfs=0), n_slots=4)
    nl.release_slots(slots)

find_slots gives a Slot per rank, all or none (None when they do not fit now); a request that
can never fit raises ValueError saying why.  Slots are placed as the agent places a rank
(pilot/policy.py's default distribution), not RP's first-fit.  Differs on purpose, refused with
a ValueError: a node's cores and GPUs start FREE or DOWN (RP also takes them part-occupied);
core_occupation / gpu_occupation below 1 only for one core / GPU; numa=True.
"""

from __future__ import annotations

from pilot.agent.pool import SCALE, PartitionPool
from pilot.pmgr.compat.rp1.names import BUSY, DOWN, FREE


class _Record(dict):
    """A dict with attribute access, as RP's typed dicts are."""

    DEFAULTS: dict = {}

    def __init__(self, from_dict: dict | None = None, **kwargs) -> None:
        super().__init__(self.DEFAULTS)
        self.update(from_dict or {}, **kwargs)

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no {name!r}") from None

    def __setattr__(self, name: str, value) -> None:
        self[name] = value


class RO(_Record):
    """A resource and how much of it is taken: RO(index=3, occupation=rp.FREE)."""

    DEFAULTS = {"index": 0, "occupation": None}


ResourceOccupation = RO


class RankRequirements(_Record):
    """What one rank needs, as RADICAL-Pilot 1.x asks `NodeList.find_slots` for it.

    Args:
        from_dict (dict | None): the fields as a dict.
        **kwargs (Any): the fields, below.

    Keyword Args:
        n_cores (int): cores per rank (default 1).
        core_occupation (float): how much of each core, 0 < x <= 1 (below 1: one core only).
        n_gpus (int): GPUs per rank (default 0).
        gpu_occupation (float): how much of each GPU, as `core_occupation`.
        lfs (int): local disk in MB (a pool type of the node when it declares one).
        mem (int): memory in MB (likewise).
        numa (bool): False only: NUMA domains are not modelled here.
    """

    DEFAULTS = {
        "n_cores": 1,
        "core_occupation": BUSY,
        "n_gpus": 0,
        "gpu_occupation": BUSY,
        "lfs": 0,
        "mem": 0,
        "numa": False,
    }


class Slot(_Record):
    """Where one rank goes: its cores and GPUs (RO), lfs and mem, and its node."""

    DEFAULTS = {"cores": [], "gpus": [], "lfs": 0, "mem": 0, "node_index": 0, "node_name": ""}


class Node(_Record):
    """One node of a `NodeList`: RADICAL-Pilot 1.x's dict with attribute access.

    Args:
        from_dict (dict | None): the fields as a dict.
        **kwargs (Any): the fields, below.

    Keyword Args:
        index (int): the node's index.
        name (str): its name.
        cores (list): its cores: `RO(index=i, occupation=rp.FREE or rp.DOWN)`, or the
            occupations alone.
        gpus (list): its GPUs, as `cores`.
        lfs (int | None): local disk in MB, None for none.
        mem (int | None): memory in MB, None for none.
    """

    DEFAULTS = {"index": 0, "name": "", "cores": [], "gpus": [], "lfs": None, "mem": None}

    def as_pool(self) -> dict:
        """The node as agent/pool.py takes it (DOWN resources left out)."""
        ids: dict = {}
        for kind in ("cores", "gpus"):
            ids[kind] = []
            for i, ro in enumerate(self[kind]):
                ro = ro if isinstance(ro, dict) else RO(index=i, occupation=ro)
                if ro.get("occupation") is DOWN:
                    continue
                if ro.get("occupation") != FREE:
                    raise ValueError(
                        f"Node {self.name!r}: {kind}[{i}] occupation={ro.get('occupation')!r}: "
                        "a node's resources start FREE or DOWN here"
                    )
                ids[kind].append(ro["index"])
        pool = {t: [{"id": 0, "slots": self[t]}] for t in ("lfs", "mem") if self[t]}
        node = {"index": self.index, "name": self.name, "cores": ids["cores"]}
        return {**node, "gpus": ids["gpus"], "pool": pool}


class NodeList:
    """RADICAL-Pilot 1.x's node list over this project's resource pools: slots are found as
    the agent places a rank (best fit within a node), all or none.

    Args:
        from_dict (dict | None): `{"nodes": [...]}`.
        nodes (list | None): the nodes (`Node`s or their dicts), when `from_dict` is not given.

    Raises:
        ValueError: a node whose cores or GPUs start neither FREE nor DOWN.
    """

    def __init__(self, from_dict: dict | None = None, nodes: list | None = None) -> None:
        nodes = (from_dict or {}).get("nodes", nodes) or []
        self.nodes = [n if isinstance(n, Node) else Node(n) for n in nodes]
        self.pool = PartitionPool([n.as_pool() for n in self.nodes])
        self.held: dict[int, tuple] = {}  # id of a Slot -> (the Slot, its allocation)

    def find_slots(self, rr: RankRequirements, n_slots: int = 1) -> list[Slot] | None:
        """Slots for `n_slots` ranks of `rr`, all or none; they are held until released.

        Args:
            rr (RankRequirements): what each rank needs.
            n_slots (int): how many ranks.

        Returns:
            list[Slot] | None: a Slot per rank, or None when they do not fit now.

        Raises:
            ValueError: a request that can never fit, saying why.
        """
        request = _request(rr)
        never = self.pool.never_fits(dict(request, ranks=n_slots))
        if never:
            raise ValueError(f"find_slots: {never}")
        slots: list[Slot] = []
        for _ in range(n_slots):
            alloc = self.pool.allocate(request)
            if alloc is None:
                self.release_slots(slots)
                return None
            node, grant = alloc.ranks[0]
            slot = Slot(
                cores=[RO(index=i, occupation=a / SCALE) for i, a in grant.get("cpus", ())],
                gpus=[RO(index=i, occupation=a / SCALE) for i, a in grant.get("gpus", ())],
                lfs=rr.lfs,
                mem=rr.mem,
                node_index=node.index,
                node_name=node.name,
            )
            self.held[id(slot)] = (slot, alloc.aid)
            slots.append(slot)
        return slots

    def release_slots(self, slots: list[Slot]) -> None:
        """Give back slots `find_slots` found.

        Args:
            slots (list[Slot]): the slots, as `find_slots` returned them.
        """
        for slot in slots:
            self.pool.release(self.held.pop(id(slot))[1])


def _request(rr: RankRequirements) -> dict:
    """One rank of `rr` as agent/pool.py asks for it."""
    if rr.numa:
        raise ValueError("RankRequirements: numa=True is not supported: no NUMA domains here")
    out = {}
    for kind, n, occupation in (("cpus", rr.n_cores, rr.core_occupation),
                                ("gpus", rr.n_gpus, rr.gpu_occupation)):  # fmt: skip
        if occupation < BUSY and n > 1:
            raise ValueError(
                f"RankRequirements: {kind} occupation={occupation} of {n}: a share of one only"
            )
        out[kind] = n * occupation if n == 1 else n
    extra = {t: rr[t] for t in ("lfs", "mem") if rr[t]}
    if extra:
        out["resources"] = extra
    return out
