"""What an agent says about its units: every state move, sent in batches; the memory `sync`
says them again from; a unit's final state once its processes have ended.

The agent (agent/agent.py) holds one Reports, `agent.reports`, given what it uses: the agent's
DEALER, its runner (whose forwarded output goes first) and stager (an empty sandbox recycled),
the pilot sandbox.  Messages, on the agent's DEALER to the bootstrap (pilot/wire/protocol.py,
agent link):
    output  [[uid, node, rank, stream, text], ...]   the runner's forwarded output, sent by
                                                     `flush` ahead of the state updates, so a
                                                     unit's output precedes its end
    ustates HEAD TIMES                               the moves `update` recorded, in columns
                                                     (pilot/wire/updates.py), each checked against
                                                     the unit state machine (pilot/states.py
                                                     UNIT_MACHINE: an illegal one raises);
                                                     `flush` sends them at most FLUSH_EVERY
                                                     seconds after the first, at once when
                                                     FLUSH_SIZE are waiting, or when forced
                                                     (the agent forces it when its partition
                                                     has gone idle: nothing else is coming
                                                     that they could wait for)
    synced  {cid, part, unknown: [uids]}             `sync`: every update of these units said
                                                     again (sent first), and the ones this agent
                                                     does not know (never had, or ended)
Memory: the updates of the units here and not ended are kept (`known`), for `sync` and for a
unit sent again (`say_again`); once a unit's final state is sent, the bootstrap keeps it until
the client has it (partition/client/outbox.py), and this agent keeps only that it ended (a bit:
pilot/seen.py): a unit that arrives again after its end is never run twice.  Nothing grows
with the units that ended.
A unit's end (`report_end`): its output staged (the first fatal failure FAILs it), a `cleanup`
unit's sandbox removed (its first KEPT_OUTPUT bytes of stdout and stderr travel with its final
state), an empty sandbox recycled; then DONE, CANCELED (a cancel came in time), or FAILED with
the exit code or signal.
"""

from __future__ import annotations

import logging
import os
import shutil
import time

import zmq

from pilot import processes, staging
from pilot.agent.runners.base import Run, Stager, UnitRunner
from pilot.sandbox import output_names, sandbox_of
from pilot.seen import SeenUnits
from pilot.states import CANCELED, DONE, FAILED, FINAL, SCHEDULING, UNIT_MACHINE, check_move
from pilot.wire.protocol import msg, pack, send_frames
from pilot.wire.updates import Moves

# state updates wait at most this long to go in one message: each message costs the agent, the
# bootstrap and the client's channel and store threads a turn of their own (measured, 5,000 null
# units on 2 cores: 0.05 s gives 2.7-5% more units a second than 0.02 s; 0.1 s no more)
FLUSH_EVERY = 0.05
FLUSH_SIZE = 1000
_DONE = {"exit_code": 0}  # (shared: a batch of plain ends carries it once, pilot/wire/updates.py)
KEPT_OUTPUT = 65536  # bytes of stdout / stderr a `cleanup` unit keeps (its files are removed)
log = logging.getLogger("agent")


