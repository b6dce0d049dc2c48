"""The client-side Pilot handle: a pilot's state, partitions, commands and job files.

A Pilot is made by PilotManager.submit_pilots (pmgr/core/pilot_manager.py) or, for a session a new
client attached to, by pmgr/core/recovery.py.  The bootstrap's `hello` makes the pilot ACTIVE; its
`bye` carries the final state.  A job that exits without `bye`, or a pilot silent for
client_timeout seconds, is FAILED with what its output said.  Partition states arrive from the
bootstrap; partitions the client did not create (started from a shell) appear in
`pilot.partitions` when first heard of.
Messages from the bootstrap reach the Pilot's public `on_*` handlers through the session's
dispatch (pmgr/core/session_dispatch.py HANDLERS, checked against pilot/wire/links.py's table);
callbacks registered on the PilotManager see every state change of its pilots.  What concerns
units goes on to the parts of the UnitManager that routes units to the pilot (`umgr`): its
`events` (pmgr/core/unit_events.py: which message leads to which call) and, after them, its
`routing.route()`.  Commands to the
bootstrap (`command`: reconfig, stop_parts, cancel_pilot, cancel_units, sync) go at once when
the pilot is ACTIVE and linked, else once its hello came; a sync the channel could not send
(the pilot not connected) is sent again at the next heartbeat while the pilot lives.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, cast

from pilot import ids, states as S
from pilot.config import network
from pilot.config.resource_keys import ResourceConfig
from pilot.descriptions import ComputePartitionDescription, ComputePilotDescription
from pilot.errors import PilotOwned
from pilot.partition.plan import check_partition, most_nodes
from pilot.pmgr.core import ownership
from pilot.pmgr.core.adapt import AdaptPolicy
from pilot.pmgr.core.handles import Partition, Stateful
from pilot.pmgr.core.pilot_jobs import PilotJobs
from pilot.rp.utils import pilot_endpoints
from pilot.wire import peer_version
from pilot.wire.protocol import HEARTBEAT, msg, pack

if TYPE_CHECKING:
    from pilot.pmgr.batch import BatchJob
    from pilot.pmgr.core.unit_manager import UnitManager

ATTACHING = "being attached"  # `released` while a client attaches (pmgr/core/recovery.py)
log = logging.getLogger("pmgr.pilots")
ORPHANS_KEPT = 100_000  # unit updates kept for the UnitManager that has not come yet


class Pilot(Stateful):
    """A pilot as the client sees it: its state, size, partitions, the commands it obeys
    (reconfig, cancel) and its files.  Made by `PilotManager.submit_pilots`, never by hand.

    Attributes:
        uid (str): the pilot's id, `pilot.NNNN`.
        description (ComputePilotDescription): what it was submitted with.
        size (dict): its size as submitted: `nodes`, `cores`, `gpus` and per node counts.
        sandbox (str): its directory (the pilot sandbox), on the file system the job shares.
    """

    KIND = "pilots"
    MACHINE = S.PILOT_MACHINE

    def __init__(
        self,
        session,
        uid: str,
        description: ComputePilotDescription,
        pmgr,
        size: dict,
        resource: ResourceConfig,
    ) -> None:
        super().__init__(session, uid)
        self.description = description
        self.pmgr = pmgr
        self.umgr: UnitManager | None = None  # the UnitManager that routes units to it
        # unit updates heard before a UnitManager used it (an attach: the agent's updates
        # come before the new client made its UnitManager), handed to the first that does
        self.orphans: list = []  # [groups, ...] (pilot/wire/updates.py)
        self.orphaned = 0  # unit moves in them
        self.size = dict(size)
        self.resource = resource
        # its sandbox: in the session directory, or under the description's `sandbox` (RP's
        # key), reached from the session directory through a link of the same name
        self.sandbox = os.path.join(session.dir, uid)
        if description.sandbox:
            self.sandbox = os.path.join(os.path.abspath(description.sandbox), session.uid, uid)
        self.parts: dict[str, Partition] = {}
        self.job: BatchJob | None = None  # submitted here, or followed (an attach)
        self.job_id = None  # the job's pid or batch id, kept in the store
        self.extra_jobs = PilotJobs(self)  # the jobs it grew by (pmgr/core/pilot_jobs.py)
        self.adapt = (  # grows and shrinks on its own (pmgr/core/adapt.py)
            # (cast: an adapt policy has max_nodes, on the pilot or in it: plan.py checked)
            AdaptPolicy(self, description.adapt, cast(int, most_nodes(description)))
            if description.adapt is not None
            else None
        )
        self.control: str | None = None
        self.last_heard = time.monotonic()
        self.born = self.last_heard
        self._silence_said = False  # (tick: a silent pilot whose job lives, said once)
        self._next_hb = 0.0
        self._queued_cmds: list[dict] = []
        self._syncs: dict[str, dict] = {}  # cid -> a sync sent, until its reply
        self._resync: list[dict] = []  # syncs the channel could not send: asked again
        self.linked = False  # its bootstrap said hello to this client process: sends arrive
        self._cancel_requested: str | None = None
        self._free: dict | None = None
        self._nodes: dict[int, dict] = {}
        self._new_by_cmd: dict[str, list[str]] = {}  # reconfig cid -> partitions it creates
        self.released: str | None = None  # another client took it over: why (see on_taken_over)
        self.reattaching = False  # an attach that was not taken is asked again (recovery.py)
        self._owner_asked = 0.0  # when the store was last asked who owns it (unreachable)
        self._endpoints: tuple[str, str, str] | None = None  # RP's js_url, js_hop, endpoint_fs

    def manager_callbacks(self) -> list:
        return self.pmgr.callbacks

    def client_endpoint(self) -> str | list[str]:
        """Where this pilot's bootstrap reaches the client: on the resource config's
        `client_address` when it names one, or the session's address when one was given
        (Session(address=), PILOT_CLIENT_ADDRESS); else, for a local pilot, loopback, and for
        one whose job may land on another host, every address of this host: the bootstrap
        probes them all at once and keeps the first whose handshake completes."""
        if self.resource.client_address is not None:
            address = network.resolve_address(
                f"resource config {self.resource.name}: client_address",
                self.resource.client_address,
            )
            return self.session.channel.endpoint_on(address)
        if self.session.address_given or self.resource.batch_system == "local":
            return self.session.channel.endpoint
        return self.session.channel.endpoints_everywhere()

    # -- public -----------------------------------------------------------------------------
    @property
    def partitions(self) -> list[Partition]:
        """Every partition this pilot ever had, final ones included, in creation order."""
        with self.session.locked():
            return list(self.parts.values())

    def partition(self, uid: str) -> Partition:
        """Its partition `uid` (the full uid, or the part after the pilot's: `part.0001`);
        ValueError, naming the ones it has, when it has none of that name."""
        with self.session.locked():
            part = self.parts.get(uid) or self.parts.get(f"{self.uid}.{uid}")
        if part is None:
            raise ValueError(
                f"{self.uid}: partition={uid!r} is unknown; known: {sorted(self.parts)}"
            )
        return part

    @property
    def nodes(self) -> dict[int, dict]:
        """Multi-node pilots: {index: {name, state}} as brought up ("up", or "down" for a node
        that did not report); empty for pilots without node daemons."""
        return dict(self._nodes)

    @property
    def free(self) -> dict | None:
        """{nodes, cores, gpus} held by no live partition (None until the pilot reports it).
        Free resources after a reconfig are also logged as under-use by the bootstrap."""
        return dict(self._free) if self._free is not None else None

    @property
    def jobs(self) -> list[dict]:
        """Its batch jobs: the first (`job.0000`) and those it grew by (max_nodes), each
        {job, nodes, state, id, ...}: asked, queued, joined, released, failed or ended."""
        with self.session.locked():
            return self.extra_jobs.describe()

    @property
    def adapt_log(self) -> list[dict]:
        """What its adapt policy decided, oldest first: {ts, action: grow | shrink, nodes,
        reason} ([] without one)."""
        with self.session.locked():
            return list(self.adapt.decisions) if self.adapt is not None else []

    def cancel(self, timeout: float | None = 60.0) -> None:
        """End the pilot: running units CANCELED, partitions CANCELED, pilot CANCELED.

        Args:
            timeout (float | None): seconds to wait for the pilot to be final; None waits as
                long as it takes.  From inside a callback it does not wait.
        """
        self.request_cancel("canceled by the user")
        if not self.session.channel.in_thread():
            self.wait(timeout=timeout)

    def reconfig(self, stop=None, start=None, reason: str | None = None) -> list[Partition]:
        """Stop partitions (a uid, a list of uids, or ALL), then start new ones, as one command.

        Returns the new Partition handles at once; they become ACTIVE (or FAILED, with the
        reason, when they do not fit) on their own.  Queued units of a stopped partition go to
        another one; its running units end CANCELED.  A pilot with max_nodes grows by a batch
        job for new partitions beyond what it has free: they stay PENDING while it is queued.

        Args:
            stop (str | list[str] | None): the partitions to stop: a uid, a list of uids, or
                `rp.ALL`; None stops none.
            start (ComputePartitionDescription | str | list | None): the partitions to start:
                descriptions, or sizes as `ComputePartitionDescription` takes them (`"50%"`,
                `rp.FILL`); None starts none.
            reason (str | None): why, in words: the stopped partitions' reason ("stopped by
                reconfig: REASON") and that of a job the pilot grows by (`jobs`).

        Returns:
            list[Partition]: the handles of the partitions started, in the order given.

        Raises:
            ValueError: a start that is not a partition description (naming its index), a
                uid that names no live partition of this pilot, or a pilot already final.
        """
        start = [] if start is None else (start if isinstance(start, (list, tuple)) else [start])
        descs = []
        for i, d in enumerate(start):
            if isinstance(d, str):
                d = ComputePartitionDescription(d)
            if not isinstance(d, ComputePartitionDescription):
                raise ValueError(
                    f"reconfig: start[{i}]={d!r} must be a ComputePartitionDescription"
                )
            check_partition(f"reconfig: start[{i}]", d, self.size["gpus"], self.uid)
            descs.append(d)
        with self.session.locked():
            if self.final:
                raise ValueError(f"reconfig: {self.uid} is {self.state}")
            stop_uids = self._stop_uids(stop)
            for uid in stop_uids:
                self.parts[uid].accepting = False
            new = []
            for d in descs:
                part = self.new_partition(d)
                new.append(part)
            cid = self.session.ids.next_cid(self.uid)
            self._new_by_cmd[cid] = [p.uid for p in new]
            self.command(
                {
                    "cid": cid,
                    "op": "reconfig",
                    "args": {
                        "stop": stop_uids,
                        "start": [d.to_stored() for d in descs],
                        "uids": [p.uid for p in new],
                        "reason": reason,
                    },
                }
            )
        return new

    # -- used by the other client objects ---------------------------------------------------
    def _stop_uids(self, stop) -> list[str]:
        return ids.resolve_partitions(
            stop, self.uid, {uid: not p.final for uid, p in self.parts.items()}
        )

    def new_partition(self, desc, uid: str | None = None) -> Partition:
        uid = uid or self.session.ids.next_uid(f"{self.uid}.part")
        part = Partition(self.session, uid, desc, self)
        self.parts[uid] = part
        self.session.changes.record(part, S.NEW, part.history[0][1], fire=False)
        return part

    def stop_partitions(self, uids: list[str], reason: str, timeout: float | None) -> None:
        with self.session.locked():
            for uid in uids:
                self.parts[uid].accepting = False
            cid = self.session.ids.next_cid(self.uid)
            self.command({"cid": cid, "op": "stop_parts", "args": {"uids": uids, "reason": reason}})
        if not self.session.channel.in_thread():
            for uid in uids:
                self.parts[uid].wait(timeout=timeout)

    def command(self, cmd: dict) -> None:
        """Send a command to the bootstrap now, or once it said hello to this client (it is
        ACTIVE; a pilot a new client attached to is linked when its hello arrives).  A pilot
        another client took over takes no more commands from this one."""
        if self.released:
            raise PilotOwned(self.uid, f"not this client's any more: {self.released}")
        if cmd.get("op") == "sync" and cmd.get("cid"):
            self._syncs[cmd["cid"]] = cmd
        if self.state == S.ACTIVE and self.linked:
            self.session.channel.send(self.uid, [b"cmd", pack(cmd)])
        else:
            self._queued_cmds.append(cmd)

    @property
    def ending(self) -> bool:
        """Final, or asked to cancel: what the pilot is still owed is moot."""
        return self.final or self._cancel_requested is not None

    def request_cancel(self, reason: str) -> None:
        with self.session.locked():
            if self.final or self._cancel_requested:
                return
            self._cancel_requested = reason
            if self.state == S.ACTIVE:  # (sent once linked)
                self.command({"cid": None, "op": "cancel_pilot", "args": {"reason": reason}})
            elif self.job is not None:
                self.job.cancel()  # not up yet: end the job; its exit makes the pilot CANCELED

    def kill_job(self) -> None:
        if self.job is not None and self.job.poll() is None:
            self.job.kill()
        self.extra_jobs.end_all(wait=10.0)

    def runtime_left(self) -> float:
        """Seconds of its runtime left (at least a minute: a job needs some)."""
        runtime = float(self.description.runtime or 0) * 60.0
        return max(60.0, self.born + runtime - time.monotonic())

    def join_config(self) -> dict:
        """What a job that grows it needs to know of it (the join.json of
        partition/nodes/join_job.py)."""
        from pilot.config import resource_config

        return {
            "pilot": self.uid,
            "session": self.session.uid,
            "curve": self.session.keys.dir,
            "resource": self.description.resource,
            "resource_config": resource_config.to_raw(self.resource),
        }

    # -- messages from the bootstrap (session_dispatch.HANDLERS; channel thread, lock held) ---
    def on_hello(self, body: dict) -> None:
        why = peer_version.differs(body, "the pilot")
        if why is not None:
            self._incompatible(why, bool(body.get("attach")))
            return
        self.control = body.get("control")
        self._nodes = {int(i): n for i, n in (body.get("nodes") or {}).items()}
        self.linked = True
        self.extra_jobs.on_hello(body.get("jobs"))
        self.advance(S.ACTIVE, time.time(), None)
        for cmd in self._queued_cmds:
            self.session.channel.send(self.uid, [b"cmd", pack(cmd)])
        self._queued_cmds.clear()
        if self._cancel_requested:
            self.command(
                {"cid": None, "op": "cancel_pilot", "args": {"reason": self._cancel_requested}}
            )

    def _incompatible(self, why: str, attached: bool) -> None:
        """(its hello) The pilot speaks another protocol (pilot/wire/peer_version.py): it is
        used for nothing.  One this client launched is canceled and ends FAILED saying why (its
        units go elsewhere or fail, as for any pilot that fails); one it attached to (a pilot
        of a version before that said nothing at the attach) is not its to act on."""
        log.error("%s: %s", self.uid, why)
        if attached:
            self.released = f"not attached: {why}"
            if self.umgr is not None:  # (units waiting here for it: none may wait for ever)
                self.umgr.routing.route()
            return
        cmd = {"cid": None, "op": "cancel_pilot", "args": {"reason": why}}
        self.session.channel.send(self.uid, [b"cmd", pack(cmd)])  # (a form every version reads)
        self._cancel_requested = why
        self.end(S.FAILED, why)

    def on_bye(self, body: dict) -> None:
        self.end(body.get("state", S.DONE), body.get("reason"))

    def on_hb(self, body: dict) -> None:
        pass  # liveness only: the session notes when it last heard from the pilot

    def on_grow(self, body: dict) -> None:
        self.extra_jobs.on_grow(body)  # a job for more nodes (pmgr/core/pilot_jobs.py)

    def on_release(self, body: dict) -> None:
        self.extra_jobs.on_release(body)

    def on_jobs(self, body: dict) -> None:
        """Its jobs and nodes changed (one joined, was given back or ended)."""
        self.extra_jobs.on_hello(body["jobs"])
        if body.get("nodes") is not None:
            self._nodes = {int(i): n for i, n in body["nodes"].items()}

    def on_states(self, updates: list) -> None:
        """Batched partition state updates [["part", uid, state, ts, info], ...]."""
        for _kind, uid, state, ts, info in updates:
            self.on_partition_state(uid, state, ts, info)

    def on_unit_moves(self, groups: list) -> None:
        """A batch of unit moves (pilot/wire/updates.py's Groups) from one of its agents, or the
        outbox's answer to a sync."""
        umgr = self.umgr
        if umgr is None:  # (not acknowledged: the pilot keeps them, and so do we, for a while)
            if self.orphaned + sum(len(g) for g in groups) <= ORPHANS_KEPT:
                self.orphans.append(groups)
                self.orphaned += sum(len(g) for g in groups)
            else:
                log.warning("%s: unit moves, but no UnitManager uses it: dropped", self.uid)
            return
        ended = umgr.events.on_unit_moves(groups)
        umgr.routing.route()  # units ended: their partitions have room again
        if ended:  # the pilot keeps their outcomes until the store has them
            self.session.writer.then(lambda: self._ack(ended), urgent=False)

    def hand_orphans(self) -> None:
        """(session lock held, a UnitManager uses it now) The unit moves heard before, in
        the order they came: a unit's node, slots and exit code are not lost to an attach."""
        orphans, self.orphans, self.orphaned = self.orphans, [], 0
        if self.umgr is not None:
            for groups in orphans:
                self.on_unit_moves(groups)

    def _ack(self, uids: list[str]) -> None:
        """(store writer thread) These units' final states are written: the pilot may let go
        of them (partition/client/outbox.py); one the store refused for good is not acknowledged."""
        lost = self.session.writer.unpersisted
        kept = [u for u in uids if u not in lost] if lost else uids
        if kept and self.final:  # it said bye: its outbox ended with it, nothing to let go of
            log.debug("%s: ended; the ack of %d outcome(s) is not sent", self.uid, len(kept))
        elif kept:
            self.session.channel.send(self.uid, msg(b"ack", {"uids": kept}))

    def on_output(self, chunks: list) -> None:
        """Unit output forwarded by node daemons (channel thread, without the lock)."""
        if self.umgr is not None:
            self.umgr.events.on_output(chunks)

    def on_back(self, body: dict) -> None:
        """Units a partition handed back (stopped before they ran, or given back when asked:
        `stays`): routed again."""
        if self.umgr is not None:
            self.umgr.events.on_units_back(body["part"], body["units"], body.get("stays") is True)

    def on_lost(self, body: dict) -> None:
        """A partition's agent died: which of its units had started (see UnitManager)."""
        if self.umgr is not None:
            self.umgr.events.on_partition_lost(
                body["part"], body["started"], body["killed"], body["reason"]
            )

    def on_synced(self, body: dict) -> None:
        """After a sync: the units the partition's agent never had."""
        if self.umgr is not None:
            self.umgr.events.on_synced(body["part"], body["unknown"], body.get("started") or ())

    def on_reply(self, body: dict) -> None:
        cid = cast(str, body.get("cid"))  # (None: no command of this client's, popped as such)
        new = self._new_by_cmd.pop(cid, [])
        sync = self._syncs.pop(cid, None)
        if body.get("ok"):
            return
        if sync is not None and not self.ending and not self.released:
            # (its units would wait for an answer that never comes while the pilot lives:
            # asked again at the next heartbeat; once the pilot ends, they are settled then,
            # UnitEvents.on_pilot_changed)
            log.warning(
                "%s: sync %s failed: %s; asked again", self.uid, sync["cid"], body.get("error")
            )
            self._resync.append(sync)
            return
        log.error("%s: command %s failed: %s", self.uid, body.get("cid"), body.get("error"))
        for uid in new:  # a refused reconfig starts nothing: its partitions end here
            part = self.parts[uid]
            if not part.final:
                part.advance(S.FAILED, time.time(), f"reconfig refused: {body.get('error')}")

    def on_partition_state(self, uid: str, state: str, ts: float, info: dict) -> None:
        part = self.parts.get(uid)
        if part is None:  # started from a shell
            desc = ComputePartitionDescription.from_stored(
                info.get("description") or {"size": "FILL"}
            )
            part = self.new_partition(desc, uid)
            self.session.ids.seen_uid(f"{self.uid}.part", uid)
        if part.final:
            return
        if "resources" in info:
            part.resources = info["resources"]
        if state == S.ACTIVE and info.get("data") is True:
            part.data_shared = True
        for key in ("started_by", "stopped_by"):  # (reconfig command ids: checked, as all)
            if isinstance(info.get(key), str) and len(info[key]) <= 200:
                setattr(part, key, info[key])
        if "free" in info:
            self._free = info["free"]
        part.advance(state, ts, info.get("reason"))
        if self.umgr is not None and state in (S.ACTIVE,) + tuple(S.FINAL):
            self.umgr.events.on_partition_changed(part)

    def end(self, state: str, reason: str | None) -> None:
        if self.final:
            return
        ts = time.time()
        ended = []
        for part in self.parts.values():
            if not part.final:
                pstate = S.CANCELED if state == S.CANCELED else S.FAILED
                if state == S.DONE:
                    pstate = S.DONE
                part.advance(pstate, ts, reason or f"pilot {state}")
                ended.append(part)
        self.advance(state, ts, reason)  # (first: the units are told no pilot is left to ask)
        self.extra_jobs.end_all()
        if self.umgr is not None:
            for part in ended:
                self.umgr.events.on_partition_changed(part)
            self.umgr.events.on_pilot_changed(self)
        self.session.tell_waiting(self)

    def lost(self, reason: str) -> None:
        self.end(S.FAILED if not self._cancel_requested else S.CANCELED, reason)

    def on_taken_over(self, body: dict) -> None:
        """Another client took the pilot over: this one stops acting on it (sends nothing
        more, routes no units there, and fails nothing on its silence: its units' states stay
        as the store has them, the new owner carries on), and says `released`."""
        by = body.get("by")
        self.release_to(by if isinstance(by, dict) else {})
        self.session.channel.send(self.uid, msg(b"released"))

    def taken_over_unheard(self) -> bool:
        """(lock held) Whether another client took the pilot over without this one hearing
        of it (stopped or cut off meanwhile): the store's owner mark says so
        (pmgr/core/ownership.py); then released, as by `taken_over`."""
        if self.released or self.final:
            return bool(self.released)
        by = ownership.taken_by(self.session)
        if by is None:
            return False
        self.release_to(
            by, f" (the store's owner, epoch {by.get('epoch')}; this client did not hear of it)"
        )
        return True

    def unreachable(self) -> None:
        """(lock held) A send failed: the bootstrap is not connected to this client.  At most
        once a heartbeat, the store is asked whether another client took the pilot over."""
        now = time.monotonic()
        if now >= self._owner_asked + HEARTBEAT and self.linked:
            self._owner_asked = now
            self.taken_over_unheard()

    @property
    def lost_to_us(self) -> bool:
        """Another client acts on it now (or it will not take this one): not while it is
        being attached."""
        return self.released is not None and self.released != ATTACHING

    def release_to(self, by: dict, how: str = "") -> None:
        """(lock held) Another client (`by`: {host, pid, ...}) owns the pilot now: this one
        no longer acts on it (sends nothing, routes no units there, fails nothing on its
        silence)."""
        self.released = f"taken over by the client on {by.get('host')}, pid {by.get('pid')}"
        self.linked = False
        log.warning("%s: %s%s; this client no longer acts on it", self.uid, self.released, how)
        if self.umgr is not None:  # (units waiting here for it: none may wait for ever)
            self.umgr.routing.route()

    def tick(self) -> None:
        if self.final or self.released:
            return
        self.extra_jobs.tick()
        if self.adapt is not None:
            self.adapt.tick(time.monotonic())
        code = self.job.poll() if self.job is not None else None  # None: recovered, not ours
        now = time.monotonic()
        if code is not None:
            if self._cancel_requested and self.state != S.ACTIVE:
                self.end(S.CANCELED, self._cancel_requested)
            else:
                assert self.job is not None  # (code: its poll's)
                self.lost(
                    f"pilot job exited with code {code} without saying bye: {self.job.describe()}",
                )
            return
        if self.state == S.ACTIVE:
            silent = now - self.last_heard
            if silent > self.resource.client_timeout:
                if self.taken_over_unheard():  # (silent to this client: another owns it)
                    return
                if self._job_lives(now):
                    assert self.job is not None  # (_job_lives: False without a job)
                    if not self._silence_said:
                        self._silence_said = True
                        log.warning(
                            "%s: no word from the pilot for %.0f s, but its job (id %s) lives: "
                            "waiting for it (a stalled pilot is not a dead one)",
                            self.uid, silent, self.job.pid,
                        )  # fmt: skip
                else:
                    self.lost(f"no word from the pilot for {silent:.0f} s")
                    return
            elif self._silence_said:
                self._silence_said = False
                log.warning("%s: the pilot speaks again", self.uid)
            if now >= self._next_hb and self.linked:
                self._next_hb = now + HEARTBEAT
                self.session.channel.send(self.uid, msg(b"hb"))
                syncs, self._resync = self._resync, []
                for cmd in syncs:  # (a sync the channel could not send: asked again)
                    self.command({**cmd, "cid": self.session.ids.next_cid(self.uid)})

    def _job_lives(self, now: float) -> bool:
        """(tick) The pilot's job runs (its process, or the batch system says so: a poll that
        found it ended is handled before; a job another client submitted is followed by its
        id) and its runtime, with client_timeout s to say bye, is not over.  A pilot whose job
        cannot be followed, or one past its runtime, is given up on silence alone."""
        if self.job is None:
            return False
        runtime = float(self.description.runtime or 0) * 60.0
        return now < self.born + runtime + self.resource.client_timeout

    # RADICAL-Pilot's names for the pilot's directories and job output
    @property
    def pilot_sandbox(self) -> str:
        """The pilot's sandbox directory."""
        return self.sandbox

    @property
    def endpoint_fs(self) -> str:
        """The URL of its resource's file system (RP's endpoint_fs: `file://localhost/`)."""
        return self._rp_endpoints()[2]

    @property
    def session_sandbox(self) -> str:
        """The directory the pilot's sandbox is in (RP's session sandbox)."""
        return os.path.dirname(self.sandbox)

    @property
    def resource_sandbox(self) -> str:
        """The directory the session sandbox is in (RP's resource sandbox)."""
        return os.path.dirname(self.session_sandbox)

    @property
    def client_sandbox(self) -> str:
        """The session directory."""
        return self.session.dir

    def _job_file(self, name: str) -> str:
        try:
            with open(os.path.join(self.sandbox, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    @property
    def stdout(self) -> str:
        """What the pilot's job wrote to stdout (its `output` file) so far."""
        return self._job_file(self.description.output or "bootstrap.out")

    @property
    def stderr(self) -> str:
        """What the pilot's job wrote to stderr (its `error` file, the bootstrap's log)."""
        return self._job_file(self.description.error or "bootstrap.log")

    @property
    def exit_on_error(self) -> bool:
        """Its description's exit_on_error."""
        return self.description.exit_on_error

    @property
    def log(self) -> list[tuple[float, str]]:
        """What happened to the pilot and its partitions, in time order: [(ts, text)]."""
        with self.session.locked():
            events = [(ts, f"pilot {state}") for state, ts in self.history]
            if self.reason:
                events.append((self.history[-1][1], f"pilot reason: {self.reason}"))
            for part in self.parts.values():
                events += [(ts, f"{part.uid} {state}") for state, ts in part.history]
                if part.reason:
                    events.append((part.history[-1][1], f"{part.uid} reason: {part.reason}"))
        return sorted(events, key=lambda e: e[0])

    def as_dict(self) -> dict:
        """RADICAL-Pilot's view of a pilot: RP 1.103's keys, as RP gives them (its sandboxes
        as URLs on the resource's file system endpoint, `file://localhost/...`; js_url, js_hop
        and endpoint_fs those of its resource and access schema, pilot/rp/utils.py
        pilot_endpoints; resource_details and nodelist None: no agent reports RP's resource
        manager details), plus ours (reason, size, partitions, job)."""
        js_url, js_hop, endpoint_fs = self._rp_endpoints()
        root = endpoint_fs.rstrip("/")  # (RP's sandbox URLs: the endpoint's, with the path)
        stdout, stderr = self.stdout, self.stderr  # (files: read outside the lock)
        with self.session.locked():
            return {
                "session": self.session.uid,
                "pmgr": self.pmgr.uid,
                "uid": self.uid,
                "type": "pilot",
                "state": self.state,
                "log": self.log,
                "stdout": stdout,
                "stderr": stderr,
                "resource": self.description.resource,
                "resources": {"cpu": self.size.get("cores"), "gpu": self.size.get("gpus")},
                "endpoint_fs": endpoint_fs,
                "resource_sandbox": root + self.resource_sandbox,
                "session_sandbox": root + self.session_sandbox,
                "pilot_sandbox": root + self.sandbox + "/",
                "client_sandbox": self.client_sandbox,
                "js_url": js_url,
                "js_hop": js_hop,
                "description": self.description.as_dict(),
                "resource_details": None,
                "nodelist": None,
                "reason": self.reason,
                "size": dict(self.size),
                "partitions": [p.uid for p in self.parts.values()],
                "job": self.job.pid if self.job is not None else self.job_id,
            }

    def _rp_endpoints(self) -> tuple[str, str, str]:
        """(as_dict) RP's js_url, js_hop and endpoint_fs of its resource (read once)."""
        if self._endpoints is None:
            d = self.description
            self._endpoints = pilot_endpoints(d.resource, d.access_schema, self.resource)
        return self._endpoints

    def as_doc(self, full: bool = True) -> dict:
        return {
            "uid": self.uid,
            "session": self.session.uid,
            "state": self.state,
            "description": self.description.to_stored() if full else None,
            "size": self.size,
            "sandbox": self.sandbox,
            "reason": self.reason,
            "job": self.job.pid if self.job is not None else self.job_id,
            "control": self.control,
            "jobs": self.extra_jobs.describe()[1:],
            "adapt": self.adapt.decisions[-100:] if self.adapt is not None else [],
        }

    # RADICAL-Pilot's files between the client and the pilot sandbox (pmgr/core/pilot_transfers.py)
    def stage_in(self, directives) -> list[str]:
        """Files from the client into the pilot sandbox (TRANSFER, TARBALL); a path without a
        scheme at the pilot's end is in its sandbox.  Waits for the pilot to be ACTIVE and the
        files to be there; returns the targets; StagingError names a failed directive."""
        from pilot.pmgr.core.pilot_transfers import stage

        return stage(self, directives, into_pilot=True)

    def stage_out(self, directives) -> list[str]:
        """Files from the pilot sandbox to the client, as stage_in the other way."""
        from pilot.pmgr.core.pilot_transfers import stage

        return stage(self, directives, into_pilot=False)
