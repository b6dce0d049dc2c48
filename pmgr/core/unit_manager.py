"""UnitManager: submits units, routes them to partitions, follows them to a final state.

The user's side is here: submit_units, cancel_units, wait_units, callbacks, the pilots to route
to.  The manager is made of parts it holds, each given in its constructor what it uses (the
session, the unit table, the routing whose queue it fills, the manager's name as a callable: a
face names its manager again), and its public methods delegate to them:
    _submission  Submission (pmgr/core/unit_submit.py): descriptions checked, units made (its
                 `UNIT`) and queued, in chunks
    routing      Routing (pmgr/core/routing.py): where waiting units go, and their sending;
                 it owns the pilots they go to and the units waiting at the client
    events       UnitEvents (pmgr/core/unit_events.py): what the pilots say about units (state
                 updates, units handed back, partitions lost), with the guarantee that every
                 unit ends in exactly one final state
    _queries     UnitQueries (pmgr/core/unit_queries.py): wait_units, get_units, list_units
    units        UnitTable (pmgr/core/unit_table.py): live units as objects, released as a byte
A Pilot talks to the two parts it needs, on the channel thread: its news to `events`, then
`routing.route()` (where units can go changed).  A face changes what the manager does with its
units only through `hooks` (pmgr/core/unit_hooks.py) and the public class attributes UNIT,
DESCRIPTION, UID_PREFIX.
"""

from __future__ import annotations

import logging
import time

import pilot.states as S
from pilot.descriptions import ComputeUnitDescription
from pilot.pmgr.core.handles import CANCEL_KEY, UNIT_STATE, Unit, callback
from pilot.pmgr.core.routing import Routing
from pilot.pmgr.core.stream_marks import StreamMarks
from pilot.pmgr.core.unit_events import UnitEvents
from pilot.pmgr.core.unit_hooks import UnitHooks
from pilot.pmgr.core.unit_list import UnitList
from pilot.pmgr.core.unit_queries import UnitQueries
from pilot.pmgr.core.unit_stream import UnitStream
from pilot.pmgr.core.unit_submit import Submission
from pilot.pmgr.core.unit_table import UnitTable
from pilot.rp.names import SCHEDULER_DEFAULT, SCHEDULERS

log = logging.getLogger("pmgr.units")


