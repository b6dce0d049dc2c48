"""UnitManager: submits units, routes them to partitions, follows them to a final state.

The user's side is here: submit_units (units are made, checked and routed in chunks),
cancel_units, wait_units, callbacks, the pilots to route to.  How units are routed to partitions
and sent is in its base `Routing` (pmgr/core/routing.py); what the pilots say about units (state
updates, units handed back, partitions lost) in its base `UnitEvents` (pmgr/core/unit_events.py),
with the guarantee that every unit ends in exactly one final state.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import pilot.states as S
from pilot.descriptions import ComputeUnitDescription
from pilot.pmgr.core.blueprint import Blueprints
from pilot.pmgr.core.entities import UNIT_STATE, Unit, advance_together, callback
from pilot.pmgr.core.stream_marks import StreamMarks
from pilot.pmgr.core.unit_events import UnitEvents
from pilot.pmgr.core.unit_list import UnitList
from pilot.pmgr.core.unit_queries import UnitQueries
from pilot.pmgr.core.unit_stream import UnitStream
from pilot.pmgr.core.unit_table import UnitTable
from pilot.rp_names import SCHEDULER_DEFAULT, SCHEDULERS

log = logging.getLogger("pmgr.units")

# submit_units makes, routes and sends units in chunks that double from MIN to MAX: the first
# units are on their way (persisted, then sent) while the rest are made (measured: 2,000
# function units made in one piece reached their agent after 130 ms, a third of their run)
SUBMIT_CHUNK_MIN, SUBMIT_CHUNK_MAX = 64, 256
# ... and a chunk sent to a partition short of units is on its way before the next is made: the
# store writer and the channel need the interpreter for it, and a submitting thread that goes
# on holds it for 5 ms at a time (measured: the first units left the client 70-90 ms after
# submit_units was called, and the cores idled meanwhile)
SEND_WAIT = 0.1


class UnitManager(UnitQueries, UnitEvents):
    """Submits units, routes them to the partitions of its pilots, and follows each to exactly
    one final state (DONE, FAILED or CANCELED).

    Its units in flight are kept as objects; a released one (final, in the store, its
    callbacks run, held by nobody else) as one byte: `get_units`, `wait_units`, `list_units`
    and a unit's `stdout` / `return_value` read it back from the store (pmgr/core/unit_table.py).
    In a session attached to again (`rp.Session(uid=...)`) it gets the session's units back.

    Args:
        session (Session): the session the units belong to.
        scheduler (str | None): how units are spread over this manager's pilots
            (RADICAL-Pilot's names): rp.SCHEDULER_ROUND_ROBIN (the default, also for None):
            each unit is bound, in submit order, to the next pilot in turn and waits for it;
            rp.SCHEDULER_BACKFILLING: a unit goes to whichever pilot has an ACTIVE partition
            with room first.  Within a pilot, units go to its partitions as pmgr/core/routing.py
            describes.

    Raises:
        ValueError: an unknown `scheduler`, naming the accepted ones.
    """

    UNIT = (
        Unit  # the handle made for each unit (pmgr/compat/rp1/tasks.py's TaskManager makes Tasks)
    )
    DESCRIPTION = ComputeUnitDescription  # what its units' stored descriptions are
    UID_PREFIX = "unit"  # generated uids: unit.000000, ...

    def __init__(self, session, scheduler: str | None = None) -> None:
        # (the arguments: the class docstring)
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
        self.units = UnitTable(self)  # live units as objects, released ones as a byte each
        self.feeding = 0  # lazy streams still pulling (pmgr/core/unit_stream.py)
        self.pending: deque[Unit] = deque()
        self.waiting_for: set[str] = set()  # pilots units are pinned to, not added (yet)
        self.ranked = False  # a unit with a priority was submitted: pending is kept in order
        self.callbacks: list = []
        self.registered_cbs: list[tuple] = []  # (cb as given, as called): unregister_callback
        self._output_callbacks: list = []
        self.said_again = 0  # updates refused because the unit had passed them (sync replays)
        session.umgrs.append(self)
        if session.recovery is not None:  # an attached session: its units come back here
            session.recovery.adopt_units(self)

    # -- public -----------------------------------------------------------------------------
    def register_callback(self, cb, metric: str = UNIT_STATE, cb_data=None) -> None:
        """`cb(unit, state)` after every state change of this manager's units, NEW included;
        with cb_data, `cb(unit, state, cb_data)` (RADICAL-Pilot's signature).

        Callbacks run after the unit's own, outside the session lock, on the thread that
        delivers states: they may submit or cancel units, but not wait for states.  One that
        raises is logged and the others still run.

        Args:
            cb (callable): the callback.
            metric (str): `rp.UNIT_STATE`, the one metric.
            cb_data (object): passed to `cb` as its last argument when not None.

        Raises:
            ValueError: another `metric`, or a `cb` that is not callable.
        """
        wrapped = callback("UnitManager.register_callback", cb, metric, cb_data)
        with self.session.lock:
            self.callbacks.append(wrapped)
            self.registered_cbs.append((cb, wrapped))

    def unregister_callback(self, cb=None, metric: str = UNIT_STATE) -> None:
        """Undo register_callback: of `cb` (every registration of it; the same bound method
        got again counts), or of all the user's callbacks when cb is None.

        Args:
            cb (callable | None): the callback as registered; None: all of them.
            metric (str): `rp.UNIT_STATE`, the one metric.

        Raises:
            ValueError: another `metric`.
        """
        if metric != UNIT_STATE:
            raise ValueError(
                f"UnitManager.unregister_callback: metric={metric!r}; accepted: {UNIT_STATE!r}"
            )
        with self.session.lock:
            gone = {id(w) for c, w in self.registered_cbs if cb is None or c == cb}
            self.registered_cbs = [(c, w) for c, w in self.registered_cbs if id(w) not in gone]
            self.callbacks = [w for w in self.callbacks if id(w) not in gone]

    def register_output_callback(self, cb) -> None:
        """`cb(unit, node, rank, stream, text)` for output forwarded from multi-node pilots
        (node daemons forward each unit's first 64 KiB per rank and stream; the files in the
        unit's sandbox have all of it).

        Args:
            cb (callable): called as `cb(unit, node, rank, stream, text)`: the Unit, the node's
                name (str), the rank (int), "stdout" or "stderr", and the text (str).
        """
        self._output_callbacks.append(cb)

    def add_pilots(self, pilots) -> None:
        """Route units to these pilots too (from now on, units waiting included).

        A pilot is used by one UnitManager at a time; adding one twice changes nothing.

        Args:
            pilots (Pilot | list[Pilot]): the pilots.

        Raises:
            ValueError: a pilot another UnitManager uses (naming both).
        """
        pilots = pilots if isinstance(pilots, (list, tuple)) else [pilots]
        with self.session.locked():
            for p in pilots:
                if p.umgr is not None and p.umgr is not self:
                    raise ValueError(f"add_pilots: {p.uid} is already used by {p.umgr.uid}")
                if p.umgr is None:
                    p.umgr = self
                    self.pilots.append(p)
                    p.hand_orphans()
                    self.session.tell_waiting(p)
            self.route()

    def submit_units(
        self, descriptions, lazy: bool = False, window: int | None = None, name: str | None = None
    ):
        """Submit one ComputeUnitDescription (returns a Unit), a list or a UnitGroup (returns
        a list, in order), or any other iterable (a generator of 10^7 descriptions): pulled
        only while fewer than `window` units (default 20,000) of this manager are in flight
        (pmgr/core/unit_stream.py).  An iterable returns the list of its units once all are
        submitted; with lazy=True, a UnitStream at once (it pulls on a thread of its own, and
        remembers its units' uids only: stream.wait(), iter(stream), stream.failed()).

        A list is checked whole before any of its units is made; an iterable is checked a
        chunk (256) at a time, and a description refused stops it there (the units made
        before run on).

        Args:
            descriptions (ComputeUnitDescription | dict | list | UnitGroup | Iterable): the
                units; a dict is made a ComputeUnitDescription.
            lazy (bool): True: return a UnitStream at once and pull on a thread of its own
                (a list too); its errors are raised by `stream.wait()`.
            window (int | None): how many units of this manager may be in flight (not
                final, or final with callbacks to run) while an iterable is pulled; None:
                20,000.  A list that is not lazy is not held back by it.
            name (str | None): a named stream (1-64 letters, digits, `_`, `.`, `-`): its
                position is kept in the store, so that a client attached to the session
                after this one died resumes it from the same iterable (the same items in
                the same order): items whose units the store has are skipped, none runs
                twice and none is left out (pmgr/core/stream_marks.py).

        Returns:
            Unit | list[Unit] | UnitStream: a Unit for one description; the units in order
                for a list or an iterable; a UnitStream with lazy=True.

        Raises:
            ValueError: a description that is not a ComputeUnitDescription or is incomplete,
                a `pilot`, `partition` or `tag` this manager does not know (naming its index),
                a `window` below 1, or a `name` that is not one.
            StoreUnavailable: the store could not hand out unit ids for 60 s (a full disk);
                no unit of the call was made.
            Exception: what a (not lazy) iterable raised, after the units it gave before.
        """
        if isinstance(descriptions, (ComputeUnitDescription, dict)):
            return self._submit_list([descriptions])[0]
        if isinstance(descriptions, (list, tuple)) and not lazy and name is None:
            return UnitList.of(self, self._submit_list(list(descriptions)))
        return self.stream(descriptions, self._submit_list, lazy, window, name)

    def make_units(self, descriptions: list) -> list[Unit]:
        """submit_units for the layers on top (rp.Executor, EnTK): a list of descriptions,
        submitted as submit_units submits them, and the Unit objects themselves back (the
        caller holds them: a UnitList would read units that ended meanwhile back from the
        store).

        Args:
            descriptions (list[ComputeUnitDescription | dict]): the units.

        Returns:
            list[Unit]: the units, in order.

        Raises:
            ValueError: as submit_units.
        """
        return self._submit_list(list(descriptions))

    def stream(self, descriptions, submit_list, lazy: bool, window: int | None, name=None):
        """(submit_units, submit_tasks) An iterable of descriptions, pulled in chunks that
        `submit_list` submits while the window has room: a UnitStream (lazy) or the list of
        its units (a UnitList) once all are submitted; `name`: a named stream, resumed where
        the session left it (pmgr/core/stream_marks.py)."""
        marks = None if name is None else StreamMarks(self.session, self.UID_PREFIX, name)
        if marks is not None and marks.resumed:
            log.info("submit_units: stream %r resumed (%d segment(s) marked)", name, marks.resumed)
        stream = UnitStream(self, descriptions, submit_list, window, marks)
        if lazy:
            return stream.start()
        stream.feed()
        if stream.error is not None:
            raise stream.error
        return stream.units()

    def _submit_list(self, descs: list, numbers: list[int] | None = None) -> list:
        """(submit_units) A list of descriptions, all checked before any unit is made;
        `numbers`: their units' uid numbers (a named stream's: reserved by it), else the
        session's next ones."""
        earlier: set = set()  # names and uids (a TaskDescription's) of the call's units so far
        checked: set = set()  # (ids of) the description objects checked: a repeat is the same
        for i, d in enumerate(descs):
            if id(d) in checked and not d.tag:  # ([desc] * n: one check)
                continue
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
                self.pinned_to_unknown(d.pilot)  # (it waits for that pilot: pmgr/core/routing.py)
            if d.tag is not None and d.tag not in self.units and d.tag not in earlier:
                raise ValueError(
                    f"submit_units: descriptions[{i}].tag={d.tag!r} must be the uid (or, "
                    "in the same call, the name) of an earlier unit of this manager"
                )
            earlier.update(x for x in (d.name, d.uid) if x)
            if d.partition is not None and self.find_partition(d.partition) is None:
                raise ValueError(
                    f"submit_units: descriptions[{i}].partition={d.partition!r} "
                    f"is not a partition of this manager's pilots "
                    f"{[p.uid for p in self.pilots]}"
                )
            checked.add(id(d))
        session = self.session
        if numbers is None:
            session.reserve_uids(self.UID_PREFIX, sum(d.uid is None for d in descs))
        given = None if numbers is None else iter(numbers)
        units: list[Unit] = []
        named: dict[str, Unit] = {}
        blueprints = Blueprints()  # (the call holds every description: ids are theirs)
        start = 0
        yields = not session.in_callback()  # (a callback holds up the channel: it never waits)
        while start < len(descs):  # in chunks: the first ones run while the rest are made
            size = min(SUBMIT_CHUNK_MAX, max(SUBMIT_CHUNK_MIN, start))
            chunk = descs[start : start + size]
            start += size
            with session.locked():
                self._submit_chunk(chunk, named, units, blueprints, given)
                sent = self.route()
            if sent is not None and start < len(descs) and yields:
                sent.wait(SEND_WAIT)  # (their partition is short of units: they go first)
        return units

    def pinned_to_unknown(self, pilot: str) -> None:
        """A unit is pinned to `pilot`, which this manager does not have: it waits (SCHEDULING,
        RP 1.x's TMGR_SCHEDULING) until add_pilots adds it; said once per pilot."""
        if pilot not in self.waiting_for:
            self.waiting_for.add(pilot)
            log.warning(
                "%s: units pinned to pilot %r, which is not added (yet): they wait for it",
                self.uid,
                pilot,
            )

    def _submit_chunk(
        self, descs: list, named: dict, units: list, blueprints=None, numbers=None
    ) -> None:
        """(lock held) Units for these (checked) descriptions, SCHEDULING (or FAILED if they
        can never fit), appended to `units`; `named`: the call's units by name so far;
        `numbers`: an iterator of their uid numbers, if they are given."""
        session = self.session
        now = time.time()
        verdicts: dict = {}  # (what _never_fits reads) -> its answer: the same for a chunk
        blueprints = Blueprints() if blueprints is None else blueprints
        if numbers is None:
            numbers = session.uid_numbers(self.UID_PREFIX, sum(d.uid is None for d in descs))
        prefix, table, make = self.UID_PREFIX, self.units, self.UNIT
        made = []
        for d in descs:
            if d.uid is None:
                n = next(numbers)
                uid, number = f"{prefix}.{n:06d}", (prefix, n)
            else:  # (a TaskDescription's own)
                uid, number = d.uid, None
            unit = make(session, uid, d, self, now, blueprints.of(d), number)
            table[uid] = unit
            if d.name:
                named[d.name] = unit
            if d.tag is not None:
                unit.after = table.get(d.tag) or named[d.tag]
            if d.pilot is not None:
                self.pinned += 1
            made.append(unit)
        units.extend(made)
        if made and made[0].TOGETHER:  # (NEW and SCHEDULING: one record each for the chunk)
            session.persist_together(S.NEW, made, now, 0, None, None)
            session.changed_together(made, S.NEW)
            advance_together(session, made, S.SCHEDULING, now)
        else:
            for unit in made:
                session.persist_state(unit, S.NEW, now)
                session.changed(unit, S.NEW)
                unit.advance(S.SCHEDULING, now, None)
        for unit in made:
            d = unit.description
            shape = unit.blueprint.shape
            reason = verdicts.get(shape, False)
            if reason is False:
                reason = verdicts[shape] = self._never_fits(unit)
            if reason:
                unit.advance(S.FAILED, now, reason)
            else:
                if d.partition is None and unit.after is None and self.pilots:
                    self._pilot_for(unit)  # round robin: bound in submit order
                self._queue(unit)

    def _queue(self, unit: Unit) -> None:
        """(lock held) `unit` waits at the client to be routed: behind every waiting unit of
        the same or a higher priority, ahead of those of a lower one (routing takes them
        oldest first, so a higher priority is sent first)."""
        pending, p = self.pending, unit.description.priority
        if p:
            self.ranked = True
        if not self.ranked:
            pending.append(unit)
            return
        i = len(pending)
        while i and pending[i - 1].description.priority < p:
            i -= 1
        pending.insert(i, unit)

    def cancel_units(self, uids=None, reason: str = "canceled by the user") -> None:
        """Cancel units (all of this manager's when uids is None); running ones are killed.

        Units still at the client end CANCELED at once; those sent to a pilot when it says
        so.  Final units are left as they are.

        Args:
            uids (str | list[str] | None): which units; None: all of this manager's.
            reason (str): the units' `reason` in their final state.

        Raises:
            ValueError: a uid this manager does not know.
        """
        with self.session.locked():
            targets = (
                self.units.active()
                if uids is None
                else [self._unit(u) for u in ([uids] if isinstance(uids, str) else uids)]
            )
            targets = [u for u in targets if not u.final]
            now = time.time()
            by_pilot: dict = {}
            for u in targets:
                if u.part is None:
                    self._unqueue(u)
                    u.advance(S.CANCELED, now, reason)
                else:
                    by_pilot.setdefault(u.pilot, []).append([u.uid, u.part])
            for pilot, pairs in by_pilot.items():
                pilot.command(
                    {"cid": None, "op": "cancel_units", "args": {"units": pairs, "reason": reason}}
                )

    def _unqueue(self, unit: Unit) -> None:
        """(lock held) `unit`, not sent anywhere, is canceled: it waits no more."""
        self.pending.remove(unit)

    def list_pilots(self) -> list[str]:
        """The uids of the pilots units are routed to, in the order they were added."""
        return [p.uid for p in self.pilots]

    def get_pilots(self) -> list:
        """The pilots units are routed to (Pilot handles), in the order they were added."""
        return list(self.pilots)

    def remove_pilots(self, pilots) -> None:
        """Stop routing units to these pilots (Pilot objects or uids); units already sent to
        them run there; units bound to them (round robin) go to the others.

        Args:
            pilots (Pilot | str | list[Pilot | str]): the pilots or their uids; one this
                manager does not use is passed over.
        """
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
