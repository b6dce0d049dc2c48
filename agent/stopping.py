"""How an agent ends units before they end on their own: cancel and stop, and its last words.

The agent (agent/agent.py) holds one Stops, `agent.stops`, given what it uses: the agent's
DEALER, its scheduler's queue, runner and stager, its Reports (agent/reports.py: what it says
of the units it ends) and `take_back` (units its runner holds ahead, back to the queue).
Messages (pilot/wire/protocol.py, agent link):
    <- cancel {uids, reason}   units held ahead by the runner go back to the queue first; queued
                               ones are CANCELED at once (what was made for their sandboxes
                               goes); running ones get SIGTERM, and SIGKILL after kill_grace
                               seconds (`timers`, `kill_late`) unless they ended first (then
                               they end as their exit code says); a uid not here yet is
                               remembered (`canceled_early`, at most EARLY_MAX, the oldest
                               forgotten first) and CANCELED as it arrives, or as the runner
                               reports that it started it; one that ended here already is not
    <- stop {reason, units}    as a cancel of everything; queued units, and any that arrive
                               later (`late`), are handed back (units: "back") or CANCELED
    <- give_back {uids}        those of them still queued (not started: those the runner
                               holds ahead go back to the queue first) handed back; the
                               agent goes on
    -> back {part, units, stays}   the units handed back, after the state updates before them
                               (stays: given back, not stopping)
    -> bye  {reason, hand_back}   once nothing runs (`finish`): the last updates, then this;
                               both bounded (500 ms), as the bootstrap may be gone
A stop waits for its running units' ends at most kill_grace + STOP_GRACE s after it began
(`stop_overdue`): a runner whose units never report (node daemons gone with the bootstrap)
would hold the agent for ever.  Units still running then end FAILED with that reason, and
the agent finishes.
SIGTERM and SIGINT stop the agent as a stop without hand-back does.
"""

from __future__ import annotations

import heapq
import logging
import signal
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import zmq

from pilot.agent.reports import Reports
from pilot.agent.runners.base import Run, Stager, UnitRunner
from pilot.agent.scheduler import Scheduler
from pilot.states import CANCELED, FAILED
from pilot.wire.protocol import msg

if TYPE_CHECKING:
    from pilot.unit_record import UnitRecord

log = logging.getLogger("agent")
STOP_GRACE = 10.0  # seconds a stop waits, beyond kill_grace, for its killed units' exits
EARLY_MAX = 100_000  # canceled uids remembered before their units arrive


