"""UnitManager: submits units, routes them to partitions, follows them to a final state.

Routing (client side): a unit with `partition=` goes to that partition once it is ACTIVE; any
other unit goes to the ACTIVE partition of this manager's pilots with the fewest outstanding
units per core among those whose largest node can hold it.  A partition holds at most its
window of units not yet final (Partition.window: 4 x cores + 768, plus what it ends in
WINDOW_AHEAD seconds at its recent rate): enough to keep its agent busy while its reports and the
next units are on their way, few enough that a partition started later gets work and a stopped
one has little to hand back.  Units wait at
the client (state SCHEDULING) otherwise; each routing round sends one batch per partition.

Nothing is lost: every unit ends in exactly one final state.
  - cannot ever fit (larger than any node of every pilot, or than its named partition): FAILED
    at submit with the reason
  - handed back by a stopped partition (queued, not started): routed again
  - its partition or pilot ended while the unit was queued or running there, without a word
    from the agent: FAILED with the partition's reason
  - no live pilot is left to run it: FAILED
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque

from pilot import states as S
from pilot.descriptions import ComputeUnitDescription
from pilot.pmgr.entities import UNIT_STATE, Unit, callback
from pilot.protocol import pack
from pilot.rp_names import SCHEDULER_DEFAULT, SCHEDULER_ROUND_ROBIN, SCHEDULERS

SEND_CHUNK = 2000
# submit_units makes, routes and sends units in chunks that double from MIN to MAX: the first
# units are on their way (persisted, then sent) while the rest are made (measured: 2,000
# function units made in one piece reached their agent after 130 ms, a third of their run)
SUBMIT_CHUNK_MIN, SUBMIT_CHUNK_MAX = 64, 256
# ... and a chunk sent to a partition short of units is on its way before the next is made: the
# store writer and the channel need the interpreter for it, and a submitting thread that goes
# on holds it for 5 ms at a time (measured: the first units left the client 70-90 ms after
# submit_units was called, and the cores idled meanwhile)
SEND_WAIT = 0.1
log = logging.getLogger("pmgr.units")


class UnitManager:
    def __init__(self, session, scheduler: str | None = None) -> None:
        """scheduler: how units are spread over this manager's pilots (RADICAL-Pilot's names):
        rp.SCHEDULER_ROUND_ROBIN (the default): each unit is bound, in submit order, to the
        next pilot in turn and waits for it; rp.SCHEDULER_BACKFILLING: a unit goes to whichever
        pilot has an ACTIVE partition with room first.  Within a pilot, units go to its
        partitions as described above."""
        scheduler = scheduler or SCHEDULER_DEFAULT
        if scheduler not in SCHEDULERS:
            raise ValueError(
                f"UnitManager: scheduler={scheduler!r} is not known; accepted: {list(SCHEDULERS)}"
            )
        self.scheduler = scheduler
        self.turn = 0  # round robin: the pilot the next unit is bound to
        self.pinned = 0  # units submitted with pilot=
        self.session = session
        self.uid = session.next_uid("umgr")
        self.pilots: list = []
        self.units: dict[str, Unit] = {}
        self.pending: deque[Unit] = deque()
        self.callbacks: list = []
        self._output_callbacks: list = []
        self.said_again = 0  # updates refused because the unit had passed them (sync replays)
        session.umgrs.append(self)
        if session.recovery is not None:  # an attached session: its units come back here
            session.recovery.adopt_units(self)

    # -- public -----------------------------------------------------------------------------
    def register_callback(self, cb, metric: str = UNIT_STATE, cb_data=None) -> None:
        """cb(unit, state) after every state change of this manager's units, NEW included;
        with cb_data, cb(unit, state, cb_data) (RADICAL-Pilot's signature)."""
        self.callbacks.append(callback("UnitManager.register_callback", cb, metric, cb_data))

    def register_output_callback(self, cb) -> None:
        """cb(unit, node, rank, stream, text) for output forwarded from multi-node pilots
        (node daemons forward each unit's first 64 KiB per rank and stream; the files in the
        unit's sandbox have all of it)."""
        self._output_callbacks.append(cb)

    def on_output(self, chunks: list) -> None:
        """Forwarded output [[uid, node, rank, stream, text], ...] (channel thread)."""
        calls = []
        with self.session.lock:
            for uid, node, rank, stream, text in chunks:
                unit = self.units.get(uid)
                if unit is None:
                    continue
                unit.add_output(node, rank, stream, text)
                calls.append((unit, node, rank, stream, text))
        for cb in list(self._output_callbacks):
            for call in calls:
                try:
                    cb(*call)
                except Exception:
                    log.exception("output callback %r failed", cb)

    def add_pilots(self, pilots) -> None:
        pilots = pilots if isinstance(pilots, (list, tuple)) else [pilots]
        with self.session.locked():
            for p in pilots:
                if p.umgr is not None and p.umgr is not self:
                    raise ValueError(f"add_pilots: {p.uid} is already used by {p.umgr.uid}")
                if p.umgr is None:
                    p.umgr = self
                    self.pilots.append(p)
            self.route()

    def submit_units(self, descriptions):
        """Submit one ComputeUnitDescription (returns a Unit), a list, or a UnitGroup (returns
        a list, in order)."""
        single = isinstance(descriptions, (ComputeUnitDescription, dict))
        descs = [descriptions] if single else list(descriptions)
        for i, d in enumerate(descs):
            if isinstance(d, dict):
                descs[i] = d = ComputeUnitDescription(d)
            if not isinstance(d, ComputeUnitDescription):
                raise ValueError(
                    f"submit_units: descriptions[{i}]={d!r} must be a ComputeUnitDescription"
                )
            error = d.submit_error()
            if error:
                raise ValueError(f"submit_units: descriptions[{i}]: {error}")
            if d.pilot is not None and d.pilot not in {p.uid for p in self.pilots}:
                raise ValueError(
                    f"submit_units: descriptions[{i}].pilot={d.pilot!r} is not a pilot of "
                    f"this manager; known: {[p.uid for p in self.pilots]}"
                )
            if d.tag is not None and d.tag not in self.units:
                earlier = {x.name for x in descs[:i] if x.name}
                if d.tag not in earlier:
                    raise ValueError(
                        f"submit_units: descriptions[{i}].tag={d.tag!r} must be the uid (or, "
                        "in the same call, the name) of an earlier unit of this manager"
                    )
            if d.partition is not None and self.find_partition(d.partition) is None:
                raise ValueError(
                    f"submit_units: descriptions[{i}].partition={d.partition!r} "
                    f"is not a partition of this manager's pilots "
                    f"{[p.uid for p in self.pilots]}"
                )
        session = self.session
        units: list[Unit] = []
        named: dict[str, Unit] = {}
        start = 0
        yields = not session.in_callback()  # (a callback holds up the channel: it never waits)
        while start < len(descs):  # in chunks: the first ones run while the rest are made
            size = min(SUBMIT_CHUNK_MAX, max(SUBMIT_CHUNK_MIN, start))
            chunk = descs[start : start + size]
            start += size
            with session.locked():
                self._submit_chunk(chunk, named, units)
                sent = self.route()
            if sent is not None and start < len(descs) and yields:
                sent.wait(SEND_WAIT)  # (their partition is short of units: they go first)
        return units[0] if single else units

    def _submit_chunk(self, descs: list, named: dict, units: list) -> None:
        """(lock held) Units for these (checked) descriptions, SCHEDULING (or FAILED if they
        can never fit), appended to `units`; `named`: the call's units by name so far."""
        session = self.session
        now = time.time()
        verdicts: dict = {}  # (what _never_fits reads) -> its answer: the same for a chunk
        for d in descs:
            unit = Unit(session, session.next_uid("unit", 6), d, self, now)
            self.units[unit.uid] = unit
            if d.name:
                named[d.name] = unit
            if d.tag is not None:
                unit.after = self.units.get(d.tag) or named[d.tag]
            if d.pilot is not None:
                self.pinned += 1
            units.append(unit)
            session.persist_state(unit, S.NEW, now)
            self.session.changed(unit, S.NEW)
            unit.advance(S.SCHEDULING, now, None)
            shape = (d.pilot, d.partition, d.rank_cores, d.rank_gpus, d.ranks)
            reason = verdicts.get(shape, False)
            if reason is False:
                reason = verdicts[shape] = self._never_fits(unit)
            if reason:
                unit.advance(S.FAILED, now, reason)
            else:
                if d.partition is None and unit.after is None and self.pilots:
                    self._pilot_for(unit)  # round robin: bound in submit order
                self.pending.append(unit)

    def cancel_units(self, uids=None, reason: str = "canceled by the user") -> None:
        """Cancel units (all of this manager's when uids is None); running ones are killed."""
        with self.session.locked():
            targets = (
                list(self.units.values())
                if uids is None
                else [self._unit(u) for u in ([uids] if isinstance(uids, str) else uids)]
            )
            targets = [u for u in targets if not u.final]
            now = time.time()
            by_pilot: dict = {}
            for u in targets:
                if u.part is None:
                    self.pending.remove(u)
                    u.advance(S.CANCELED, now, reason)
                else:
                    by_pilot.setdefault(u.pilot, []).append([u.uid, u.part])
            for pilot, pairs in by_pilot.items():
                pilot.command(
                    {"cid": None, "op": "cancel_units", "args": {"units": pairs, "reason": reason}}
                )

    def wait_units(
        self, uids=None, state=None, timeout: float | None = None, progress: bool | None = None
    ) -> list[str]:
        """Block until the units (all when uids is None) are final (or in `state`); a unit's
        final-state callbacks have all run when it counts as final here.  progress=True (or
        PILOT_PROGRESS=1 when progress is None) draws a bar on stderr meanwhile: units there
        of all, DONE / FAILED / CANCELED, the rate (pmgr/progress.py; only on a terminal)."""
        with self.session.lock:
            units = (
                list(self.units.values())
                if uids is None
                else [self._unit(u) for u in ([uids] if isinstance(uids, str) else uids)]
            )
        wanted = (
            S.FINAL
            if state is None
            else frozenset([state] if isinstance(state, str) else state) | S.FINAL
        )

        left = units  # shrinks as units arrive: each wake-up costs what changed, not len(units)

        settle = not self.session.in_callback()  # a callback cannot wait for callbacks

        def there(u: Unit) -> bool:  # in a final state only once its callbacks have run
            return u.state in wanted and (u.settled or not settle or u.state not in S.FINAL)

        def arrived() -> bool:
            nonlocal left
            if left and there(left[0]) and there(left[-1]):
                left = [u for u in left if not there(u)]
            elif left and there(left[0]):
                i = 0
                while i < len(left) and there(left[i]):
                    i += 1
                left = left[i:]
            return not left

        from pilot.pmgr.progress import unit_progress  # here: only wait_units knows of the bar

        with unit_progress(units, wanted, progress):  # a bar on stderr, when asked for
            self.session.wait_for(
                arrived,
                timeout,
                lambda: f"{len(left)} of {len(units)} units not there yet, e.g. {left[:3]}",
            )
        return [u.state for u in units]

    # RADICAL-Pilot's listing names
    def list_units(self) -> list[str]:
        with self.session.lock:
            return list(self.units)

    def list_pilots(self) -> list[str]:
        return [p.uid for p in self.pilots]

    def get_pilots(self) -> list:
        return list(self.pilots)

    def remove_pilots(self, pilots) -> None:
        """Stop routing units to these pilots (Pilot objects or uids); units already sent to
        them run there; units bound to them (round robin) go to the others."""
        names = {
            p if isinstance(p, str) else p.uid
            for p in (pilots if isinstance(pilots, (list, tuple)) else [pilots])
        }
        with self.session.locked():
            for p in [p for p in self.pilots if p.uid in names]:
                self.pilots.remove(p)
                p.umgr = None
            for unit in self.pending:
                if unit.bound is not None and unit.bound.uid in names:
                    unit.bound = None
            self.route()

    def get_units(self, uids=None) -> list[Unit]:
        with self.session.lock:
            if uids is None:
                return list(self.units.values())
            return [self._unit(u) for u in ([uids] if isinstance(uids, str) else uids)]

    # -- routing (lock held) ------------------------------------------------------------------
    def _unit(self, uid) -> Unit:
        if isinstance(uid, Unit):
            uid = uid.uid
        unit = self.units.get(uid)
        if unit is None:
            raise ValueError(f"unit uid={uid!r} is unknown to {self.uid}")
        return unit

    def find_partition(self, uid: str):
        for p in self.pilots:
            for part in p.parts.values():
                if part.uid == uid:
                    return part
        return None

    def _never_fits(self, unit: Unit) -> str | None:
        d = unit.description
        if d.pilot is not None:
            pinned = next(p for p in self.pilots if p.uid == d.pilot)
            if pinned.final:
                return f"pilot={d.pilot!r} is {pinned.state}"
        if d.partition is not None:
            part = self.find_partition(d.partition)
            if part.final:
                return f"partition={d.partition!r} is {part.state}"
            return None  # its agent knows the partition's pool and says so at arrival
        if not self.pilots:
            return None
        live = [p for p in self.pilots if not p.final]
        cores, gpus = d.rank_cores, math.ceil(d.rank_gpus)
        if live and all(
            cores > p.size["cores_per_node"] or gpus > p.size["gpus_per_node"] for p in live
        ):
            best = max((p.size["cores_per_node"], p.size["gpus_per_node"]) for p in live)
            return (
                f"cores={cores}, gpus={d.rank_gpus} can never fit: the pilots' nodes have at "
                f"most {best[0]} cores, {best[1]} GPUs"
            )
        if live and all(
            d.ranks * cores > p.size["cores"] or d.ranks * d.rank_gpus > p.size["gpus"]
            for p in live
        ):
            most = max((p.size["cores"], p.size["gpus"]) for p in live)
            return (
                f"ranks={d.ranks} x cores={cores}, gpus={d.rank_gpus} can never fit: the "
                f"pilots hold at most {most[0]} cores, {most[1]} GPUs"
            )
        return None

    def _pilot_for(self, unit: Unit):
        """The pilot a unit must run on (`pilot=`, or its round-robin turn), or None (any)."""
        d = unit.description
        if d.pilot is not None:
            return next(p for p in self.pilots if p.uid == d.pilot)
        if self.scheduler != SCHEDULER_ROUND_ROBIN:
            return None
        if unit.bound is None or unit.bound.final:
            live = [p for p in self.pilots if not p.final and self._could_run(p, d)]
            if not live:
                return None
            unit.bound = live[self.turn % len(live)]
            self.turn += 1
        return unit.bound

    @staticmethod
    def _could_run(pilot, d) -> bool:
        size = pilot.size
        return (
            d.rank_cores <= size["cores_per_node"]
            and math.ceil(d.rank_gpus) <= size["gpus_per_node"]
            and d.ranks * d.rank_cores <= size["cores"]
        )

    def route(self) -> threading.Event | None:
        """Send pending units, oldest first, to partitions with room in their window; an
        Event set once they are sent when a partition was short of units, else None."""
        if not self.pending:
            return None
        if self.pilots and all(p.final for p in self.pilots):
            now = time.time()
            for unit in self.pending:
                unit.advance(S.FAILED, now, "no live pilot is left to run it")
            self.pending.clear()
            return None
        ended = []
        if self.pinned and any(p.final for p in self.pilots):  # units pinned to a pilot that ended
            ended = [u for u in self.pending if u.description.pilot and self._pilot_for(u).final]
        for unit in ended:
            self.pending.remove(unit)
            pilot = self._pilot_for(unit)
            unit.advance(S.FAILED, time.time(), f"pilot={pilot.uid!r} is {pilot.state}")
        windows = {
            part: part.window  # (read once: it follows the partition's rate)
            for p in self.pilots
            if p.state == S.ACTIVE and p.linked  # (an attached pilot: once its hello came)
            for part in p.parts.values()
            if part.state == S.ACTIVE and part.accepting
        }
        room = {part: w - part.outstanding for part, w in windows.items() if w > part.outstanding}
        if not room:
            return None
        batches: dict = {}
        sent: list[Unit] = []
        short = any(part.outstanding < windows[part] // 2 for part in room)  # running short
        skipped: list[Unit] = []
        fits_cache: dict = {}
        pending = self.pending
        while pending and room:
            unit = pending.popleft()
            d = unit.description
            target = None
            if d.partition is not None:
                part = self.find_partition(d.partition)
                if part in room:
                    target = part
                elif part.final:
                    why = f"partition={part.uid!r} is {part.state}"
                    unit.advance(S.FAILED, time.time(), why)
                    continue
            elif unit.after is not None:  # `tag`: where that unit went
                anchor = unit.after
                part = anchor.pilot.parts.get(anchor.part) if anchor.part else None
                if part is not None and part in room:
                    target = part
                elif (part is not None and part.final) or (part is None and anchor.final):
                    where = f"partition {part.uid}, which is {part.state}" if part else "nowhere"
                    why = f"tag={anchor.uid!r}: that unit ran in {where}"
                    unit.advance(S.FAILED, time.time(), why)
                    continue
            else:
                pilot = self._pilot_for(unit)
                if pilot is not None and pilot.final:  # pinned to a pilot that ended
                    unit.advance(S.FAILED, time.time(), f"pilot={pilot.uid!r} is {pilot.state}")
                    continue
                key = (d.rank_cores, d.rank_gpus, d.ranks, pilot)
                cands = fits_cache.get(key)
                if cands is None:
                    cands = fits_cache[key] = [
                        p
                        for p in room
                        if (pilot is None or p.pilot is pilot) and p.could_hold(*key[:3])
                    ]
                cands = [p for p in cands if p in room]
                if cands:
                    target = min(cands, key=lambda p: p.outstanding / max(p.cores, 1))
            if target is None:
                skipped.append(unit)
                continue
            unit.part = target.uid
            unit.pilot = target.pilot
            target.outstanding += 1
            room[target] -= 1
            if room[target] <= 0:
                del room[target]
            if unit.client_in and unit.staged_on is not target.pilot:
                self.session.writer.changed(unit)
                self._stage_in(unit, target)  # sent once its files are there
                continue
            batches.setdefault(target, []).append(unit.wire())
            sent.append(unit)
        pending.extendleft(reversed(skipped))
        if not batches:
            return None
        # sent once the store has each unit with the partition it goes to (persist, then send:
        # a client that dies in between leaves units its successor finds, asks, and re-routes),
        # ahead of the records of units still waiting here (pmgr/store/writer.py)
        # (a partition with half its window or more in hand can wait for the writer's linger)
        done = threading.Event() if short else None

        def send() -> None:
            try:
                self._send_persisted(batches)
            finally:
                if done is not None:
                    done.set()

        self.session.writer.send_after(sent, send, short)
        return done

    # -- data staging (pmgr/transfers.py) ----------------------------------------------------
    def _stage_in(self, unit: Unit, target) -> None:
        def then(error: str | None) -> None:  # (transfer thread)
            with self.session.locked():
                if unit.part != target.uid:
                    pass  # its partition was lost meanwhile: it was routed again from there
                elif unit.final:  # canceled while its files moved
                    target.outstanding -= 1
                elif error:
                    target.outstanding -= 1
                    unit.advance(S.FAILED, time.time(), f"input staging: {error}")
                elif target.final or not target.accepting:
                    target.outstanding -= 1
                    unit.staged_on = target.pilot
                    unit.part = None
                    self.pending.appendleft(unit)  # routed again (its files are on that pilot)
                else:
                    unit.staged_on = target.pilot
                    batch = {target: [unit.wire()]}
                    self.session.writer.then(lambda: self._send_persisted(batch))
                self.route()

        self.session.transfers.stage(unit, target.pilot, unit.client_in, then)

    def _stage_out(self, unit: Unit, ts: float, reason: str | None) -> None:
        def then(error: str | None) -> None:  # (transfer thread)
            with self.session.locked():
                unit.client_out = []  # done: the DONE below is let through
                if not unit.final:
                    if error:
                        unit.advance(S.FAILED, time.time(), f"output staging: {error}")
                    else:
                        unit.advance(S.DONE, time.time(), reason)
                    part = unit.pilot.parts.get(unit.part) if unit.part else None
                    if part is not None:
                        part.outstanding -= 1
                self.route()

        self.session.transfers.stage(unit, unit.pilot, unit.client_out, then)

    def _send_persisted(self, batches: dict) -> None:
        """(Writer thread) Send each batch; a unit the store refused for good is not sent:
        it ends FAILED, named in session.unpersisted."""
        refused = self.session.writer.unpersisted
        send = self.session.channel.send
        for part, units in batches.items():
            if refused:
                kept = [u for u in units if u["uid"] not in refused]
                self._not_persisted(part, [u["uid"] for u in units if u["uid"] in refused])
                units = kept
            for i in range(0, len(units), SEND_CHUNK):
                send(part.pilot.uid, [b"units", part.uid.encode(), pack(units[i : i + SEND_CHUNK])])

    def _not_persisted(self, part, uids: list[str]) -> None:
        if not uids:
            return
        with self.session.locked():
            for uid in uids:
                unit = self.units[uid]
                if not unit.final:
                    part.outstanding -= 1
                    unit.advance(S.FAILED, time.time(), "not sent: the store refused its record")
            self.session.cond.notify_all()

    # -- events (lock held, channel thread) ---------------------------------------------------
    def on_unit_state(self, uid: str, state: str, ts: float, info: dict) -> None:
        """One state update from an agent.  One the unit's state machine refuses changes
        nothing: said again (a sync after an attach repeats what the unit has passed) it is
        counted in `said_again`; any other is logged with the unit and both states."""
        unit = self.units.get(uid)
        if unit is None:
            log.warning("state %s for unknown unit %s dropped", state, uid)
            return
        if state == unit.state:
            return
        if unit.part is None and state not in S.FINAL:
            self.said_again += 1  # from a partition it left (routed again): stale
            return
        if not S.reachable(S.UNIT_MACHINE, unit.state, state):
            if any(state == past for past, _ in unit.history):
                self.said_again += 1
            else:
                log.warning(
                    "%s: update %s -> %s refused by the unit state machine (%s)",
                    uid,
                    unit.state,
                    state,
                    info.get("reason") or f"exit code {info.get('exit_code')}",
                )
            return
        if info.get("lost") and self._may_restart(unit, info.get("reason") or "node lost"):
            part = unit.pilot.parts.get(unit.part)
            if part is not None:
                part.outstanding -= 1
                part.accepting = False  # it lost a node: it ends FAILED next
            unit.advance(S.SCHEDULING, ts, None)  # its node was lost: it runs again
            unit.part = None
            self.pending.appendleft(unit)
            return
        if state == S.DONE and unit.client_out:  # its output files come here first
            if unit.staging_out:
                return  # said again while they do
            unit.staging_out = True
            unit.exit_code = info.get("exit_code", 0)
            if "node" in info:
                unit.node, unit.slots = info["node"], info.get("slots")
            self._stage_out(unit, ts, info.get("reason"))
            return
        if "exit_code" in info:
            unit.exit_code = info["exit_code"]
        for key in ("stdout", "stderr"):  # kept output of a `cleanup` unit, a function's
            if isinstance(info.get(key), str):
                unit.kept[key] = info[key]
        if isinstance(info.get("value"), str):  # a function unit's return value, packed
            unit.value = info["value"]
        if isinstance(info.get("exception"), str):
            unit.exception = info["exception"]
        if "node" in info:
            unit.node = info["node"]
            unit.slots = info.get("slots")
        unit.advance(state, ts, info.get("reason"))
        if unit.final and unit.part is not None:
            part = unit.pilot.parts.get(unit.part)
            if part is not None:
                part.outstanding -= 1
                part.ended += 1

    def on_units_back(self, part_uid: str, units: list) -> None:
        """Units a partition could not or did not run: route them again."""
        now = time.time()
        back = []
        stopping = self.find_partition(part_uid)
        if stopping is not None:
            stopping.accepting = False  # it is going away: send it nothing more
        for d in units:
            unit = self.units.get(d["uid"])
            if unit is None or unit.final or unit.part != part_uid:
                continue
            part = unit.pilot.parts.get(part_uid)
            if part is not None:
                part.outstanding -= 1
            if unit.description.partition == part_uid:  # pinned there: nowhere else to go
                unit.advance(S.FAILED, now, f"its partition {part_uid} was stopped before it ran")
                continue
            if unit.state == S.QUEUED:
                unit.advance(S.SCHEDULING, now, None)
            unit.part = None
            back.append(unit)
        self.pending.extendleft(reversed(back))
        self.route()

    def on_partition_lost(self, part_uid: str, started: list, killed: list, reason: str) -> None:
        """The agent of `part_uid` died.  Its units that had started (its start journal) may
        have run: they end FAILED, never run twice (unless restartable: then they run again
        elsewhere); the others never ran and are routed again (to another partition; one
        pinned to this partition fails with it)."""
        started, killed = set(started), set(killed)
        lost = self.find_partition(part_uid)
        if lost is not None:
            lost.accepting = False  # its FAILED state follows: route nothing more there
        now = time.time()
        back = []
        for unit in self.units.values():
            if unit.part != part_uid or unit.final:
                continue
            part = unit.pilot.parts.get(part_uid)
            if part is not None:
                part.outstanding -= 1
            if unit.uid in killed:
                why = f"killed: {reason} while it ran"
            elif unit.uid in started:
                why = f"{reason} after starting it; its outcome is unknown"
            elif unit.description.partition == part_uid:
                why = f"its partition {part_uid} was lost before it started ({reason})"
            else:
                why = None
            if why is not None and not self._may_restart(unit, why):
                unit.advance(S.FAILED, now, why)
                continue
            if unit.state != S.SCHEDULING:
                unit.advance(S.SCHEDULING, now, None)
            unit.part = None
            back.append(unit)
        if back:
            log.warning(
                "%s lost (%s): %d unit(s) routed again (never started, or restartable)",
                part_uid,
                reason,
                len(back),
            )
        self.pending.extendleft(reversed(back))
        self.route()

    def on_partition_changed(self, part) -> None:
        if part.final:
            now = time.time()
            for unit in self.units.values():
                if unit.part != part.uid or unit.final:
                    continue
                self._never_reached(
                    unit,
                    f"lost with partition {part.uid} ({part.state}: {part.reason}); "
                    "its outcome is unknown",
                    now,
                    front=True,
                )
            part.outstanding = 0
        self.route()

    def _never_reached(self, unit: Unit, why: str, now: float, front: bool = False) -> None:
        """A unit its partition no longer has: one only sent (SCHEDULING, not pinned there)
        never reached it and is routed again; any other is FAILED with `why`."""
        if unit.state == S.SCHEDULING and unit.description.partition != unit.part:
            unit.part = None
            (self.pending.appendleft if front else self.pending.append)(unit)
        elif self._may_restart(unit, why):
            unit.advance(S.SCHEDULING, now, None)
            unit.part = None
            (self.pending.appendleft if front else self.pending.append)(unit)
        else:
            unit.advance(S.FAILED, now, why)

    def _may_restart(self, unit: Unit, why: str) -> bool:
        """A restartable unit (not pinned to the partition it lost) runs again elsewhere."""
        d = unit.description
        if not d.restartable or d.partition == unit.part:
            return False
        log.warning("%s restarts: %s", unit.uid, why)
        return True

    def on_pilot_changed(self, pilot) -> None:
        self.route()

    def on_synced(self, part_uid: str, unknown: list) -> None:
        """After an attach, the agent of `part_uid` does not know these units: one that was
        only sent (SCHEDULING) never reached it and is routed again; any other is lost."""
        now = time.time()
        for uid in unknown:
            unit = self.units.get(uid)
            if unit is None or unit.final or unit.part != part_uid:
                continue
            part = unit.pilot.parts.get(part_uid)
            if part is not None:
                part.outstanding -= 1
            self._never_reached(
                unit,
                f"lost: partition {part_uid} does not know it (found when a client attached)",
                now,
            )
        self.route()
