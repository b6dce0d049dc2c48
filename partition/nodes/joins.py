"""Nodes of a later batch job joining a running pilot: the bootstrap's side (NodeSet.joins).

A pilot grows by a job of its own (partition/growth.py decides, the client submits it:
pmgr/core/pilot_jobs.py).  That job runs partition/nodes/join_job.py, which starts one node daemon
per node of its allocation with hints `base` .. `base + count - 1` (`expect` hands out the range:
no two jobs of a pilot share a hint, and the first job's are 0 .. n-1).  The daemons report to
the same node channel and pulse as the first job's, with the same keys:
    up      {hint, pid, endpoint, node}   a hint of an expected job is taken (each once); the
                                          first one starts the job's clock: every daemon of it
                                          within bringup_timeout, or the job joins with those
                                          that came (the others are named in the log).  A
                                          daemon whose node name is a live node's of the pilot
                                          (the batch system gave a node twice) is refused and
                                          told to halt: the pilot's resources would count it twice.
    table   {index, width: k} + zlib(JSON)  to each of the job's k daemons, the table of its
                                          own nodes only (the nodes up before are not told:
                                          agents learn daemons' endpoints from the bootstrap)
    ready   {index}                       all of them, or bringup_timeout more: the job has
                                          joined (`check` returns it once), its nodes are the
                                          next node indices; the nodes that did not confirm are
                                          down from the start
A job that failed or ended before it joined is `over`: a late daemon of it is told to halt.
`release` gives a joined job's nodes back (their daemons halt, the nodes are down as
"released", never lost); `ended` loses them (the batch system ended the job): the NodeSet's
check() reports them like any lost node.
"""

from __future__ import annotations

import logging
import time
import zlib
from dataclasses import dataclass, field

from pilot.wire.protocol import msg, pack

log = logging.getLogger("bootstrap.nodes")
QUEUED, TABLED, JOINED, OVER = "queued", "tabled", "joined", "over"


@dataclass
class Join:
    job: str
    base: int
    count: int
    state: str = QUEUED
    up: dict[int, dict] = field(default_factory=dict)  # hint -> its `up` body
    index_of: dict[int, int] = field(default_factory=dict)  # hint -> node index (numbered)
    ready: set[int] = field(default_factory=set)  # hints that confirmed the table
    deadline: float | None = None  # set by the first `up`
    missing: list[str] = field(default_factory=list)  # what did not come, in words

    def has(self, hint: int) -> bool:
        return self.base <= hint < self.base + self.count


