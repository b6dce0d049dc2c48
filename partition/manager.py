"""The partition manager: starts and stops partitions inside a running pilot.

It lives in the bootstrap process and owns the pilot's resources (PilotResources).  The bootstrap
hands it commands and agent events; it answers through the four functions it is given: send a
message to an agent (`send_agent`), start an agent process (`spawn_agent`: an `AgentProcess`,
forked by the agent zygote, partition/agents/forked.py, or started by a node daemon,
partition/agents/hosted.py), emit a partition state update (`emit`), and end what an agent
that died without stopping left running (`agent_lost`).  Every state change goes through the
partition state machine (pilot/states.py PARTITION_MACHINE): an illegal one raises.

Partition life inside the pilot:
    start(uid, desc)  PENDING -> STARTING when the resources are allocated (FAILED with what was
                      missing when they are not; nothing else changes), agent process spawned;
                      a pilot that may grow (partition/growth.py) keeps one that does not fit
                      PENDING instead, waiting for the nodes of a job it asks for: started
                      when they join (`start_waiting`), FAILED when that job fails
    agent `ready`     -> ACTIVE; units buffered while STARTING are forwarded
    stop(uid)         agent told to stop; its `bye` (or its exit) ends the partition in the
                      final state the stop asked for; the resources are free again
    agent exits without `bye`  -> FAILED with the exit code
Reconfig commands carry an id (cid); a repeated cid returns the first answer and does nothing.
Stops are applied before starts, so a command can reuse what it stops.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pilot import ids, processes
from pilot.config.resource_config import agent_configs, check_agent_config
from pilot.descriptions import ComputePartitionDescription
from pilot.partition.resources import AllocationError, PartitionResources, PilotResources
from pilot.states import (
    ACTIVE,
    CANCELED,
    DONE,
    FAILED,
    FINAL,
    PARTITION_MACHINE,
    PENDING,
    STARTING,
    check_transition,
)
from pilot.wire.protocol import pack


class Grows(Protocol):
    """What the manager asks of the pilot's Growth (partition/growth.py, which imports this
    module: named here, not imported)."""

    def may_grow_for(self, desc) -> bool: ...

    def plan(self, parts: list, why: str | None = None) -> dict[str, str]: ...


log = logging.getLogger("bootstrap.partitions")
EXIT_GRACE = 1.0  # seconds an ended agent's last messages get to arrive
REPLIES_KEPT = 10_000  # answers to reconfig commands remembered for retries


@dataclass(frozen=True)
class AgentExit:
    """How an agent process ended: its exit code (negative: the signal), or None when it
    ended without one (it never started, or its node was lost), and what happened in words."""

    code: int | None
    why: str

    @classmethod
    def of_code(cls, code: int) -> AgentExit:
        if code < 0:
            return cls(code, f"exited with code {code} (killed by {processes.signal_name(-code)})")
        return cls(code, f"exited with code {code}")


class AgentProcess(Protocol):
    """A partition's agent process, however it was started."""

    pid: int | None  # None until known (or known only to the node daemon that started it)

    def poll(self) -> AgentExit | None: ...  # None while it runs

    def wait(self, timeout: float) -> AgentExit | None: ...  # bounded

    def kill(self) -> None: ...


@dataclass
class Part:
    uid: str
    desc: ComputePartitionDescription
    state: str = PENDING  # moved by the partition manager through PARTITION_MACHINE only
    alloc: PartitionResources | None = None
    proc: AgentProcess | None = None
    buffered: list = field(default_factory=list)  # unit batches (raw frames) waiting for ACTIVE
    final: str | None = None  # the final state asked for by a stop
    hand_back: bool = False  # a stop hands queued units back instead of canceling them
    exit: AgentExit | None = None  # how the agent process ended, once it has
    exit_deadline: float | None = None
    reason: str | None = None
    stop_deadline: float | None = None
    created: float = field(default_factory=time.time)
    runner: str | None = None  # how its agent starts units, as it said when ready
    awaits: str | None = None  # the job whose nodes it waits for (partition/growth.py)
    stopped_by: str | None = None  # the id of the reconfig command that stopped it


