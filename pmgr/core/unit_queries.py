"""What a user asks a UnitManager about its units: wait_units, get_units, list_units.

`UnitQueries` is a part the UnitManager holds (pmgr/core/unit_manager.py; its public methods of
the same names delegate here), given the session, the manager's unit table, how to make a
released unit's handle again, the manager's name and how many of its streams still pull, in its
constructor.  Its units are in a UnitTable
(pmgr/core/unit_table.py): live ones as objects, released ones (final, stored, callbacks run)
as one byte each.  So:
  - wait_units() (all) waits for a count (no unit in flight, no stream pulling): each wake-up
    costs nothing per unit; it returns every unit's state once, in the order they were made
  - wait_units(uids) walks the uids once to find the live ones, then only those that have not
    arrived (a released unit is final: there already)
  - get_units() makes the released units again from the store, as they are asked for
  - a wait for units a pilot holds that another client took over raises PilotOwned: they end
    there, and this client hears of them no more (it waited for ever)
"""

from __future__ import annotations

from collections.abc import Callable

import pilot.states as S
from pilot.errors import PilotOwned
from pilot.pmgr.core.handles import Unit
from pilot.pmgr.core.unit_table import UnitTable


class UnitQueries:
    """A UnitManager's answers (their docs: the UnitManager's methods of the same names).

    Args:
        session (Session): the session the units belong to (pmgr/core/session.py).
        units (UnitTable): the manager's units (pmgr/core/unit_table.py).
        handle (callable): `handle(uid, stored description, created)`: a released unit's
            handle made again (its manager's UNIT, from its DESCRIPTION), the rest filled in
            here.
        name (callable): the manager's uid, as it is now (a face may name it again).
        feeding (callable): how many of the manager's lazy streams still pull
            (pmgr/core/unit_stream.py): a wait for all its units waits for them too.
    """

    def __init__(
        self,
        session,
        units: UnitTable,
        handle: Callable[[str, dict, float | None], Unit],
        name: Callable[[], str],
        feeding: Callable[[], int],
    ) -> None:
        self.session = session
        self.units = units
        self.handle = handle
        self.name = name
        self.feeding = feeding

    def wait_units(
        self, uids=None, state=None, timeout: float | None = None, progress: bool | None = None
    ) -> list[str]:
        """(UnitManager.wait_units) The units' states once final (or in `state`)."""
        from pilot.pmgr.core.progress import list_counter, table_counter, unit_progress

        wanted = S.waited(state, S.UNIT_MACHINE, "UnitManager.wait_units")
        session, table = self.session, self.units
        if uids is None and wanted == S.FINAL:
            with unit_progress(table_counter(self), progress):
                session.wait_for(
                    lambda: (table.open == 0 and not self.feeding()) or self._taken(None),
                    timeout,
                    lambda: (
                        f"{table.open} of {len(table)} units not there yet, e.g. "
                        f"{[u for u in table.active() if not u.final][:3]}"
                    ),
                )
            self._raise_taken(None)
            return self.states()
        with session.locked():
            uids = list(table) if uids is None else _uids(uids)
            # (each a live Unit, a released unit's state, or None: unknown; type() tells them
            # apart below, which the checker does not follow)
            items: list = [table.live.get(uid) or table.state_of(uid) for uid in uids]
        unknown = [uid for uid, item in zip(uids, items) if item is None]
        if unknown:
            raise ValueError(f"unit uid={unknown[0]!r} is unknown to {self.name()}")
        live = [u for u in items if type(u) is not str]
        settle = not session.changes.in_callback()  # a callback cannot wait for callbacks

        def there(u: Unit) -> bool:  # in a final state only once its callbacks have run
            return u.state in wanted and (u.settled or not settle or u.state not in S.FINAL)

        left = live  # shrinks as units arrive: each wake-up costs what changed, not len(units)

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

        with unit_progress(list_counter(live, wanted, len(items) - len(live)), progress):
            session.wait_for(
                lambda: arrived() or self._taken(left) is not None,
                timeout,
                lambda: f"{len(left)} of {len(items)} units not there yet, e.g. {left[:3]}",
            )
        self._raise_taken(left)
        return [u if type(u) is str else u.state for u in items]

    def _taken(self, units: list | None):
        """(lock held) A pilot that another client took over, holding some of `units` (None:
        any of this manager's not final): they end there, not here; else None."""
        taken = [p for p in self.session.pilots.values() if p.lost_to_us and not p.final]
        if not taken:
            return None
        ours = self.units.active() if units is None else units
        # (one in the store that no pilot had yet is the new owner's too once no pilot is
        # left to this client: pmgr/core/routing.py leaves it to them)
        none_left = all(p.final or p.lost_to_us for p in self.session.pilots.values())
        return next(
            (
                p
                for p in taken
                for u in ours
                if not u.final and (u.pilot is p or (none_left and u.pilot is None and u.stored))
            ),
            None,
        )

    def _raise_taken(self, units: list | None) -> None:
        """PilotOwned when a wait ended because units it waited for are another client's
        now (their pilot was taken over): they end there, this client waits for them no more."""
        with self.session.locked():
            pilot = self._taken(units)
        if pilot is not None:
            raise PilotOwned(
                pilot.uid, f"{pilot.released}: its units end there, not in this client"
            )

    def states(self) -> list[str]:
        """(UnitManager.states) Every unit's state, in the order they were made."""
        with self.session.locked():
            return self.units.states()

    # RADICAL-Pilot's listing names
    def list_units(self) -> list[str]:
        """(UnitManager.list_units) The uids, in the order the units were made."""
        with self.session.locked():
            return list(self.units)

    def get_units(self, uids=None) -> list[Unit]:
        """(UnitManager.get_units) The units, in the order asked."""
        with self.session.locked():
            if uids is None:
                return list(self.units.values())
            return [self.unit(u) for u in _uids(uids)]

    def unit(self, uid) -> Unit:
        """This manager's unit `uid` (or a Unit's uid), read back if released."""
        if isinstance(uid, Unit):
            uid = uid.uid
        unit = self.units.get(uid)
        if unit is None:
            raise ValueError(f"unit uid={uid!r} is unknown to {self.name()}")
        return unit

    def unit_from_doc(self, doc: dict) -> Unit:
        """A released unit made again from its stored doc (UnitTable.get)."""
        session = self.session
        times = doc.get("times")  # (a final unit's history, in its doc)
        if times is None:
            times = [(h["state"], h["ts"]) for h in session.read_store().history(uid=doc["uid"])]
        created = times[0][1] if times else None
        unit = self.handle(doc["uid"], doc["description"] or {}, created)
        unit.history = [(state, ts) for state, ts in times] or unit.history
        unit.state = doc["state"]
        unit.reason = doc.get("reason")
        unit.stored = True
        unit.part, unit.exit_code = doc.get("partition"), doc.get("exit_code")
        unit.value = doc.get("return_value")
        unit.exception = doc.get("exception")
        unit.kept = dict(doc.get("kept") or {})
        unit.node, unit.slots = doc.get("node"), doc.get("slots")
        unit.pilot = session.pilots.get(doc.get("pilot"))
        return unit


def _uids(uids) -> list[str]:
    if isinstance(uids, (str, Unit)):
        uids = [uids]
    return [u.uid if isinstance(u, Unit) else u for u in uids]
