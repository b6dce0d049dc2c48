"""State models: legal paths, illegal moves raise, final states are final."""

import pytest

import pilot as rp
from pilot import states as S


class Obj:
    def __init__(self):
        self.state = S.NEW
        self.uid = "obj.0"


@pytest.mark.parametrize(
    "machine,path",
    [
        (S.PILOT_MACHINE, [S.LAUNCHING, S.PENDING, S.ACTIVE, S.DONE]),
        (S.PARTITION_MACHINE, [S.PENDING, S.STARTING, S.ACTIVE, S.DONE]),
        (S.UNIT_MACHINE, [S.SCHEDULING, S.QUEUED, S.EXECUTING, S.DONE]),
    ],
)
def test_main_path_and_finality(machine, path):
    o = Obj()
    for state in path:
        S.check_transition(machine, o, state)
        assert o.state == state
    for state in machine.states:
        with pytest.raises(rp.IllegalTransition, match="illegal transition DONE"):
            S.check_transition(machine, o, state)


@pytest.mark.parametrize("final", [S.FAILED, S.CANCELED])
def test_any_live_state_can_fail_or_cancel(final):
    for machine in (S.PILOT_MACHINE, S.PARTITION_MACHINE, S.UNIT_MACHINE):
        live = [s for s in machine.states if s not in S.FINAL]
        for src in live:
            o = Obj()
            o.state = src
            S.check_transition(machine, o, final)
            assert o.state == final


def test_backward_and_skipping_moves_raise():
    o = Obj()
    with pytest.raises(rp.IllegalTransition, match="NEW -> ACTIVE"):
        S.check_transition(S.PARTITION_MACHINE, o, S.ACTIVE)
    S.check_transition(S.PARTITION_MACHINE, o, S.PENDING)
    with pytest.raises(rp.IllegalTransition, match="PENDING -> NEW"):
        S.check_transition(S.PARTITION_MACHINE, o, S.NEW)
    with pytest.raises(rp.IllegalTransition):
        S.check_transition(S.PARTITION_MACHINE, o, "NO_SUCH_STATE")


def test_requeue_and_restart_are_the_only_backward_moves():
    o = Obj()
    for s in (S.SCHEDULING, S.QUEUED, S.SCHEDULING, S.QUEUED, S.EXECUTING, S.SCHEDULING):
        S.check_transition(S.UNIT_MACHINE, o, s)  # routed again; restarted
    for s in (S.QUEUED, S.EXECUTING):
        S.check_transition(S.UNIT_MACHINE, o, s)
    with pytest.raises(rp.IllegalTransition):
        S.check_transition(S.UNIT_MACHINE, o, S.QUEUED)
    S.check_transition(S.UNIT_MACHINE, o, S.DONE)
    with pytest.raises(rp.IllegalTransition):
        S.check_transition(S.UNIT_MACHINE, o, S.SCHEDULING)


def test_path_fills_skipped_states():
    assert S.path_to(S.PARTITION_MACHINE, S.PENDING, S.ACTIVE) == [S.STARTING, S.ACTIVE]
    assert S.path_to(S.UNIT_MACHINE, S.QUEUED, S.DONE) == [S.EXECUTING, S.DONE]
    assert S.path_to(S.UNIT_MACHINE, S.QUEUED, S.FAILED) == [S.FAILED]


def test_client_refuses_updates_its_machine_does_not_allow_and_says_so(session, caplog):
    """A unit update the state machine refuses changes nothing: one the unit has passed
    already (a sync repeats history) is counted, any other is logged with both states."""
    import logging
    import time

    import pilot as rp

    umgr = rp.UnitManager(session)  # no pilot: the unit stays SCHEDULING at the client
    unit = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    with session.locked():
        umgr.events.on_unit_state(unit.uid, rp.QUEUED, time.time(), {})
        assert unit.state == rp.SCHEDULING  # not sent anywhere: an update for it is stale
    assert umgr.said_again == 1

    class Sent:  # as if it had been sent to a partition of a pilot
        uid = "pilot.0000"
        parts: dict = {}

    unit.part, unit.pilot = "pilot.0000.part.0000", Sent()
    with caplog.at_level(logging.WARNING, logger="pmgr.units"), session.locked():
        umgr.events.on_unit_state(unit.uid, rp.EXECUTING, time.time(), {})  # QUEUED filled in
        umgr.events.on_unit_state(unit.uid, rp.QUEUED, time.time(), {})  # said again
        assert unit.state == rp.EXECUTING
        umgr.events.on_unit_state(unit.uid, rp.FAILED, time.time(), {"reason": "boom"})
        umgr.events.on_unit_state(unit.uid, rp.DONE, time.time(), {"exit_code": 0})
        assert unit.state == rp.FAILED and unit.exit_code is None and unit.reason == "boom"
    assert umgr.said_again == 2
    refused = [r.getMessage() for r in caplog.records]
    assert refused == [
        f"{unit.uid}: update FAILED -> DONE refused by the unit state machine (exit code 0)"
    ]
    states = [s for s, _ in unit.history]
    assert states == [rp.NEW, rp.SCHEDULING, rp.QUEUED, rp.EXECUTING, rp.FAILED]
