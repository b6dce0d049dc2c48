"""Resource pools with slots: what a partition's agent places units onto.

Per node, a pool of types (`cpus`, `gpus`, any user-defined type), each a list of instances
{id, slots}.  Capacity is kept in thousandths of a slot, so fractions of a slot add up exactly
(two 0.5-GPU requests share one slot of one GPU).  A request asks, per rank, for counts per
type: a whole number of slots, or a fraction 0 < x < 1 of one slot.

    allocate(request)   all ranks placed or none (every rank's fit is checked on copies first,
                        then committed); returns an Allocation with an id, or None (wait)
    release(aid)        returns exactly what that allocation took; a second release raises
    never_fits(request) the reason a request can never fit this partition, or None
    remove_node(index)  a node lost: never offered again (the partition goes on with the rest)

Within a node, instances are chosen best-fit: the instance with the least free capacity that
holds the whole request, or else the fullest ones first, which keeps whole instances whole for
larger requests.

Node choice follows the unit's policy: LOCAL (the agent's node), HOST_NAME / HOST_ID (that node),
else the distribution: BLOCK takes the node with the fewest free cores that fits (fills a node
before the next), ROUNDROBIN the node with the most free cores, rotating among equals, so
consecutive units land on consecutive nodes.  Nodes are indexed by free whole cores (one bucket
per count), so a decision costs O(cores per node), not O(nodes).

What grows with nodes and cores: a node's own state is O(types), a few ints and dicts (its
wholly free instances are the bits of one int a type; only instances partly held, fractions of
a slot, have an entry), and what every node of one shape has alike (its instances' ids and
capacity) is one shared Layout: ~1 KB a node of 128 cores and 8 GPUs idle, against ~20 KB when
each node kept a dict entry per instance three times.  The buckets hold each node once; the
allocations held, one entry each.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal, cast

SCALE = 1000


def need_of(amount) -> int:
    return round(amount * SCALE)


class Layout:
    """What nodes of one shape share, read-only: each type's instances and their capacity
    (`cap`), which types have one slot an instance (`single`), and for those the instances'
    ids by bit position (`ids`, `bit`).  One object for every node alike (`layout_of`): a
    pilot's nodes are mostly of one shape, so a node's own state is only what is in use."""

    __slots__ = ("cap", "single", "ids", "bit", "whole")

    def __init__(self, types: dict) -> None:
        self.cap = {t: {i["id"]: i["slots"] * SCALE for i in inst} for t, inst in types.items()}
        self.single = frozenset(
            t for t, cap in self.cap.items() if all(c == SCALE for c in cap.values())
        )
        self.ids = {t: tuple(self.cap[t]) for t in self.single}
        self.bit = {t: {i: 1 << k for k, i in enumerate(ids)} for t, ids in self.ids.items()}
        self.whole = {t: sum(c // SCALE for c in cap.values()) for t, cap in self.cap.items()}


_LAYOUTS: dict[tuple, Layout] = {}


def layout_of(node: dict) -> Layout:
    """The Layout of a node's descriptor, shared with every node of the same shape."""
    pool = node.get("pool") or {}
    gpus = None if "gpus" in pool else tuple(node.get("gpus", ()))
    key = (
        tuple(node["cores"]),
        gpus,
        tuple((t, tuple((i["id"], i["slots"]) for i in inst)) for t, inst in pool.items()),
    )
    found = _LAYOUTS.get(key)
    if found is None:
        types = {"cpus": [{"id": c, "slots": 1} for c in node["cores"]]}
        types.update(pool)
        if gpus is not None:
            types["gpus"] = [{"id": g, "slots": 1} for g in gpus]
        if len(_LAYOUTS) >= 256:  # (a pilot has a few shapes; a long-lived process many pilots)
            _LAYOUTS.clear()
        found = _LAYOUTS[key] = Layout(types)
    return found


