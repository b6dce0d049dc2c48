"""The seam a face plugs into a core UnitManager (pmgr/core/unit_hooks.py; RP 1.x's TaskManager
is made on it): the hooks see each state change before the user's callbacks, may hold units back
and hand them in later (`enqueue`, then `route`), let go of a held unit that is canceled, and hear
of a pilot that ended."""

import time

import pilot as rp
from pilot.pmgr.core import UnitHooks, UnitManager
from tests.conftest import local_pilot

CUD = rp.ComputeUnitDescription


class Gate:
    """Hooks that hold the units named `later*` until `open()`."""

    def __init__(self) -> None:
        self.umgr: UnitManager | None = None
        self.held: list = []
        self.seen: list[tuple[str, str, str]] = []  # (who, uid, state), hooks' and user's
        self.ended: list[str] = []

    def on_change(self, unit, state: str) -> None:
        self.seen.append(("hooks", unit.uid, state))

    def hold(self, unit) -> bool:
        if (unit.description.name or "").startswith("later"):
            self.held.append(unit)
            return True
        return False

    def release(self, unit) -> bool:
        if unit in self.held:
            self.held.remove(unit)
            return True
        return False

    def on_pilot_changed(self, pilot) -> None:
        self.ended.append(pilot.uid)

    def open(self) -> None:
        with self.umgr.session.locked():
            for unit in self.held:
                self.umgr.enqueue(unit)
            self.held.clear()
            self.umgr.routing.route()


def test_hooks_hold_units_see_changes_first_and_hear_of_ended_pilots(session):
    gate = Gate()
    hooks: UnitHooks = gate
    umgr = gate.umgr = UnitManager(session, hooks=hooks)
    umgr.register_callback(lambda unit, state: gate.seen.append(("user", unit.uid, state)))
    pilot = local_pilot(session, parts=((1,),))
    umgr.add_pilots(pilot)
    now, later, dropped = umgr.submit_units(
        [
            CUD(executable="/bin/true", name="now"),
            CUD(executable="/bin/true", name="later"),
            CUD(executable="/bin/true", name="later-dropped"),
        ]
    )
    assert now.wait(timeout=30) == rp.DONE
    time.sleep(0.3)
    assert later.state == dropped.state == rp.SCHEDULING and gate.held == [later, dropped]
    umgr.cancel_units([dropped.uid])  # held by the hooks: they let go of it
    assert dropped.state == rp.CANCELED and gate.held == [later]
    gate.open()
    assert later.wait(timeout=30) == rp.DONE
    assert umgr.wait_units(timeout=30) == [rp.DONE, rp.DONE, rp.CANCELED]
    for unit in (now, later, dropped):  # the hooks first, then the user's callbacks
        states = [s for _, u, s in gate.seen if u == unit.uid]
        assert [w for w, u, _ in gate.seen if u == unit.uid] == ["hooks", "user"] * (
            len(states) // 2
        )
        assert states[-1] == unit.state
    assert gate.ended == []
    pilot.cancel()
    assert pilot.wait(timeout=30) == rp.CANCELED
    deadline = time.monotonic() + 10
    while not gate.ended and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pilot.uid in gate.ended