class Stops:
    """Cancel and stop (the module's header)."""

    def __init__(
        self,
        uid: str,
        sock: zmq.Socket,
        sched: Scheduler,
        runner: UnitRunner,
        stager: Stager,
        reports: Reports,
        take_back: Callable[[], object],
        kill_grace: float,
    ) -> None:
        """Nothing canceled, no stop; `kill_grace`: seconds between a cancel's SIGTERM and its
        SIGKILL."""
        self.uid = uid
        self.sock = sock
        self.sched = sched
        self.runner = runner
        self.stager = stager
        self.reports = reports
        self.take_back = take_back
        self.kill_grace = kill_grace
        self.timers: list = []  # (when, id, Run): SIGKILL then, unless it ended
        self.stopping: dict | None = None
        self.stop_by = 0.0  # (monotonic) when a stop stops waiting for its units' exits
        self.canceled_early: dict[str, str] = {}  # uid -> reason, for units not arrived yet
        self.late: list[dict] = []  # units that arrived after stop: handed back or canceled

    def cancel(self, uids: Iterable[str], reason: str) -> None:
        uids = set(uids)
        self.take_back()  # units held ahead, not started yet, go back to the queue first
        known = {u["uid"] for u in self.sched.queue}
        known.update(r.unit["uid"] for r in self.runner.runs())
        ended = self.reports.ended
        early = self.canceled_early
        for uid in uids - known:  # (or started by the runner just now: runner_started)
            if uid not in ended:  # (one that ended before the cancel came: nothing to do)
                early[uid] = reason
        while len(early) > EARLY_MAX:  # (the oldest: a uid that never came, an other's)
            del early[next(iter(early))]
        keep = []
        for u in self.sched.queue:
            if u["uid"] in uids:
                if not u.get("function"):
                    self._unstage(u)
                self.reports.update(u["uid"], CANCELED, {"reason": reason})
            else:
                keep.append(u)
        self.sched.queue.clear()
        self.sched.queue.extend(keep)
        for r in self.runner.runs():
            if r.unit["uid"] in uids and r.cancel_reason is None:
                self.terminate(r, reason)

    def terminate(self, r: Run, reason: str) -> None:
        if self.runner.has_exited(r):
            return  # it ended before the cancel: it ends as its exit code says
        r.cancel_reason = reason
        self.runner.kill(r, signal.SIGTERM)
        heapq.heappush(self.timers, (time.monotonic() + self.kill_grace, id(r), r))

    def kill_late(self, now: float) -> None:
        """SIGKILL for the canceled units still running kill_grace after their SIGTERM."""
        while self.timers and self.timers[0][0] <= now:
            _, _, r = heapq.heappop(self.timers)
            if len(r.codes) < len(r.pids):
                self.runner.kill(r, signal.SIGKILL)

    def give_back(self, uids: Iterable[str]) -> None:
        """Those of `uids` still queued, not started, handed back to be routed again (another
        partition has free cores: the client asked); the partition goes on.  Said even when
        none is (an empty `back`: the client asks again later)."""
        if self.stopping:
            return  # (its stop hands back what is queued)
        wanted = set(uids)
        self.take_back()  # (units held ahead by the runner count as queued)
        q = self.sched.queue
        back = [u for u in q if u["uid"] in wanted]
        if back:
            keep = [u for u in q if u["uid"] not in wanted]
            q.clear()
            q.extend(keep)
        for u in back:
            if not u.get("function"):
                self._unstage(u)
            self.reports.forget(u["uid"])  # routed again by the client: no longer this agent's
        self.reports.flush(force=True)  # (their QUEUED before `back`)
        units = [{"uid": u["uid"]} for u in back]
        self.sock.send_multipart(msg(b"back", {"part": self.uid, "units": units, "stays": True}))

    def stop(self, reason: str, hand_back: bool) -> None:
        if self.stopping:
            return
        self.stopping = {"reason": reason, "hand_back": hand_back}
        self.stop_by = time.monotonic() + self.kill_grace + STOP_GRACE
        self.take_back()
        for u in self.sched.queue:
            if not u.get("function"):
                self._unstage(u)
        self.late.extend(self.sched.queue)
        self.sched.queue.clear()
        self.release_late()
        for r in self.runner.runs():
            self.terminate(r, reason)

    def _unstage(self, u: UnitRecord) -> None:
        """`u` will not run here: what was made for its sandbox goes (one taken ahead for a
        lane is removed: its next partition makes its own at the same path)."""
        taken, u.taken_sandbox = u.taken_sandbox, None
        if taken is not None:
            self.stager.untake(taken)
        self.stager.drop(u)

    def release_late(self) -> None:
        """Queued units of a stopping agent: handed back to be routed again, or CANCELED."""
        if not self.late:
            return
        assert self.stopping is not None  # (units are late only once a stop began)
        if self.stopping["hand_back"]:
            for u in self.late:  # routed again by the client: no longer this agent's
                self.reports.forget(u["uid"])
            self.reports.flush(force=True)
            back = [{"uid": u["uid"]} for u in self.late]  # (the client has the rest)
            self.sock.send_multipart(msg(b"back", {"part": self.uid, "units": back}))
        else:
            for u in self.late:
                self.reports.update(u["uid"], CANCELED, {"reason": self.stopping["reason"]})
        self.late = []

    def stop_overdue(self, now: float) -> bool:
        """A stop whose killed units have not all reported their exits by `stop_by`: they end
        FAILED (their runner's processes, or its node daemons, are gone: nothing will), and
        the stop is over (True)."""
        if now < self.stop_by:
            return False
        assert self.stopping is not None  # (asked during a stop only: agent.py)
        for r in list(self.runner.runs()):
            uid = r.unit["uid"]
            log.error("%s: %s did not report its end %g s after the stop", self.uid, uid,
                      self.kill_grace + STOP_GRACE)  # fmt: skip
            self.reports.update(uid, FAILED, {"reason": f"killed: {self.stopping['reason']} (its "
                                                  "end was never reported)"})  # fmt: skip
        return True

    def finish(self) -> int:
        """A stopped agent with nothing running: close the runner and stager, say the last
        updates and `bye`; the exit code (0)."""
        self.stager.close()
        log.info("%s: sandboxes %s", self.uid, self.stager.summary())
        log.info("%s: %s", self.uid, self.runner.summary())
        self.runner.close()
        # the last words are bounded: with the bootstrap gone, a DEALER send waits
        # for a peer forever
        self.sock.setsockopt(zmq.SNDTIMEO, 500)
        try:
            self.reports.flush(force=True)
            self.sock.send_multipart(msg(b"bye", self.stopping))
        except zmq.Again:
            log.error("%s: nobody took its last updates and bye", self.uid)
        return 0