class NodePool:
    """One node's pool.  Kept incrementally, so a decision never walks a type's instances when
    it does not have to: `whole[t]` counts whole free slots.  A type whose instances all have
    one slot (cores, most GPUs) keeps its wholly free instances as the set bits of `mask[t]`
    (bit k: the layout's k-th instance; the lowest go first) and those partly held in
    `part[t]` (id -> thousandths held), so an idle node holds a few ints and empty dicts
    (~1 KB at 128 cores, measured in tests/test_pool.py), not a dict an instance; other types
    (instances of several slots) keep every instance's free thousandths in `multi[t]`."""

    __slots__ = (
        "index", "name", "host_id", "layout", "cap", "whole", "mask", "part", "multi", "ranks",
        "gone",
    )  # fmt: skip

    def __init__(self, node: dict) -> None:
        self.index = node["index"]
        self.name = node["name"]
        self.host_id = node.get("host_id", node["index"])
        layout = self.layout = layout_of(node)
        self.cap = layout.cap  # (shared: never changed)
        self.whole = dict(layout.whole)
        self.mask = {t: (1 << len(ids)) - 1 for t, ids in layout.ids.items()}
        self.part: dict[str, dict] = {t: {} for t in layout.single}
        self.multi = {t: dict(c) for t, c in layout.cap.items() if t not in layout.single}
        self.ranks = 0  # ranks placed here now (`load`)
        self.gone = False  # lost with its node: nothing more is placed here (remove_node)

    @property
    def free_cpus(self) -> int:
        return self.whole["cpus"]

    @property
    def free(self) -> dict:
        """{type: {id: free thousandths}}: every instance, now (a copy)."""
        out = {}
        for t in self.cap:
            multi = self.multi.get(t)
            if multi is not None:
                out[t] = dict(multi)
                continue
            mask, part = self.mask[t], self.part[t]
            out[t] = {
                i: SCALE if mask & b else SCALE - part.get(i, SCALE)
                for i, b in self.layout.bit[t].items()
            }
        return out

    def take(self, req: dict, cpu_ids=None, gpu_ids=None) -> dict | None:
        """Best-fit grant {type: [(id, amount)]} for one rank, or None (nothing changed)."""
        grant = {}
        single = self.layout.single
        for t, amount in req.items():
            if not amount:
                continue
            if t not in self.cap:
                return None
            pinned = cpu_ids if t == "cpus" else gpu_ids if t == "gpus" else None
            got: list | None
            if pinned is not None and len(set(pinned)) != len(pinned):
                return None  # (an id named twice: never granted twice; never_fits says so)
            if t not in single:
                got = _pick(self.multi[t], need_of(amount), amount, pinned)
            elif pinned is not None:  # affinity: exactly these instances, a whole slot each
                bits, mask = self.layout.bit[t], self.mask[t]
                if not all(mask & bits.get(i, 0) for i in pinned):
                    return None
                got = [(i, SCALE) for i in pinned]
            elif amount >= 1:
                k = int(amount)
                if self.whole[t] < k:
                    return None
                got = _lowest(self.mask[t], k, self.layout.ids[t])
            else:
                got = self._fraction(t, need_of(amount))
            if got is None:
                return None
            grant[t] = got
        for t, got in grant.items():
            self._change(t, got, -1)
        return grant

    def _fraction(self, t: str, need: int) -> list | None:
        """Best fit for a fraction of one slot of a single-slot type: the fullest instance
        partly held that holds it, else the first wholly free one; O(instances partly held)."""
        best, most = None, SCALE  # (a partly held instance has less than a slot free)
        for i, held in self.part[t].items():
            f = SCALE - held
            if need <= f < most:
                best, most = i, f
        if best is None:
            mask = self.mask[t]
            if not mask:
                return None
            best = self.layout.ids[t][(mask & -mask).bit_length() - 1]
        return [(best, need)]

    def give(self, grant: dict) -> None:
        for t, got in grant.items():
            self._change(t, got, +1)

    def _change(self, t: str, got: list, sign: int) -> None:
        multi = self.multi.get(t)
        if multi is not None:
            for i, a in got:
                before = multi[i]
                multi[i] = before + sign * a
                self.whole[t] += (before + sign * a) // SCALE - before // SCALE
            return
        bits, part = self.layout.bit[t], self.part[t]
        mask = self.mask[t]
        whole = 0
        for i, a in got:
            b = bits[i]
            if a == SCALE and not part:  # a whole instance, none held in part: the usual case
                mask ^= b  # (taken: it was wholly free; given back: it was wholly held)
                whole += sign
                continue
            before = SCALE if mask & b else SCALE - part.get(i, SCALE)
            after = before + sign * a
            whole += after // SCALE - before // SCALE
            if after == SCALE:
                mask |= b
                part.pop(i, None)
            else:
                mask &= ~b
                if after:
                    part[i] = SCALE - after
                else:
                    part.pop(i, None)
        self.mask[t] = mask
        self.whole[t] += whole


