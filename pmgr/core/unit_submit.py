"""Submission: a UnitManager's descriptions checked, its units made, and queued to be routed.

`Submission` is a part the UnitManager holds (pmgr/core/unit_manager.py: submit_units,
make_units, and a stream's chunks come here), given the session, the manager's unit table, its
Routing (pmgr/core/routing.py: made units wait in its queue), how to make a unit handle (the
manager's `UNIT`), its hooks' `hold` (pmgr/core/unit_hooks.py) and its name in its constructor.

    submit_list(descs)   all checked before any unit is made (an error names the index); then
                         in chunks that double from SUBMIT_CHUNK_MIN to SUBMIT_CHUNK_MAX, each
                         made (NEW, SCHEDULING; FAILED if it can never fit), queued and routed
                         under the session lock
    enqueue(unit)        (lock held) a unit waits at the client, kept in priority order
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pilot.states as S
from pilot.descriptions import ComputeUnitDescription
from pilot.pmgr.core.blueprint import Blueprints
from pilot.pmgr.core.handles import Unit, advance_together
from pilot.pmgr.core.routing import Routing
from pilot.pmgr.core.unit_table import UnitTable

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


class Submission:
    """A UnitManager's submission of units.

    Args:
        session (Session): the session the units belong to (pmgr/core/session.py).
        units (UnitTable): the manager's units (pmgr/core/unit_table.py).
        routing (Routing): the manager's routing (pmgr/core/routing.py).
        make (callable): `make(session, uid, description, created, blueprint, number)`: a
            new unit's handle (the manager's UNIT, with the manager as its `umgr`).
        prefix (str): generated uids' prefix (the manager's UID_PREFIX: unit, task).
        hold (callable | None): the hooks' `hold(unit)` (pmgr/core/unit_hooks.py): True if
            the face holds the unit instead of its waiting in the queue; None: none does.
        name (callable): the manager's uid, as it is now (a face may name it again).
    """

    def __init__(
        self,
        session,
        units: UnitTable,
        routing: Routing,
        make: Callable[..., Unit],
        prefix: str,
        hold: Callable[[Unit], bool] | None,
        name: Callable[[], str],
    ) -> None:
        self.session = session
        self.units = units
        self.pilots = routing.pilots
        self.pending = routing.pending
        self.waiting_for = routing.waiting_for
        self.name = name
        self.routing = routing
        self.make = make
        self.prefix = prefix
        self.hold = hold
        self.ranked = False  # a unit with a priority was submitted: pending is kept in order

    def submit_list(self, descs: list, numbers: list[int] | None = None) -> list:
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
            if d.partition is not None and self.routing.find_partition(d.partition) is None:
                raise ValueError(
                    f"submit_units: descriptions[{i}].partition={d.partition!r} "
                    f"is not a partition of this manager's pilots "
                    f"{[p.uid for p in self.pilots]}"
                )
            checked.add(id(d))
        session = self.session
        if numbers is None:
            session.ids.reserve_uids(self.prefix, sum(d.uid is None for d in descs))
        given = None if numbers is None else iter(numbers)
        units: list[Unit] = []
        named: dict[str, Unit] = {}
        blueprints = Blueprints()  # (the call holds every description: ids are theirs)
        start = 0
        # (a callback holds up the channel: it never waits)
        yields = not session.changes.in_callback()
        while start < len(descs):  # in chunks: the first ones run while the rest are made
            size = min(SUBMIT_CHUNK_MAX, max(SUBMIT_CHUNK_MIN, start))
            chunk = descs[start : start + size]
            start += size
            with session.locked():
                self._chunk(chunk, named, units, blueprints, given)
                sent = self.routing.route()
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
                self.name(),
                pilot,
            )

    def _chunk(self, descs: list, named: dict, units: list, blueprints=None, numbers=None) -> None:
        """(lock held) Units for these (checked) descriptions, SCHEDULING (or FAILED if they
        can never fit), appended to `units`; `named`: the call's units by name so far;
        `numbers`: an iterator of their uid numbers, if they are given."""
        session = self.session
        now = time.time()
        verdicts: dict = {}  # (what never_fits reads) -> its answer: the same for a chunk
        blueprints = Blueprints() if blueprints is None else blueprints
        if numbers is None:
            numbers = session.ids.uid_numbers(self.prefix, sum(d.uid is None for d in descs))
        prefix, table, make = self.prefix, self.units, self.make
        made = []
        for d in descs:
            if d.uid is None:
                n = next(numbers)
                uid, number = f"{prefix}.{n:06d}", (prefix, n)
            else:  # (a TaskDescription's own)
                uid, number = d.uid, None
            unit = make(session, uid, d, now, blueprints.of(d), number)
            table[uid] = unit
            if d.name:
                named[d.name] = unit
            if d.tag is not None:
                unit.after = table.get(d.tag) or named[d.tag]
            if d.pilot is not None:
                self.routing.pinned += 1
            made.append(unit)
        units.extend(made)
        if made and made[0].TOGETHER:  # (NEW and SCHEDULING: one record each for the chunk)
            session.changes.record_together(S.NEW, made, now, 0, None, None)
            advance_together(session, made, S.SCHEDULING, now)
        else:
            for unit in made:
                session.changes.record(unit, S.NEW, now)
                unit.advance(S.SCHEDULING, now, None)
        for unit in made:
            d = unit.description
            shape = unit.blueprint.shape
            reason = verdicts.get(shape, False)
            if reason is False:
                reason = verdicts[shape] = self.routing.never_fits(unit)
            if reason:
                unit.advance(S.FAILED, now, reason)
            else:
                if d.partition is None and unit.after is None and self.pilots:
                    self.routing.bind(unit)  # round robin: bound in submit order
                if self.hold is None or not self.hold(unit):
                    self.enqueue(unit)

    def enqueue(self, unit: Unit) -> None:
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
