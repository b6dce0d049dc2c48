"""A pilot that grows and shrinks: the bootstrap's part (which jobs, and when they end).

A pilot submitted with max_nodes (ComputePilotDescription) may hold more than its first batch
job.  When a reconfig starts partitions that do not fit what is free, and they are sized in
nodes, cores or GPUs (a share or FILL is of what the pilot has: never a reason to grow), the
partition manager keeps them PENDING (`waiting`) and asks here: `plan` finds the fewest nodes
that fit them all (on a copy of the pilot's resources, with the nodes of jobs already asked for),
and asks the client for one job of that many (`grow` on the pilot link; the client submits it
through the batch system, pmgr/core/pilot_jobs.py).  Beyond max_nodes the partitions end FAILED with
the reason, and nothing else moves.

Jobs, by the pilot's own name for them (`job.NNNN`):
    asked      `grow` {job, nodes, hint, exclude, positions, endpoint, pulse, runtime,
               reason} sent (runtime: the s the pilot has left, the job's time limit)
               (endpoint, pulse: the node channel and pulse its daemons report to; positions:
               which of the resource's named nodes they are, _positions); the node channel expects
               `nodes` daemons from hint `hint` on (partition/nodes/joins.py)
    queued     the client said the batch system took it: `job` {job, state: queued, id}
    (each change of a job's state is told to the client: `jobs` {jobs, nodes})
    joined     its daemons came up and took the table: the pilot's resources have its nodes
               (PilotResources.add_nodes), and the waiting partitions are started in order; one that
               waited for this job and still does not fit ends FAILED with why
    released   every node of it idle for idle_after s (0: as soon as the partitions on them
               are stopped), or, still queued, no partition waits for it any more: its
               daemons halt, its nodes are given back (not lost), and the client is told
               `release` {job, reason}: it ends the job (scancel)
    failed     the client said the batch system refused it, or ended it before it joined
               (`job` {state: failed | ended, reason}), or said nothing of it for SUBMIT_WAIT s
               (the client died, or its answer was lost): the partitions waiting for it end
               FAILED with the reason (a job only queued waits as long as the pilot lives)
    ended      the batch system ended it after it joined (walltime, a failure): its nodes
               are lost (their units end FAILED with the reason, as for any lost node)
The pilot's first job is never given back while the pilot lives.  Every decision is logged
(grow:, release:) with its reason, and `jobs()` is what `hello` and the `partitions` command
say of them.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pilot import validate
from pilot.descriptions import FILL
from pilot.partition.resources import AllocationError, PilotResources
from pilot.wire.protocol import msg

if TYPE_CHECKING:
    from pilot.config.resource_keys import ResourceConfig
    from pilot.partition.manager import PartitionManager
    from pilot.partition.nodes.node_set import NodeSet

log = logging.getLogger("bootstrap.growth")
ASKED, QUEUED, JOINED, RELEASED, FAILED, ENDED = (
    "asked", "queued", "joined", "released", "failed", "ended",
)  # fmt: skip
LIVE = (ASKED, QUEUED, JOINED)
LOOK_EVERY = 0.2  # s between looks for jobs of no more use (tick)
SUBMIT_WAIT = 300.0  # s the client has to say the batch system took a job (`job` queued)


@dataclass
class Job:
    name: str
    nodes: int  # asked for
    reason: str  # why it was asked for
    state: str = ASKED
    batch_id: str | None = None
    indices: list[int] = field(default_factory=list)  # its nodes, once joined
    asked: float = field(default_factory=time.time)
    joined: float | None = None
    ended: float | None = None
    why_ended: str | None = None
    idle_since: float | None = None
    positions: list[int] = field(default_factory=list)  # of the resource's nodes (_positions)

    def to_dict(self, res: PilotResources) -> dict:
        return {
            "job": self.name,
            "nodes": self.nodes,
            "state": self.state,
            "id": self.batch_id,
            "names": [res.nodes[i].name for i in self.indices],
            "reason": self.reason,
            "asked": self.asked,
            "joined": self.joined,
            "ended": self.ended,
            "why_ended": self.why_ended,
        }


class Growth:
    """The jobs of one pilot beyond its first (the Bootstrap's `growth`)."""

    def __init__(
        self,
        uid: str,
        rcfg: ResourceConfig,
        nodeset: NodeSet | None,
        *,
        to_client: Callable[[list[bytes]], None],
        network_changed: Callable[[], None],
        nodes_up: Callable[[], dict],
        ending: Callable[[], bool],
        deadline: float,
        max_nodes: int | None,
        idle_after: float,
    ) -> None:
        """The pilot's uid, resource config and node set (None: no node daemons, no growth);
        what it asks of the bootstrap: `to_client(frames)`, `network_changed()` (nodes joined
        or were given back), `nodes_up()`, `ending()` (the pilot is ending: nothing is given
        back any more); `deadline` (monotonic) is when the pilot's runtime ends.  The pilot's
        resources and partition manager are bound later (`bind`), and again whenever the
        bootstrap makes them anew."""
        self.uid = uid
        self.rcfg = rcfg
        self.nodeset = nodeset
        self.to_client = to_client
        self.network_changed = network_changed
        self.nodes_up = nodes_up
        self.ending = ending
        self.deadline = deadline
        self.max_nodes = max_nodes
        self.idle_after = idle_after
        self.jobs: dict[str, Job] = {}
        self.next_look = 0.0  # (tick: not every turn of the loop)
        self.resources: PilotResources
        self.pm: PartitionManager
        if nodeset is not None:  # a job's nodes enter the pilot's resources as they are numbered
            nodeset.joins.numbered = self.numbered

    def bind(self, resources: PilotResources, pm: PartitionManager) -> None:
        """The pilot's resources and partition manager, as the bootstrap (re)made them."""
        self.resources = resources
        self.pm = pm

    def numbered(self, named: list) -> None:
        """(partition/nodes/joins.py) A job's nodes took the next node indices: the pilot's
        resources have them from now on, held back until the job joined (so its indices stay the
        NodeSet's, whichever job joins, fails or is given back first)."""
        self.resources.add_nodes(named, ready=False)

    @property
    def enabled(self) -> bool:
        return self.max_nodes is not None and self.nodeset is not None

    def may_grow_for(self, desc) -> bool:
        """A partition that does not fit may wait for nodes: sized in nodes, cores or GPUs."""
        return self.enabled and desc.share is None and desc.size != FILL

    def held(self) -> int:
        """Nodes the pilot has or has asked for: its own, and those of live jobs."""
        res = self.resources
        have = sum(1 for n in res.nodes if not n.released)
        return have + sum(j.nodes for j in self.jobs.values() if j.state in (ASKED, QUEUED))

    # -- growing --------------------------------------------------------------------------------
    def plan(self, parts: list, why: str | None = None) -> dict[str, str]:
        """`parts` (partition manager Parts, waiting, in order) did not fit: one job for the
        nodes they need, each part's `awaits` set to it.  Returns {uid: why} of those that
        cannot wait (beyond max_nodes): the caller ends them FAILED."""
        assert self.max_nodes is not None  # (asked of an enabled growth only: pm.growth)
        probe = self._probe()
        refused: dict[str, str] = {}
        wanted = 0
        fits = []
        for part in parts:
            need = self._fewest(probe, part.desc)
            room = self.max_nodes - self.held() - wanted
            if need is None or need > room:
                more = (
                    "more nodes than the resource has" if need is None else f"{need} more node(s)"
                )
                refused[part.uid] = (
                    f"does not fit the free resources, and growing the pilot for it needs "
                    f"{more}: max_nodes={self.max_nodes} leaves room for {room}"
                )
                continue
            self._add_fresh(probe, need)
            probe.allocate(part.desc)
            wanted += need
            fits.append(part)
        if not fits:
            return refused
        pending = [j for j in self.jobs.values() if j.state in (ASKED, QUEUED)]
        if wanted == 0 and pending:  # they fit on the nodes of jobs asked for: the last's
            job = pending[-1]
        elif wanted == 0:  # (they fit what is free after all)
            for part in fits:
                part.awaits = ""
            self.pm.start_waiting("")
            return refused
        else:
            job = self._ask(wanted, [p.uid for p in fits], why)
        for part in fits:
            part.awaits = job.name
        return refused

    def _probe(self) -> PilotResources:
        """A copy of the pilot's resources with the nodes of the jobs asked for, the partitions
        already waiting allocated on it in order."""
        probe = copy.deepcopy(self.resources)
        for job in self.jobs.values():
            if job.state in (ASKED, QUEUED):
                self._add_fresh(probe, job.nodes)
        for part in self.pm.waiting():
            if part.awaits is not None:
                try:
                    probe.allocate(part.desc)
                except AllocationError:
                    pass
        return probe

    def _fewest(self, probe: PilotResources, desc) -> int | None:
        """The fewest fresh nodes on which `desc` fits beside what `probe` holds (None: not
        even on as many as the resource has); more nodes never hurt: a binary search."""

        def fits(m: int) -> bool:
            trial = copy.deepcopy(probe)
            self._add_fresh(trial, m)
            try:
                trial.allocate(desc)
                return True
            except AllocationError:
                return False

        assert self.max_nodes is not None  # (plan's: an enabled growth)
        lo, hi = 0, max(self.rcfg.nodes, self.max_nodes)  # (beyond room: to say the need)
        if not fits(hi):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    @staticmethod
    def _add_fresh(res: PilotResources, m: int) -> None:
        start = len(res.nodes)
        res.add_nodes([(start + i, f"(fresh {start + i})", None) for i in range(m)])

    def _ask(self, nodes: int, uids: list[str], why: str | None) -> Job:
        name = f"job.{len(self.jobs) + 1:04d}"
        reason = f"partition(s) {', '.join(uids)} need {nodes} more node(s)"
        reason = f"{why}: {reason}" if why else reason
        job = Job(name, nodes, reason)
        self.jobs[name] = job
        assert self.nodeset is not None  # (plan's: an enabled growth)
        hint = self.nodeset.joins.expect(name, nodes)
        exclude = [n.name for n in self.resources.nodes if not n.released]
        log.info("grow: %s of %d node(s) asked for: %s", name, nodes, reason)
        ns = self.nodeset
        job.positions = self._positions(nodes)
        self.to_client(
            msg(b"grow", {"job": name, "nodes": nodes, "hint": hint, "exclude": exclude,
                          "positions": job.positions, "endpoint": ns.endpoint,
                          "pulse": ns.pulse.endpoint, "pulse_s": ns.pulse.period,
                          "reason": reason,
                          "runtime": max(60.0, self.deadline - time.monotonic())})
        )  # fmt: skip
        return job

    def _positions(self, nodes: int) -> list[int]:
        """Which of the resource's nodes (its node_names, hosts) a job's daemons are, where
        the resource names them (logical nodes, test hosts): the first that neither the
        pilot nor a job asked for holds.  (SLURM names the nodes it gives: srun ignores them.)"""
        rcfg = self.rcfg
        held = {n.name for n in self.resources.nodes if not n.released}
        taken = {p for j in self.jobs.values() if j.state in (ASKED, QUEUED) for p in j.positions}
        free = [p for p in range(rcfg.nodes) if p not in taken and rcfg.node_name(p) not in held]
        return free[:nodes] if len(free) >= nodes else []

    def joined(self, join) -> None:
        """(the loop) `join` (partition/nodes/joins.py) joined: its nodes into the pilot's
        resources, then the waiting partitions started in order."""
        job = self.jobs.get(join.job)
        if job is None or job.state not in (ASKED, QUEUED):
            return
        ns = self.nodeset
        assert ns is not None  # (a job of its own: asked for by an enabled growth)
        indices = sorted(join.index_of.values())
        for i in indices:
            if i not in ns.down:
                self.resources.bring_up(i)
        job.state, job.indices, job.joined = JOINED, indices, time.time()
        log.info("grow: %s joined: node(s) %s", job.name, [ns.label[i] for i in indices])
        self.network_changed()
        self.pm.start_waiting(job.name, "; ".join(join.missing))
        self.tell()

    # -- what the client says of a job ---------------------------------------------------------
    def on_job(self, body: dict) -> None:
        job = self.jobs.get(body["job"])
        if job is None:
            raise validate.bad("job.job", body["job"], f"a job {self.uid} asked for")
        assert self.nodeset is not None  # (a job of its own: asked for by an enabled growth)
        state, reason = body["state"], body.get("reason") or "no reason given"
        if state == QUEUED:
            job.batch_id = body.get("id")
            if job.state == ASKED:
                job.state = QUEUED
            log.info("grow: %s is batch job %s", job.name, job.batch_id)
            return
        if job.state in (RELEASED, FAILED, ENDED):
            return
        job.ended, job.why_ended = time.time(), reason
        if job.state == JOINED:
            job.state = ENDED
            why = f"job {job.name} (batch job {job.batch_id}) ended: {reason}"
            self.nodeset.joins.over(job.name, f"node lost: {why}")  # (check() loses them)
            log.error("grow: %s", why)
            self.tell()
            return
        job.state = FAILED
        for index in self.nodeset.joins.over(job.name, reason)[0]:  # (numbered, not joined)
            self.resources.mark_down(index)
        log.error("grow: %s failed: %s", job.name, reason)
        self.pm.fail_waiting(job.name, f"the job asked for its nodes failed: {reason}")
        self.tell()

    def tell(self) -> None:
        """`jobs` {jobs, nodes} to the client: what its Pilot's jobs and nodes say."""
        self.to_client(msg(b"jobs", {"jobs": self.describe(), "nodes": self.nodes_up()}))

    # -- shrinking -------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """(the loop) Give back the jobs that are of no more use (see the header)."""
        if not self.jobs or self.ending() or now < self.next_look:
            return
        self.next_look = now + LOOK_EVERY
        waiting = self.pm.waiting()
        if waiting and self.resources.free["cores"]:  # room came free: they may fit now
            self.pm.start_waiting("")
            waiting = self.pm.waiting()
        awaited = {p.awaits for p in waiting}
        # (a partition stopping may still have units on the nodes it let go of: wait for it)
        stopping = any(p.final is not None for p in self.pm.live())
        for job in self.jobs.values():
            if job.state == ASKED and time.time() - job.asked > SUBMIT_WAIT:
                why = (
                    f"the client did not say within {SUBMIT_WAIT:g} s that the batch system "
                    "took it (it died, or its answer was lost)"
                )
                self.release(job, why)  # (ended if it was submitted after all)
                job.state = FAILED
                self.pm.fail_waiting(job.name, f"the job asked for its nodes failed: {why}")
                self.tell()
            elif job.state in (ASKED, QUEUED) and job.name not in awaited:
                self.release(job, "no partition waits for its nodes any more")
            elif job.state == JOINED:
                nodes = self.resources.nodes
                live = [i for i in job.indices if not nodes[i].down]
                if not live:
                    self.release(job, "none of its nodes is left")
                elif all(nodes[i].wholly_free for i in live) and not stopping:
                    job.idle_since = job.idle_since or now
                    if now - job.idle_since >= self.idle_after:
                        idle = (
                            f"its node(s) held no partition for {now - job.idle_since:.0f} s"
                            if self.idle_after
                            else "no partition holds its node(s) any more"
                        )
                        self.release(job, idle)
                else:
                    job.idle_since = None

    def release(self, job: Job, reason: str) -> None:
        why = f"given back with job {job.name}: {reason}"
        assert self.nodeset is not None  # (a job of its own: asked for by an enabled growth)
        for index in self.nodeset.joins.release(job.name, why):
            self.resources.mark_down(index, released=True)
        if job.state == JOINED:
            self.network_changed()
        job.state, job.ended, job.why_ended = RELEASED, time.time(), reason
        log.info("release: %s: %s", job.name, reason)
        self.to_client(msg(b"release", {"job": job.name, "reason": reason}))
        self.tell()

    def describe(self) -> list[dict]:
        return [j.to_dict(self.resources) for j in self.jobs.values()]
