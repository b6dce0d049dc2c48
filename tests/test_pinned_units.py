"""Units pinned to a pilot (`pilot=`) their manager does not have: they wait for add_pilots
(RP 1.x's TMGR_SCHEDULING) only while that can still happen, else they fail naming why."""

import time

import pilot as rp
from tests.conftest import active_pilot, local_pilot

CUD = rp.ComputeUnitDescription


def test_pinned_to_another_managers_pilot_fails_naming_it(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    other = rp.UnitManager(session)
    u = other.submit_units(CUD(executable="/bin/true", pilot=pilot.uid))
    assert u.wait(timeout=10) == rp.FAILED
    assert f"pilot={pilot.uid!r} is used by {umgr.uid}" in u.reason


def test_waiting_units_fail_once_another_manager_takes_their_pilot(session):
    pilot = local_pilot(session, parts=((1,),))
    waiting = rp.UnitManager(session)
    u = waiting.submit_units(CUD(executable="/bin/true", pilot=pilot.uid))
    time.sleep(0.3)
    assert u.state == rp.SCHEDULING  # (it waits for add_pilots)
    taker = rp.UnitManager(session)
    taker.add_pilots(pilot)
    assert u.wait(timeout=10) == rp.FAILED
    assert f"is used by {taker.uid}" in u.reason


def test_waiting_units_fail_when_their_pilot_ends_unadded(session):
    pilot = local_pilot(session, parts=((1,),))
    umgr = rp.UnitManager(session)  # (no pilots at all)
    u = umgr.submit_units(CUD(executable="/bin/true", pilot=pilot.uid))
    time.sleep(0.3)
    assert u.state == rp.SCHEDULING
    pilot.cancel()
    assert pilot.wait(timeout=20) == rp.CANCELED
    assert u.wait(timeout=10) == rp.FAILED
    assert f"pilot={pilot.uid!r} is CANCELED and was not added to {umgr.uid}" in u.reason
    late = umgr.submit_units(CUD(executable="/bin/true", pilot=pilot.uid))  # (at submit)
    assert late.state == rp.FAILED and "is CANCELED" in late.reason


def test_a_removed_pilots_units_are_not_said_never_added(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    spare = local_pilot(session, parts=((1,),))
    umgr.add_pilots(spare)
    umgr.remove_pilots(pilot.uid)
    u = umgr.submit_units(CUD(executable="/bin/true", pilot=pilot.uid))
    time.sleep(0.3)
    assert u.state == rp.SCHEDULING  # (it waits for the pilot to be added back)
    spare.cancel()
    assert spare.wait(timeout=20) == rp.CANCELED
    assert u.wait(timeout=10) == rp.FAILED
    assert "removed, or never added" in u.reason, u.reason