class Reports:
    """What an agent says about its units (the module's header)."""

    def __init__(
        self, uid: str, sock: zmq.Socket, runner: UnitRunner, stager: Stager, root: str
    ) -> None:
        """Nothing said yet; `root` is the pilot sandbox."""
        self.uid = uid
        self.sock = sock
        self.runner = runner
        self.stager = stager
        self.root = root
        self.updates = Moves()
        self.first_pending = 0.0  # (monotonic) when the oldest of `updates` was recorded
        self.known: dict[str, list] = {}  # units here and not final -> what was said of them
        self.ended = SeenUnits()  # units whose final state was said
        self.states: dict[str, str] = {}  # units here and not final -> their state

    def update(self, uid: str, state: str, info: dict | None = None, at: float = 0.0) -> None:
        """Record a unit's move to `state` (at `at`, default now) for the next batch."""
        check_move(UNIT_MACHINE, uid, self.states.get(uid, SCHEDULING), state)
        if state in FINAL:
            self.states.pop(uid, None)
        else:
            self.states[uid] = state
        updates = self.updates
        if not updates.n:
            self.first_pending = time.monotonic()
        rec = (uid, state, at or time.time(), info)
        updates.add(*rec)
        if state in FINAL:  # (the bootstrap keeps it now: partition/client/outbox.py)
            self.known.pop(uid, None)
            self.ended.add(uid)
            return
        said = self.known.get(uid)  # for `sync`: what it said
        if said is not None:
            said.append(rec)
        else:
            self.known[uid] = [rec]

    def say_again(self, uid: str) -> bool:
        """Queue every update said about `uid` again; False when this agent does not know it
        (never had it, or it ended: the bootstrap answers for those)."""
        recs = self.known.get(uid)
        if not recs:
            return False
        if not self.updates.n:
            self.first_pending = time.monotonic()
        for rec in recs:
            self.updates.add(*rec)
        return True

    def sync(self, cid: str | None, uids: list[str]) -> None:
        """Say again everything known about these units (a new client attached); name the
        ones this agent never had."""
        unknown = [uid for uid in uids if not self.say_again(uid)]
        self.flush(force=True)
        self.sock.send_multipart(msg(b"synced", {"cid": cid, "part": self.uid, "unknown": unknown}))

    def forget(self, uid: str) -> None:
        """`uid` is no longer this agent's (handed back: routed again by the client), so a sync
        says it does not know it, never again what it said before."""
        self.states.pop(uid, None)
        self.known.pop(uid, None)

    def flush(self, force: bool = False) -> None:
        output = self.runner.output
        if output:  # ahead of the state updates, so a unit's output precedes its end
            send_frames(self.sock, [b"output", pack(output)])
            self.runner.output = []
        if self.updates.n and (
            force
            or self.updates.n >= FLUSH_SIZE
            or time.monotonic() - self.first_pending >= FLUSH_EVERY
        ):
            # (with data frames: sent without a copy); each group names this partition: the
            # client drops what it says of a unit that has left it (routed again since)
            frames = self.updates.frames(part=self.uid)
            send_frames(self.sock, frames, copy=len(frames) <= 3)
            self.updates = Moves()

    # -- a unit's end -----------------------------------------------------------------------
    def report_end(self, r: Run, code: int, at: float) -> None:
        """A unit whose processes have all ended: output staging, cleanup, its final state."""
        uid = r.unit["uid"]
        lost = r.streams.lost if r.streams is not None else None  # (its output, a full disk)
        if lost is not None and code == 0 and r.fail_reason is None:
            r.fail_reason = f"its output could not be kept: {lost}"
        if code == 0 and r.fail_reason is None and r.unit.get("stage_out"):
            failed = self.stage_out(r.unit)
            if failed:
                r.fail_reason = f"output staging: {failed}"
        kept = self.clean_up(r.unit) if r.unit.get("cleanup") else {}
        if r.extra:  # a function's value or exception, and what it printed
            kept.update(r.extra)
        if r.left_empty:  # nothing of it is there: no directory is left behind
            self.stager.recycle(r.sandbox or sandbox_of(self.root, r.unit))
        if r.fail_reason is not None:
            info = {"reason": r.fail_reason, **kept}
            if not (r.not_started or r.node_lost):  # (a unit that never ran, or whose node
                info["exit_code"] = code  # was lost under it, has no exit code it could say)
            if r.node_lost:
                info["lost"] = True  # a restartable unit may run again elsewhere
            self.update(uid, FAILED, info, at)
        elif code == 0:  # it completed, even when a cancel came too late to stop it
            self.update(uid, DONE, {"exit_code": 0, **kept} if kept else _DONE, at)
        elif r.cancel_reason is not None:
            info = {"exit_code": code, "reason": r.cancel_reason, **kept}
            self.update(uid, CANCELED, info, at)
        else:
            sig = processes.signal_name(-code)
            why = f"exit code {code}" if code > 0 else f"killed by signal {sig}"
            if code == 127 and r.unit.not_found:
                why += f": executable={r.unit['executable']!r} not found (see its stderr)"
            if lost is not None:
                why += f"; {lost}"
            self.update(uid, FAILED, {"exit_code": code, "reason": why, **kept}, at)

    def stage_out(self, unit: dict) -> str | None:
        """The unit's pilot-side output steps (COPY, LINK, MOVE), in order; the first fatal
        failure's text, or None."""
        sandbox = sandbox_of(self.root, unit)
        for d in unit["stage_out"]:
            why = staging.act(d, self.root, sandbox)
            if why and why.startswith("skipped: "):
                log.warning("%s: output staging %s", unit["uid"], why)
            elif why:
                return why
        return None

    def clean_up(self, unit: dict) -> dict:
        """A `cleanup` unit's sandbox is removed once it ended; the first KEPT_OUTPUT bytes of
        its stdout and stderr travel with its final state instead."""
        sandbox = sandbox_of(self.root, unit)
        kept = {}
        for key, name in zip(("stdout", "stderr"), output_names(unit)):
            try:
                with open(os.path.join(sandbox, name), "rb") as f:
                    kept[key] = f.read(KEPT_OUTPUT).decode(errors="replace")
            except OSError:
                kept[key] = ""
        shutil.rmtree(sandbox, ignore_errors=True)
        return kept