class UnitManager:
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
        hooks (UnitHooks | None): what a face (RP 1.x's TaskManager) does on its units
            (pmgr/core/unit_hooks.py); None: nothing.

    Raises:
        ValueError: an unknown `scheduler`, naming the accepted ones.
    """

    UNIT = (
        Unit  # the handle made for each unit (pmgr/compat/rp1/tasks.py's TaskManager makes Tasks)
    )
    DESCRIPTION = ComputeUnitDescription  # what its units' stored descriptions are
    UID_PREFIX = "unit"  # generated uids: unit.000000, ...

    def __init__(
        self, session, scheduler: str | None = None, hooks: UnitHooks | None = None
    ) -> None:
        # (the arguments: the class docstring)
        scheduler = scheduler or SCHEDULER_DEFAULT
        if scheduler not in SCHEDULERS:
            raise ValueError(
                f"UnitManager: scheduler={scheduler!r} is not known; accepted: {list(SCHEDULERS)}"
            )
        self.scheduler = scheduler
        self.session = session
        self.hooks = hooks
        self._uid = session.ids.next_uid("umgr")
        self._feeding = 0  # lazy streams still pulling (pmgr/core/unit_stream.py)
        self.units = UnitTable(self)  # live units as objects, released ones as a byte each
        name = self._name
        # the parts its pilots talk to (Pilot.umgr): routing, and their news about units
        self.routing = Routing(session, self.units, name, scheduler)
        self.pilots = self.routing.pilots
        self.pending = self.routing.pending
        self.waiting_for = self.routing.waiting_for  # pilots units are pinned to, not added yet
        self.events = UnitEvents(session, self.units, self.routing, hooks)
        self._queries = UnitQueries(session, self.units, self._handle, name, lambda: self._feeding)
        self._submission = Submission(
            session,
            self.units,
            self.routing,
            self._make,
            self.UID_PREFIX,
            hooks.hold if hooks else None,
            name,
        )
        self.callbacks: list = [] if hooks is None else [hooks.on_change]
        self.registered_cbs: list[tuple] = []  # (cb as given, as called): unregister_callback
        session.umgrs.append(self)
        if session.recovery is not None:  # an attached session: its units come back here
            session.recovery.adopt_units(self)

    @property
    def uid(self) -> str:
        """This manager's uid (umgr.NNNN; a face may set its own)."""
        return self._uid

    @uid.setter
    def uid(self, uid: str) -> None:
        self._uid = uid

    def _name(self) -> str:  # (what the parts say the manager is called, now)
        return self._uid

    @property
    def feeding(self) -> int:
        """How many lazy streams of this manager are still pulling (pmgr/core/unit_stream.py)."""
        return self._feeding

    @feeding.setter
    def feeding(self, n: int) -> None:
        self._feeding = n

    @property
    def said_again(self) -> int:
        """Updates refused because the unit had passed them (sync replays)."""
        return self.events.said_again

    def _make(self, session, uid: str, desc, created, blueprint, number) -> Unit:
        """(Submission) A new unit's handle: this manager's UNIT."""
        return self.UNIT(session, uid, desc, self, created, blueprint, number)

    def _handle(self, uid: str, stored: dict, created: float | None) -> Unit:
        """(UnitQueries) A released unit's handle made again from its stored description."""
        return self.UNIT(self.session, uid, self.DESCRIPTION.from_stored(stored), self, created)

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
        with self.session.locked():
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
        with self.session.locked():
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
        self.events.output_callbacks.append(cb)

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
            self.routing.route()

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
            PilotOwned: another client owns the session now (this one was deposed).
            Exception: what a (not lazy) iterable raised, after the units it gave before.
        """
        self.session.check_owner()
        if isinstance(descriptions, (ComputeUnitDescription, dict)):
            return self._submission.submit_list([descriptions])[0]
        if isinstance(descriptions, (list, tuple)) and not lazy and name is None:
            return UnitList.of(self, self._submission.submit_list(list(descriptions)))
        return self.stream(descriptions, self._submission.submit_list, lazy, window, name)

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
        return self._submission.submit_list(list(descriptions))

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

    def wait_units(
        self, uids=None, state=None, timeout: float | None = None, progress: bool | None = None
    ) -> list[str]:
        """Block until the units (all when uids is None, streams still pulling included) are
        final (or in `state`); a unit's final-state callbacks have all run when it counts as
        final here.  Returns their states, in order.  progress=True (or PILOT_PROGRESS=1 when
        progress is None) draws a bar on stderr meanwhile: units there of all, DONE / FAILED /
        CANCELED, the rate (pmgr/core/progress.py; only on a terminal).

        Waiting for all is a count (no walk over the units per wake-up); released units are
        final already and are not read back from the store.

        Args:
            uids (str | Unit | list[str | Unit] | None): which units; None: all of this
                manager's, and those of its streams still pulling.
            state (str | list[str] | None): the state(s) to wait for (a final state ends the
                wait too); None: a final one.
            timeout (float | None): seconds; None waits as long as it takes.
            progress (bool | None): draw a progress bar on stderr (a terminal only); None:
                when $PILOT_PROGRESS is 1.

        Returns:
            list[str]: each unit's state when the wait ended, in the order of `uids` (all: the
                order the units were made).

        Raises:
            ValueError: a uid this manager does not know.
            TimeoutError: `timeout` passed, naming units not there yet.
            RuntimeError: called in a state callback (the thread that delivers states).
        """
        return self._queries.wait_units(uids, state, timeout, progress)

    def states(self) -> list[str]:
        """Every unit's state, in the order they were made (released ones without their
        objects).

        Returns:
            list[str]: the states.
        """
        return self._queries.states()

    # RADICAL-Pilot's listing names
    def list_units(self) -> list[str]:
        """The uids of this manager's units, in the order they were made (none is read back
        from the store).

        Returns:
            list[str]: the uids.
        """
        return self._queries.list_units()

    def get_units(self, uids=None) -> list[Unit]:
        """The units (all when uids is None), in order: a released unit is made again from
        the store (its final state, outcome and history).

        Args:
            uids (str | Unit | list[str | Unit] | None): which units; None: all.

        Returns:
            list[Unit]: the units, in the order asked (all: the order they were made).

        Raises:
            ValueError: a uid this manager does not know.
        """
        return self._queries.get_units(uids)

    def unit_from_doc(self, doc: dict) -> Unit:
        """A released unit made again from its stored doc (UnitTable.get)."""
        return self._queries.unit_from_doc(doc)

    def pinned_to_unknown(self, pilot: str) -> None:
        """A unit is pinned to `pilot`, which this manager does not have: it waits (SCHEDULING,
        RP 1.x's TMGR_SCHEDULING) until add_pilots adds it; said once per pilot."""
        self._submission.pinned_to_unknown(pilot)

    def enqueue(self, unit: Unit) -> None:
        """(lock held) `unit` waits at the client to be routed, by its priority (a face hands
        back a unit its hooks held this way: pmgr/core/unit_hooks.py; then `route()`)."""
        self._submission.enqueue(unit)

    def find_partition(self, uid: str):
        """The partition `uid` of this manager's pilots, or None."""
        return self.routing.find_partition(uid)

    def waiting(self) -> int:
        """How many units wait at the client for room in a partition."""
        return len(self.routing.pending)

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
        if not isinstance(reason, str):
            raise ValueError(f"UnitManager.cancel_units: reason={reason!r:.80} must be a text")
        if uids is not None:
            if isinstance(uids, (str, Unit)):
                uids = [uids]
            try:  # (once: a generator or a dict's keys too)
                uids = list(uids)
            except TypeError:
                uids = [uids]
            bad = [u for u in uids if not isinstance(u, (str, Unit))]
            if bad:
                raise ValueError(
                    f"UnitManager.cancel_units: uids: {bad[0]!r:.80} is not a unit or its uid "
                    "(uids: a unit, a uid, a list of them, or None: all of this manager's)"
                )
        with self.session.locked():
            targets = self.units.active() if uids is None else [self._queries.unit(u) for u in uids]
            targets = [u for u in targets if not u.final]
            now = time.time()
            by_pilot: dict = {}
            for u in targets:
                if u.part is None:
                    self._unqueue(u)
                    u.advance(S.CANCELED, now, reason)
                else:  # (asked of its partition; should it come back unrun: CANCELED)
                    u.cancel_asked = u.kept[CANCEL_KEY] = reason  # (kept with its doc: a
                    self.session.writer.changed(u)  # client that attaches asks it again)
                    by_pilot.setdefault(u.pilot, []).append([u.uid, u.part])
            for pilot, pairs in by_pilot.items():
                pilot.command(
                    {"cid": None, "op": "cancel_units", "args": {"units": pairs, "reason": reason}}
                )

    def _unqueue(self, unit: Unit) -> None:
        """(lock held) `unit`, not sent anywhere, is canceled: it waits no more."""
        if self.hooks is None or not self.hooks.release(unit):
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
            self.routing.route()