class PartitionManager:
    def __init__(
        self,
        res: PilotResources,
        agent_cfg: dict,
        pilot_uid: str,
        *,
        send_agent: Callable[[str, list[bytes]], None],
        spawn_agent: Callable[[str, dict], AgentProcess],
        emit: Callable[[str, str, dict], None],
        agent_lost: Callable[[str, str], None],
        next_index: int = 0,
    ) -> None:
        """`send_agent(uid, frames)`, `spawn_agent(uid, cfg)`, `emit(uid, state, info)` and
        `agent_lost(uid, why)` (an agent ended without stopping its units) are the bootstrap's
        (the module's header)."""
        self.resources = res
        self.send_agent = send_agent
        self.spawn_agent = spawn_agent
        self.emit = emit
        self.agent_lost = agent_lost
        self.agent_cfg = agent_cfg
        self.parts: dict[str, Part] = {}
        self.next_index = next_index
        self.pilot_uid = pilot_uid
        # cid -> the answer given (a retried command is answered again, not applied again);
        # the newest REPLIES_KEPT only, so a stream of commands cannot grow the bootstrap
        self.replies: OrderedDict[str, tuple[dict, str]] = OrderedDict()  # cid -> (reply, asked)
        # the pilot's Growth when it may grow (partition/growth.py)
        self.growth: Grows | None = None

    # -- queries ------------------------------------------------------------------------------
    def live(self) -> list[Part]:
        return [p for p in self.parts.values() if p.state not in FINAL]

    def describe(self) -> list[dict]:
        return [
            {
                "uid": p.uid,
                "state": p.state,
                "reason": p.reason,
                "description": p.desc.to_stored(),
                "resources": p.alloc.to_dict(self.resources) if p.alloc else None,
                "runner": p.runner,
            }
            for p in self.parts.values()
        ]

    def new_uid(self) -> str:
        uid = f"{self.pilot_uid}.part.{self.next_index:04d}"
        self.next_index += 1
        return uid

    # -- life cycle ---------------------------------------------------------------------------
    def add(self, uid: str, desc: ComputePartitionDescription) -> Part:
        part = Part(uid, desc)
        self.parts[uid] = part
        self.next_index = ids.next_index(self.next_index, uid)
        return part

    def move(self, part: Part, state: str) -> None:
        """The one way a partition's state changes here: checked by PARTITION_MACHINE."""
        check_transition(PARTITION_MACHINE, part, state)

    def waiting(self) -> list[Part]:
        """The PENDING partitions that wait for nodes, in the order they came."""
        return [p for p in self.parts.values() if p.state == PENDING and p.awaits is not None]

    def start(self, part: Part, may_wait: bool = False) -> bool:
        """Allocate and start `part`; False when it does not fit and, `may_wait` on a pilot
        that may grow for it, stays PENDING (the caller asks growth.plan for it)."""
        try:
            part.alloc = self.resources.allocate(part.desc)
        except AllocationError as exc:
            if may_wait and self.growth is not None and self.growth.may_grow_for(part.desc):
                return False
            self.end(part, FAILED, f"does not fit the free resources: {exc}")
            return True
        self._spawn(part)
        return True

    def start_waiting(self, job: str, missing: str = "") -> None:
        """Nodes joined (of `job`): the waiting partitions that fit now start, those that waited
        for `job` first (its nodes were asked for them), then the others, each in order; those
        that waited for `job` and still do not fit end FAILED."""
        waiting = self.waiting()
        for part in [p for p in waiting if p.awaits == job] + [
            p for p in waiting if p.awaits != job
        ]:
            try:
                part.alloc = self.resources.allocate(part.desc)
            except AllocationError as exc:
                if part.awaits == job:
                    more = f" ({missing})" if missing else ""
                    self.end(
                        part, FAILED, f"does not fit even with the nodes of {job}{more}: {exc}"
                    )
                continue
            part.awaits = None
            self._spawn(part)

    def fail_waiting(self, job: str, reason: str) -> None:
        for part in self.waiting():
            if part.awaits == job:
                self.end(part, FAILED, reason)

    def _spawn(self, part: Part) -> None:
        assert part.alloc is not None  # (its callers allocated it just before)
        self.move(part, STARTING)
        self.emit(part.uid, STARTING, {"resources": part.alloc.to_dict(self.resources)})
        nodes = part.alloc.to_dict(self.resources)["nodes"]
        cfg = dict(
            self.agent_cfg,
            uid=part.uid,
            nodes=nodes,
            agent_node=None if part.alloc.agent_nodes else 0,  # LOCAL: where the agent runs
            agent_host=part.alloc.agent_nodes[0] if part.alloc.agent_nodes else None,
            kill_grace=agent_configs()[part.desc.agent_config].get("kill_grace", 2.0),
        )
        try:
            part.proc = self.spawn_agent(part.uid, cfg)
        except OSError as exc:
            self.end(part, FAILED, f"cannot start its agent: {exc}")

    def on_ready(self, uid: str, runner: str | None = None, data: bool = False) -> None:
        """Its agent is up (`data`: its function workers see the client's data directory)."""
        part = self.parts.get(uid)
        if part is None or part.state != STARTING:
            log.warning("ready from %s in state %s: ignored", uid, part and part.state)
            return
        part.runner = runner
        self.move(part, ACTIVE)
        self.emit(uid, ACTIVE, {"data": True} if data else {})
        for batch in part.buffered:
            self.send_agent(uid, [b"units", *batch])
        part.buffered.clear()
        if part.final:  # stopped while it was starting
            self._send_stop(part)

    def stop(self, uid: str, final: str, reason: str, hand_back: bool) -> None:
        part = self.parts[uid]
        if part.state in FINAL or part.final:
            return
        if final == DONE and part.state != ACTIVE:
            final = CANCELED  # it never ran: the pilot's end cancels it
        part.final, part.reason = final, reason
        part.hand_back = hand_back
        if part.state == PENDING:
            self.end(part, final, reason)
        elif part.state == ACTIVE:
            self._send_stop(part)
        # STARTING: stopped as soon as its agent reports ready (or exits)

    def _send_stop(self, part: Part) -> None:
        units = "back" if part.hand_back else "cancel"
        self.send_agent(part.uid, [b"stop", pack({"reason": part.reason, "units": units})])
        part.stop_deadline = time.monotonic() + 10.0

    def on_bye(self, uid: str, body: dict) -> None:
        part = self.parts.get(uid)
        if part is None or part.state in FINAL:
            return
        self.end(part, part.final or DONE, part.reason or body.get("reason"))

    def on_agent_exit(self, uid: str, exit: AgentExit, grace: float = EXIT_GRACE) -> None:
        """The agent process ended.  Its last messages (state, back, bye) may still be in the
        socket behind the exit notice: the partition ends on its bye, or `grace` s after the
        exit at the latest (check_stuck), so no unit update is overtaken by the final state."""
        part = self.parts.get(uid)
        if part is None or part.state in FINAL:
            return
        part.exit = exit
        if grace > 0:
            part.exit_deadline = time.monotonic() + grace
            return
        if part.final and exit.code == 0:
            self.end(part, part.final, part.reason)
        else:
            self.agent_lost(uid, f"its agent {exit.why}")
            self.end(
                part,
                FAILED,
                f"its agent {exit.why}"
                + (f" while stopping ({part.reason})" if part.final else ""),
            )

    def end(self, part: Part, state: str, reason: str | None) -> None:
        """`part` is over (final `state`, with `reason`): its resources are free again."""
        if part.alloc is not None:
            self.resources.release(part.alloc)
        self.move(part, state)
        part.reason = reason
        part.buffered.clear()
        info = {"reason": reason} if reason else {}
        if part.stopped_by:
            info["stopped_by"] = part.stopped_by
        self.emit(part.uid, state, info)
        log.info("%s %s%s", part.uid, state, f": {reason}" if reason else "")

    def take_buffered_or_bounce(self, uid: str, batch: list[bytes]) -> bool:
        """Units for `uid` (their frames: the JSON body and its data): True if forwarded or
        buffered; False if it cannot take them."""
        part = self.parts.get(uid)
        if part is None or part.state in FINAL or part.final:
            return False
        if part.state == ACTIVE:
            self.send_agent(uid, [b"units", *batch])
        else:
            part.buffered.append(batch)
        return True

    def check_stuck(self) -> None:
        """Agents that did not say bye in time after a stop are killed (then FAILED on exit)."""
        now = time.monotonic()
        for part in self.live():
            if part.exit_deadline and now > part.exit_deadline:
                assert part.exit is not None  # (on_agent_exit set it with the deadline)
                self.on_agent_exit(part.uid, part.exit, grace=0)
                continue
            if part.stop_deadline and now > part.stop_deadline and part.proc is not None:
                log.error(
                    "%s: agent did not stop within its deadline; killing pid %s",
                    part.uid,
                    part.proc.pid,
                )
                part.proc.kill()
                part.stop_deadline = None

    # -- reconfig -----------------------------------------------------------------------------
    def reconfig(
        self, cid: str, stop, start: list[dict], uids: list[str] | None = None, reason=None
    ) -> dict:
        """Apply one command: stop first, then start.  Returns {stopped, started: [...]}.
        `reason`: why (the stopped partitions' reason, and a job grown for the starts')."""
        asked = json.dumps(
            [stop, [d.to_stored() if isinstance(d, ComputePartitionDescription) else d
                    for d in start or ()], uids, reason],
            sort_keys=True, default=str,
        )  # fmt: skip
        if cid in self.replies:
            done, was = self.replies[cid]
            if was != asked:  # (a retry repeats its command; another under its id is refused)
                raise ValueError(
                    f"command id {cid!r} was used already, for another command (stop, start "
                    "and uids differ); a retry must repeat its command, a new command needs a "
                    "new id"
                )
            return done
        stop_uids = ids.resolve_partitions(
            stop, self.pilot_uid, {uid: p.state not in FINAL for uid, p in self.parts.items()}
        )
        taken = [u for u in uids or () if u in self.parts]
        if taken:  # a client and a shell started partitions at the same moment
            raise ValueError(f"partition uid(s) {taken} exist already; nothing was changed")
        descs = []
        for i, d in enumerate(start or []):
            try:
                if not isinstance(d, ComputePartitionDescription):
                    d = ComputePartitionDescription.from_stored(d)
                check_agent_config("ComputePartitionDescription", d.config)
            except ValueError as exc:
                raise ValueError(f"start[{i}]: {exc}") from None
            descs.append(d)
        for uid in stop_uids:
            why = f"stopped by reconfig: {reason}" if reason else "stopped by reconfig"
            if not self.parts[uid].final:
                self.parts[uid].stopped_by = cid
            self.stop(uid, CANCELED, why, hand_back=True)
        # the stopped partitions' resources are free for the starts, even while their agents
        # drain: a stopped partition's units no longer run anything new
        for uid in stop_uids:
            part = self.parts[uid]
            if part.alloc is not None and part.state not in FINAL:
                self.resources.release(part.alloc)
                part.alloc = None
        new, wait = [], []
        for i, desc in enumerate(descs):
            uid = uids[i] if uids and i < len(uids) else self.new_uid()
            part = self.add(uid, desc)
            new.append(part)
            self.emit(uid, PENDING, {"description": desc.to_stored(), "started_by": cid})
            if not self.start(part, may_wait=True):
                wait.append(part)
        if wait:  # one job for what they need, or FAILED beyond max_nodes (growth.py)
            assert self.growth is not None  # (start lets a partition wait only with growth)
            for uid, why in self.growth.plan(wait, reason).items():
                self.end(self.parts[uid], FAILED, why)
        started: list[dict] = [{"uid": p.uid, "state": p.state, "reason": p.reason} for p in new]
        for s in started:
            if s["state"] == PENDING:
                s["awaits"] = self.parts[s["uid"]].awaits
        self.warn_idle()
        reply = {"stopped": stop_uids, "started": started}
        self.replies[cid] = (reply, asked)
        if len(self.replies) > REPLIES_KEPT:
            self.replies.popitem(last=False)
        return reply

    def warn_idle(self) -> None:
        free = self.resources.free
        if free["cores"] or free["gpus"]:
            log.warning(
                "under-use: %d cores, %d GPUs of the pilot are held by no partition",
                free["cores"],
                free["gpus"],
            )
