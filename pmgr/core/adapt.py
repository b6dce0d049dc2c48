"""An adaptive pilot's policy (ComputePilotDescription(adapt=rp.Adapt(...))): the client grows
the pilot while units wait for room and gives nodes back when they idle, by reconfigs.

Looked at every tick of the pilot (pmgr/core/pilot.py: channel thread, session lock held,
about once a second), while the pilot is ACTIVE and not ending:
    waiting   units of its UnitManager waiting at the client for room (routing's queue) plus
              the units its partitions hold beyond their cores (queued in their agents), in
              units; each counted as Adapt.cores_per_unit cores (default 1)
    grow      units waited for grow_after s without a break, no grow of this policy is still
              PENDING or STARTING, and the pilot holds fewer than max_nodes: a reconfig starts
              one partition of k nodes, k = the waiting cores over a node's cores, rounded up,
              at most what max_nodes leaves; the pilot's bootstrap asks for a batch job of the
              nodes it lacks (partition/growth.py).  Below min_nodes it grows to min_nodes at
              once, waiting units or not.
    shrink    a partition this policy started that held no unit for idle_after s, while no
              unit waits, is stopped (if the pilot keeps min_nodes without it); the job
              whose nodes it held is then given back by the bootstrap.  The pilot's own
              partitions are never stopped here.
    refused   a grow that ended FAILED (the batch system refused its job, or it ended before
              it joined): the next grow (to min_nodes too) comes grow_after x 2, 4, ... s after
              the last (at most BACKOFF_MAX s), until one becomes ACTIVE
Every decision is logged (`adapt:`) with its reason, kept in `decisions` (Pilot.adapt_log,
stored with the pilot), and carried as the reconfig's reason: the reason of the job asked
for (Pilot.jobs, `pilot top`) and of the partition stopped (its CANCELED reason).
"""

from __future__ import annotations

import logging
import math
import time

from pilot import states as S
from pilot.descriptions import ComputePartitionDescription

log = logging.getLogger("pmgr.pilots")
DECISIONS_KEPT = 1000
BACKOFF_MAX = 600.0  # s: the longest wait after grows the batch system refused


class AdaptPolicy:
    def __init__(self, pilot, adapt, max_nodes: int) -> None:
        self.pilot = pilot
        self.adapt = adapt
        self.max_nodes = max_nodes
        self.min_nodes = adapt.min_nodes or pilot.size["nodes"]
        self.grown: dict[str, float | None] = {}  # partition uid -> idle since (None: busy)
        self.waited_since: float | None = None
        self.decisions: list[dict] = []  # {ts, action, nodes, reason}
        self.refused = 0  # grows in a row that ended FAILED (the batch system refused them)
        self.last_grow = float("-inf")  # when it last grew (monotonic)

    def tick(self, now: float) -> None:
        pilot = self.pilot
        if pilot.state != S.ACTIVE or pilot.ending or not pilot.linked:
            return
        parts = {uid: pilot.parts[uid] for uid in self.grown if uid in pilot.parts}
        growing = any(p.state in (S.NEW, S.PENDING, S.STARTING) for p in parts.values())
        held = self.held()
        self._count_refused(parts)
        # (a grow refused: wait twice as long before the next, and so on, at most BACKOFF_MAX)
        patience = min(self.adapt.grow_after * 2**self.refused, BACKOFF_MAX) if self.refused else 0
        if held < self.min_nodes and not growing:
            if now >= self.last_grow + patience:
                self._grow(self.min_nodes - held, f"the pilot holds {held} node(s), min_nodes "
                           f"is {self.min_nodes}")  # fmt: skip
                self.last_grow = now
            return
        waiting = self.waiting()
        if waiting:
            self.waited_since = self.waited_since or now
        else:
            self.waited_since = None
        if waiting and not growing and held < self.max_nodes:
            waited = now - (self.waited_since or now)
            if waited >= self.adapt.grow_after and now >= self.last_grow + patience:
                cores = waiting * (self.adapt.cores_per_unit or 1)
                per_node = max(pilot.size["cores_per_node"], 1)
                k = min(math.ceil(cores / per_node), self.max_nodes - held)
                self._grow(k, f"{waiting} unit(s) waited {waited:.0f} s for room "
                           f"({cores} core(s))")  # fmt: skip
                self.waited_since = None
                self.last_grow = now
                return
        self._shrink(now, parts, waiting, held)

    def _count_refused(self, parts: dict) -> None:
        """Grows that ended FAILED, in a row: the next waits longer (tick)."""
        for uid, part in parts.items():
            if part.final and self.grown.get(uid, 0) is None:
                self.refused = self.refused + 1 if part.state == S.FAILED else 0
                self.grown[uid] = -1.0  # (counted once; _shrink forgets it)
            elif part.state == S.ACTIVE and self.refused:
                self.refused = 0

    def held(self) -> int:
        """Nodes the pilot holds or has asked for (its jobs, not given back or ended)."""
        jobs = self.pilot.extra_jobs.describe()
        return self.pilot.size["nodes"] + sum(
            int(j.get("nodes") or 0) for j in jobs[1:] if j.get("state") in ("asked", "queued",
                                                                               "joined")
        )  # fmt: skip

    def waiting(self) -> int:
        """Units waiting for room: at the client, and queued beyond cores in its partitions."""
        pilot = self.pilot
        per_unit = self.adapt.cores_per_unit or 1
        queued = sum(
            max(0, p.outstanding - p.cores // per_unit)
            for p in pilot.parts.values()
            if p.state == S.ACTIVE
        )
        client = pilot.umgr.waiting() if pilot.umgr is not None else 0
        return queued + client

    def _grow(self, k: int, why: str) -> None:
        reason = f"adapt: grow by {k} node(s): {why}"
        [part] = self.pilot.reconfig(start=ComputePartitionDescription(nodes=k), reason=reason)
        self.grown[part.uid] = None
        self._said("grow", k, reason)

    def _shrink(self, now: float, parts: dict, waiting: int, held: int) -> None:
        for uid, part in parts.items():
            if part.final or not part.accepting:  # (ended, or its stop is on its way)
                if part.final:
                    self.grown.pop(uid, None)
                continue
            if part.state != S.ACTIVE or part.outstanding or waiting:
                self.grown[uid] = None
                continue
            since = self.grown[uid] = self.grown[uid] or now
            nodes = len((part.resources or {}).get("nodes") or [])
            if now - since < self.adapt.idle_after or held - nodes < self.min_nodes:
                continue
            reason = f"adapt: shrink by {nodes} node(s): {uid} held no unit for {now - since:.0f} s"
            self.pilot.reconfig(stop=uid, reason=reason)
            self._said("shrink", nodes, reason)
            return

    def _said(self, action: str, nodes: int, reason: str) -> None:
        log.info("%s: %s", self.pilot.uid, reason)
        self.decisions.append({"ts": time.time(), "action": action, "nodes": nodes,
                               "reason": reason})  # fmt: skip
        del self.decisions[:-DECISIONS_KEPT]