def _lowest(mask: int, k: int, ids: tuple) -> list:
    """The first k instances whose bits are set in `mask`, a whole slot each."""
    got = []
    for _ in range(k):
        low = mask & -mask
        got.append((ids[low.bit_length() - 1], SCALE))
        mask ^= low
    return got


def _pick(free: dict, need: int, amount, pinned) -> list | None:
    """Instances for one type's request, best fit, or None; `free` is not changed."""
    if pinned is not None:  # affinity: exactly these instances, a whole slot each
        if any(free.get(i, -1) < SCALE for i in pinned):
            return None
        return [(i, SCALE) for i in pinned]
    best = None  # the fullest instance that holds it all
    for i, f in free.items():
        if f >= need and (best is None or f < free[best]):
            best = i
            if f == need:
                break
    if best is not None:
        return [(best, need)]
    if amount < 1:
        return None  # a fraction never spans instances
    whole = int(amount)
    if sum(f // SCALE for f in free.values()) < whole:
        return None
    got = []  # no single instance holds it: whole slots, fullest instances first
    for i, f in sorted(free.items(), key=lambda kv: kv[1]):
        k = min(f // SCALE, whole)
        if k:
            got.append((i, k * SCALE))
            whole -= k
            if not whole:
                break
    return got


@dataclass
class Allocation:
    aid: int
    ranks: list  # [(NodePool, grant)] per rank


class PartitionPool:
    def __init__(self, nodes: list[dict], agent_node: int | None = None) -> None:
        self.nodes = [NodePool(n) for n in nodes]
        self.lost_why: list[str] = []  # why each node removed was lost (remove_node)
        self._fits: dict[tuple, str | None] = {}  # never_fits of plain requests
        self.by_name = {n.name: n for n in self.nodes}
        self.by_host_id = {n.host_id: n for n in self.nodes}
        self.agent_node = agent_node  # index into nodes of the agent's node (LOCAL), or None
        self.max_cpus = max((len(n.cap["cpus"]) for n in self.nodes), default=0)
        self.buckets: list[dict] = [dict() for _ in range(self.max_cpus + 1)]
        for n in self.nodes:
            self.buckets[n.free_cpus][n] = None
        self.free_cpus = sum(n.free_cpus for n in self.nodes)  # whole free cores, all nodes
        self.active: dict[int, Allocation] = {}
        self._ids = itertools.count()
        self.types = sorted({t for n in self.nodes for t in n.cap})

    # -- placement ------------------------------------------------------------------------------
    def allocate(self, request: dict) -> Allocation | None:
        pol = request.get("policy") or {}
        per_rank = {"cpus": request.get("cpus", 1), "gpus": request.get("gpus", 0)}
        ranks: list[tuple[NodePool, dict]] = []
        for r in range(request.get("ranks", 1)):
            req = dict(per_rank, **(request.get("resources") or {})) if r == 0 else per_rank
            placed = self._place(req, pol)
            if placed is None:
                for n, g in ranks:  # all or nothing
                    self._give(n, g)
                return None
            ranks.append(placed)
        alloc = Allocation(next(self._ids), ranks)
        self.active[alloc.aid] = alloc
        return alloc

    def release(self, aid: int) -> None:
        alloc = self.active.pop(aid, None)
        if alloc is None:
            raise ValueError(f"release of allocation {aid}: not held (released twice?)")
        if not self.active:  # (an emptied dict keeps the table of the most it ever held)
            self.active = {}
        for node, grant in alloc.ranks:
            self._give(node, grant)

    def remove_node(self, index: int, why: str | None = None) -> bool:
        """The node of pilot index `index` is lost (`why`: the reason, which a unit that can
        never fit without it is told): nothing more is placed there, and what its allocations
        give back on release is not offered again.  False if no node of this pool has that
        index (or it is gone already)."""
        node = next((n for n in self.nodes if n.index == index and not n.gone), None)
        if node is None:
            return False
        node.gone = True
        self.lost_why.append(why or f"node {node.name} lost")
        del self.buckets[node.free_cpus][node]
        self.free_cpus -= node.free_cpus
        self.by_name.pop(node.name, None)
        self.by_host_id.pop(node.host_id, None)
        self._fits.clear()
        return True

    def live_nodes(self) -> list[NodePool]:
        return [n for n in self.nodes if not n.gone]

    def _take(self, node: NodePool, req: dict, pol: dict):
        if node.gone:
            return None
        before = node.free_cpus
        grant = node.take(req, pol.get("cpu_affinity"), pol.get("gpu_affinity"))
        if grant is not None:
            node.ranks += 1
        if grant is not None and node.free_cpus != before:
            self._moved(node, before)
        return grant

    def _give(self, node: NodePool, grant: dict) -> None:
        before = node.free_cpus
        node.give(grant)
        node.ranks -= 1
        if node.free_cpus != before and not node.gone:
            self._moved(node, before)

    def _moved(self, node: NodePool, before: int) -> None:
        """`node` had `before` free cores and has node.free_cpus now: its bucket changes."""
        bucket = self.buckets[before]
        del bucket[node]
        if not bucket:  # (an emptied dict keeps its table: a full load sweeping the nodes
            self.buckets[before] = {}  # through every count would leave each as large as all)
        self.buckets[node.free_cpus][node] = None
        self.free_cpus += node.free_cpus - before

    def _pinned_node(self, pol: dict) -> NodePool | None | Literal[False]:
        placement = pol.get("placement")
        if placement == "HOST_NAME":
            return self.by_name.get(pol.get("host_name"))
        if placement == "HOST_ID":
            return self.by_host_id.get(pol.get("host_id"))
        if placement == "LOCAL":
            node = None if self.agent_node is None else self.nodes[self.agent_node]
            return None if node is None or node.gone else node
        return False  # not pinned

    def _place(self, req: dict, pol: dict):
        """(node, grant) for one rank, chosen and taken, or None."""
        pinned = self._pinned_node(pol)
        if pinned is not False:
            if pinned is None:
                return None
            grant = self._take(pinned, req, pol)
            return None if grant is None else (pinned, grant)
        cpus = req.get("cpus", 1)
        whole = int(cpus) if cpus >= 1 else (1 if cpus else 0)
        if pol.get("distribution") == "BLOCK":
            order = range(whole, self.max_cpus + 1)
        else:
            order = range(self.max_cpus, whole - 1, -1)
        tries = 0
        rotate = pol.get("distribution") != "BLOCK"
        buckets = self.buckets
        for k in order:
            bucket = buckets[k]
            if not bucket:
                continue
            first = next(iter(bucket))  # usually the first one fits: no snapshot needed
            if rotate:
                del bucket[first]
                bucket[first] = None
            grant = self._take(first, req, pol)
            if grant is not None:
                return first, grant
            for node in list(itertools.islice(bucket, 65)):  # a snapshot: the loop moves nodes
                if node is first:
                    continue
                if rotate:  # equals go round in turn: move it behind the others first
                    del bucket[node]
                    bucket[node] = None
                grant = self._take(node, req, pol)
                if grant is not None:
                    return node, grant
                tries += 1
                if tries > 64 and k != order[-1]:
                    break  # this count is crowded with misfits: try the next one
        return None

    # -- admission ------------------------------------------------------------------------------
    def load(self) -> list[list[int]]:
        """[[node index, busy cores, busy GPUs, ranks], ...] of every node, now (a core or
        GPU partly held counts as busy)."""
        out = []
        for n in self.live_nodes():
            busy_g = len(n.cap.get("gpus") or ()) - n.whole.get("gpus", 0)
            out.append([n.index, len(n.cap["cpus"]) - n.whole["cpus"], busy_g, n.ranks])
        return out

    def never_fits(self, request: dict) -> str | None:
        if "policy" in request or "resources" in request:
            return self._never_fits(request)
        key = (request.get("cpus", 1), request.get("gpus", 0), request.get("ranks", 1))
        try:  # answers are kept: they change only when a node is lost (remove_node clears them)
            return self._fits[key]
        except KeyError:
            if len(self._fits) >= 1024:
                self._fits.clear()
            found = self._fits[key] = self._never_fits(request)
            return found

    def _never_fits(self, request: dict) -> str | None:
        pol = request.get("policy") or {}
        per_rank = {"cpus": request.get("cpus", 1), "gpus": request.get("gpus", 0)}
        extra = request.get("resources") or {}
        for t in extra:
            if t not in self.types:
                return (
                    f"resources={{{t!r}: ...}}: type {t!r} is not declared in this partition "
                    f"(declared: {', '.join(self.types)})"
                )
        pinned = self._pinned_node(pol)
        if pinned is None:
            what = {
                "HOST_NAME": f"host_name={pol.get('host_name')!r}",
                "HOST_ID": f"host_id={pol.get('host_id')!r}",
                "LOCAL": "placement=LOCAL",
            }[cast(str, pol.get("placement"))]  # (pinned None: one of these)
            return (
                f"{what}: no such node in this partition (nodes: "
                f"{', '.join(n.name for n in self.live_nodes())})"
                if pol.get("placement") != "LOCAL"
                else "placement=LOCAL: the agent's node holds no unit slots"
            )
        candidates = [pinned] if pinned is not False else self.live_nodes()
        if not candidates:
            return "every node of this partition is lost"
        for key, t in (("cpu_affinity", "cpus"), ("gpu_affinity", "gpus")):
            ids = pol.get(key)
            if ids is not None and len(set(ids)) != len(ids):
                return f"policy.{key}={ids}: names an id more than once"
            if ids is not None and not any(all(i in n.cap[t] for i in ids) for n in candidates):
                return (
                    f"policy.{key}={ids}: not all in this partition's {t} on "
                    f"{'node ' + candidates[0].name if len(candidates) == 1 else 'any node'}"
                )
        empty = [_capacity_ranks(n, dict(per_rank, **extra), pol) for n in candidates]
        rank0 = any(c >= 1 for c in empty)
        others = sum(_capacity_ranks(n, per_rank, pol) for n in candidates)
        if not rank0 or others < request.get("ranks", 1):
            if pinned is not False:  # (its pin is why: the partition may hold it elsewhere)
                where = f"the node it is pinned to, {pinned.name} ({_pin(pol)})"
                return (
                    f"{_describe(per_rank, extra, request.get('ranks', 1))} can never fit on "
                    f"{where}: it holds {self._describe_nodes([pinned])}"
                )
            return (
                f"{_describe(per_rank, extra, request.get('ranks', 1))} can never fit: "
                f"the partition's nodes hold {self._describe_nodes()}"
            )
        return None

    def _describe_nodes(self, among: list | None = None) -> str:
        live = self.live_nodes() if among is None else among
        n = max(live, key=lambda n: len(n.cap["cpus"]))
        parts = [f"{len(n.cap[t])} {t} ({sum(n.cap[t].values()) // SCALE} slots)" for t in n.cap]
        if among is not None:
            return ", ".join(parts)
        lost = len(self.nodes) - len(live)
        why = "; ".join(self.lost_why[:2]) + ("; ..." if len(self.lost_why) > 2 else "")
        return f"at most {', '.join(parts)} per node, {len(live)} node(s)" + (
            f" ({lost} lost: {why})" if lost else ""
        )


def _capacity_ranks(node: NodePool, req: dict, pol: dict) -> int:
    """How many such ranks an empty node holds (0 if none)."""
    best = None
    for t, amount in req.items():
        if not amount:
            continue
        cap = node.cap.get(t)
        if cap is None:
            return 0
        pinned = (
            pol.get("cpu_affinity")
            if t == "cpus"
            else (pol.get("gpu_affinity") if t == "gpus" else None)
        )
        if pinned is not None:
            k = 1 if all(cap.get(i, 0) >= SCALE for i in pinned) else 0
        elif amount < 1:
            k = sum(c // need_of(amount) for c in cap.values())
        else:
            k = sum(c // SCALE for c in cap.values()) // int(amount)
        best = k if best is None else min(best, k)
    return 1 if best is None else best


def _pin(pol: dict) -> str:
    placement = pol.get("placement")
    if placement == "HOST_NAME":
        return f"policy.host_name={pol.get('host_name')!r}"
    if placement == "HOST_ID":
        return f"policy.host_id={pol.get('host_id')!r}"
    return "placement=LOCAL: the agent's node"


def _describe(per_rank: dict, extra: dict, ranks: int) -> str:
    parts = [f"cores={per_rank['cpus']}", f"gpus={per_rank['gpus']}"]
    parts += [f"{t}={v}" for t, v in extra.items()]
    return ", ".join(parts) + (f" x {ranks} ranks" if ranks > 1 else "")