class Joins:
    """The joining jobs of one NodeSet (partition/nodes/node_set.py), by job name."""

    def __init__(self, nodeset, first_hint: int) -> None:
        self.ns = nodeset
        self.next_hint = first_hint
        self.by_job: dict[str, Join] = {}
        self.done: list[Join] = []  # joined since the last `check`
        # called with [(index, name, host_id)] as a job's nodes take their indices: the
        # bootstrap's resources take them in at once, held back until they joined
        # (PilotResources.add_nodes)
        self.numbered = lambda named: None

    def expect(self, job: str, count: int) -> int:
        """Daemons of `job`, `count` of them, are coming: their first hint."""
        join = Join(job, self.next_hint, count)
        self.next_hint += count
        self.by_job[job] = join
        return join.base

    def of_hint(self, hint: int) -> Join | None:
        return next((j for j in self.by_job.values() if j.has(hint)), None)

    def on_up(self, hint: int, body: dict) -> bool:
        """An `up` after bring-up: True when it is a joining job's (taken or refused)."""
        join = self.of_hint(hint)
        if join is None:
            return False
        if join.state != QUEUED or hint in join.up:
            why = f"job {join.job} is {join.state}" if join.state != QUEUED else "a second `up`"
            log.warning("join: daemon hint %d of job %s ignored (%s); told to halt", hint,
                        join.job, why)  # fmt: skip
            self.ns.send(hint, msg(b"halt", {"reason": f"not taken into the pilot: {why}"}))
            return True
        node = body.get("node")
        name = node.get("name") if isinstance(node, dict) else None
        live = {self.ns.table[i]["name"] for i in self.ns.table if i not in self.ns.down}
        if not isinstance(name, str) or not name:
            log.error("join: daemon hint %d of job %s: no node name in its `up`: ignored", hint,
                      join.job)  # fmt: skip
            return True
        if name in live:
            why = f"node {name} is in the pilot already (the batch system gave it twice)"
            log.error("join: daemon hint %d of job %s refused: %s", hint, join.job, why)
            join.missing.append(why)
            join.count -= 1  # (it will not come again)
            self.ns.send(hint, msg(b"halt", {"reason": f"not taken into the pilot: {why}"}))
        else:
            join.up[hint] = body
            self.ns.pulse.heard(hint)
        if join.deadline is None:
            join.deadline = time.monotonic() + self.ns.rcfg.bringup_timeout
        if len(join.up) >= join.count:
            self._table(join)
        return True

    def on_ready(self, hint: int) -> bool:
        join = self.of_hint(hint)
        if join is None or join.state != TABLED or hint not in join.index_of:
            return False
        join.ready.add(hint)
        self.ns.pulse.heard(hint)
        if join.ready >= set(join.index_of):
            self._joined(join)
        return True

    def _table(self, join: Join) -> None:
        """The daemons that came up take the next node indices and get their table."""
        ns = self.ns
        if len(join.up) < join.count:
            join.missing.append(
                f"{join.count - len(join.up)} of its {join.count} daemon(s) did not report up "
                f"within {ns.rcfg.bringup_timeout:g} s (bringup_timeout)"
            )
        for hint in sorted(join.up):
            body = join.up[hint]
            index = len(ns.index_of)
            join.index_of[hint] = index
            ns.index_of[hint] = index
            ns.by_hint[hint] = body
            node = dict(body["node"], is_primary=False, state="up")
            ns.nodes[index] = node
            ns.label[index] = node["name"]
            ns.table[index] = {
                "name": node["name"],
                "host_id": node.get("host_id", index),
                "endpoint": body["endpoint"],
            }
        self.numbered(
            [(i, ns.label[i], ns.table[i]["host_id"]) for i in sorted(join.index_of.values())]
        )
        join.state = TABLED
        if not join.index_of:
            self._joined(join)
            return
        own = {i: ns.table[i] for i in join.index_of.values()}
        blob = zlib.compress(pack(own), 6)
        width = len(own)  # every one from the bootstrap: none forwards
        for hint, index in join.index_of.items():
            ns.send(hint, [b"table", pack({"index": index, "width": width}), blob])
        join.deadline = time.monotonic() + ns.rcfg.bringup_timeout
        log.info("join: job %s: %d node(s) up, table sent", join.job, len(own))

    def _joined(self, join: Join) -> None:
        late = [h for h in join.index_of if h not in join.ready]
        for hint in late:
            index = join.index_of[hint]
            why = (
                f"node {self.ns.label[index]} of job {join.job} did not confirm the channel "
                f"table within {self.ns.rcfg.bringup_timeout:g} s (bringup_timeout)"
            )
            join.missing.append(why)
            self.ns.down[index] = why
            self.ns.lost_reported.add(index)
            self.ns.send(hint, msg(b"halt", {"reason": why}))
        join.state = JOINED
        self.done.append(join)
        log.info(
            "join: job %s joined with node(s) %s%s",
            join.job,
            sorted(join.index_of.values()),
            f"; {'; '.join(join.missing)}" if join.missing else "",
        )

    def check(self) -> list[Join]:
        """The jobs that joined since the last call (each once); joins past their deadline
        go on with the daemons that came."""
        now = time.monotonic()
        for join in list(self.by_job.values()):
            if join.deadline is None or now < join.deadline:
                continue
            if join.state == QUEUED:
                self._table(join)
            elif join.state == TABLED:
                self._joined(join)
        done, self.done = self.done, []
        return done

    def over(self, job: str, why: str) -> tuple[list[int], bool]:
        """The batch system ended `job` (or never ran it): its nodes are down with `why`;
        returns (their indices, whether it had joined).  Nodes that joined are lost (check()
        reports them: their units end FAILED); nodes that had not are only taken out."""
        join = self.by_job.get(job)
        if join is None:
            return [], False
        joined = join.state == JOINED
        out = []
        for hint, index in join.index_of.items():
            if index not in self.ns.down:
                self.ns.down[index] = why
                out.append(index)
                if not joined:
                    self.ns.lost_reported.add(index)
                    self.ns.pulse.lost(hint, why)
        if not joined:
            join.state = OVER
            self._halt_unnumbered(join, why)
        return out, joined

    def _halt_unnumbered(self, join: Join, why: str) -> None:
        """Daemons of `join` that said `up` but got no index: told to halt."""
        for hint in join.up:
            if hint not in join.index_of:
                self.ns.send(hint, msg(b"halt", {"reason": f"not taken into the pilot: {why}"}))

    def release(self, job: str, why: str) -> list[int]:
        """Give `job`'s nodes back: their daemons halt; the nodes are down, not lost.  Returns
        the indices of all its nodes (those down before too: they go back with it)."""
        join = self.by_job.get(job)
        if join is None:
            return []
        out = []
        for hint, index in join.index_of.items():
            out.append(index)
            if index in self.ns.down:
                continue
            self.ns.down[index] = why
            self.ns.lost_reported.add(index)
            self.ns.pulse.lost(hint, why)
            self.ns.send(hint, msg(b"halt", {"reason": why}))
        join.state = OVER
        self._halt_unnumbered(join, why)
        return out
