"""The agent's scheduler: a queue of units served onto the partition's resource pool.

`check(unit)` at arrival: the reason a unit can never run in this partition (FAILED at once),
or None.  `ready()` yields (unit, allocation) for queued units that fit now.

Order and starvation (aging): the queue is served oldest first, and units behind the oldest
waiting unit may start ahead of it (backfill) when they fit and it does not.  Each unit that
overtakes it ages it; after MAX_OVERTAKES overtakes nothing behind it starts until it has
started, so a large request is never starved by a stream of small ones: the pool drains until
it fits.  At most SCAN queued units are looked at per round.

Priority: a unit's `priority` (an integer, default 0) puts it ahead of every queued unit of a
lower one, behind those of its own or a higher one (a stable order).  `enqueue(unit)` appends;
when a unit of a higher priority than the queue's tail came (`tail`: the lowest priority queued
or held ahead by the runner since the last sort), `unsorted` is set: the agent takes back what
its runner holds ahead and `reorder()` (once per batch of arrivals) sorts the queue again;
units without priorities never pay for it.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from pilot.agent.pool import PartitionPool

if TYPE_CHECKING:
    from pilot.unit_record import UnitRecord

MAX_OVERTAKES = 64
SCAN = 256


class Scheduler:
    def __init__(self, nodes: list[dict], agent_node: int | None = 0) -> None:
        self.pool = PartitionPool(nodes, agent_node)
        self.queue: deque[UnitRecord] = deque()
        self._failed_shapes: set = set()
        self.unsorted = False  # a unit of a higher priority than the tail was appended
        # the priority of the queue's tail: its last unit in order, which may be held ahead by
        # the runner's lanes now (None: nothing queued or held since the last sort)
        self.tail: int | None = None

    def enqueue(self, unit: UnitRecord) -> None:
        p = unit.get("priority", 0)
        if self.tail is not None and p > self.tail:
            self.unsorted = True  # (the tail stays: it is still the queue's lowest)
        else:
            self.tail = p
        self.queue.append(unit)

    def reorder(self) -> None:
        """Higher priorities first, in their order of arrival among equals."""
        q = self.queue
        ranked = sorted(q, key=lambda u: -u.get("priority", 0))  # (sorted is stable)
        q.clear()
        q.extend(ranked)
        self.unsorted = False
        self.tail = ranked[-1].get("priority", 0) if ranked else None

    def check(self, unit: dict) -> str | None:
        return self.pool.never_fits(unit)

    def release(self, alloc) -> None:
        self.pool.release(alloc.aid)

    def ready(self):
        """Yield (unit, allocation) for queued units that fit now, oldest first."""
        q = self.queue
        if not q:
            return
        oldest_waiting = None
        misfits: set = set()  # shapes that did not fit in this round: skip their twins
        i = 0
        while i < len(q) and i < SCAN:
            if not self.pool.free_cpus:
                return  # every unit needs at least one whole core: nothing fits now
            unit = q[i]
            shape = _shape(unit)
            alloc = None if shape in misfits else self.pool.allocate(unit)
            if alloc is None:
                misfits.add(shape)
                if oldest_waiting is None:
                    oldest_waiting = unit
                    if unit.overtaken >= MAX_OVERTAKES:
                        return  # it has waited long enough: let the pool drain for it
                i += 1
                continue
            del q[i]
            if oldest_waiting is not None:
                oldest_waiting.overtaken += 1
            yield unit, alloc
            if oldest_waiting is not None and oldest_waiting.overtaken >= MAX_OVERTAKES:
                return


def _shape(unit: dict):
    pol = unit.get("policy")
    if not pol and not unit.get("resources"):  # (most units)
        return (unit.get("cpus", 1), unit.get("gpus", 0), unit.get("ranks", 1))
    pol = pol or {}
    return (
        unit.get("cpus", 1),
        unit.get("gpus", 0),
        unit.get("ranks", 1),
        tuple(sorted((unit.get("resources") or {}).items())),
        pol.get("placement"),
        pol.get("host_name"),
        pol.get("host_id"),
        tuple(pol.get("cpu_affinity") or ()),
        tuple(pol.get("gpu_affinity") or ()),
    )
