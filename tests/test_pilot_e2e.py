"""End to end on localhost: real bootstrap, agents, unit processes, ZeroMQ and sqlite."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest

import pilot as rp
from tests.conftest import active_pilot, local_pilot, unmoved

CUD = rp.ComputeUnitDescription


def test_two_partitions_run_units_and_persist_everything(session):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    assert [p.state for p in pilot.partitions] == [rp.ACTIVE, rp.ACTIVE]
    assert pilot.size["cores"] == 2
    assert [p.cores for p in pilot.partitions] == [1, 1]
    units = umgr.submit_units(
        [
            CUD(executable="/bin/sh", arguments=["-c", "echo out $PILOT_UNIT_ID; echo err >&2"])
            for _ in range(40)
        ]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 40
    by_part = Counter(u.part for u in units)
    assert set(by_part) == {p.uid for p in pilot.partitions}  # both partitions used
    for u in units:
        assert u.stdout == f"out {u.uid}\n" and u.stderr == "err\n"
        assert u.exit_code == 0 and u.reason is None
        assert unmoved([s for s, _ in u.history]) == [
            "NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE"
        ]  # fmt: skip
        stamps = [t for _, t in u.history]
        assert stamps == sorted(stamps)
    session.writer.flush()
    rows = session.store.find("units", session=session.uid)
    assert len(rows) == 40 and {r["state"] for r in rows} == {"DONE"}
    assert {r["partition"] for r in rows} == {p.uid for p in pilot.partitions}
    hist = session.store.history(uid=units[0].uid)
    assert unmoved([h["state"] for h in hist]) == [
        "NEW",
        "SCHEDULING",
        "QUEUED",
        "EXECUTING",
        "DONE",
    ]
    parts = session.store.find("partitions", pilot=pilot.uid)
    assert [p["state"] for p in parts] == ["ACTIVE", "ACTIVE"]
    assert session.store.get("pilots", pilot.uid)["state"] == "ACTIVE"


def test_single_object_in_single_object_out(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    assert isinstance(pilot, rp.Pilot)
    unit = umgr.submit_units(CUD(executable="true"))
    assert isinstance(unit, rp.Unit)
    assert unit.wait(timeout=30) == rp.DONE


def test_unit_environment_and_cpu_binding(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    script = (
        'import os; print(os.environ["PILOT_CPU_IDS"], os.environ["PILOT_PARTITION_ID"],'
        ' os.environ["GREETING"], sorted(os.sched_getaffinity(0)), os.getcwd())'
    )
    import sys

    u = umgr.submit_units(
        CUD(
            executable=sys.executable,
            arguments=["-c", script],
            cores=1,
            environment={"GREETING": "hello"},
        )
    )
    assert u.wait(timeout=30) == rp.DONE, u.reason
    cpu_ids, part, greeting, mask, cwd = u.stdout.split(" ", 4)
    assert part == pilot.partitions[0].uid and greeting == "hello"
    logical = int(cpu_ids)
    real = sorted(os.sched_getaffinity(0))
    assert mask.strip() == f"[{real[logical % len(real)]}]"  # bound to exactly its core
    assert cwd.strip() == u.sandbox
    assert u.slots == {"cpus": [logical]}  # only the types it holds


def test_failures_carry_reasons(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    bad_exit = umgr.submit_units(CUD(executable="/bin/sh", arguments=["-c", "exit 3"]))
    missing = umgr.submit_units(CUD(executable="no-such-program-here"))
    too_big = umgr.submit_units(CUD(executable="/bin/true", cores=64))
    umgr.wait_units(timeout=30)
    assert bad_exit.state == rp.FAILED and bad_exit.exit_code == 3
    assert bad_exit.reason == "exit code 3"
    assert missing.state == rp.FAILED and "no-such-program-here" in missing.reason
    assert missing.exit_code == 127 and "not found" in missing.stderr  # the shell says so
    assert too_big.state == rp.FAILED and "cores=64" in too_big.reason
    assert "can never fit" in too_big.reason
    # in one call: each shape is judged on its own (submit judges a shape once per chunk)
    mixed = umgr.submit_units(
        [CUD(executable="/bin/true", cores=c, ranks=r) for c, r in ((1, 1), (9, 1), (1, 9), (1, 1))]
    )
    assert umgr.wait_units([u.uid for u in mixed], timeout=30) == [
        rp.DONE,
        rp.FAILED,
        rp.FAILED,
        rp.DONE,
    ]
    assert "cores=9" in mixed[1].reason and "ranks=9" in mixed[2].reason
    assert [s for s, _ in too_big.history] == ["NEW", "SCHEDULING", "FAILED"]


def test_explicit_partition_routing(session):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    second = pilot.partitions[1].uid
    units = umgr.submit_units([CUD(executable="/bin/true", partition=second) for _ in range(10)])
    umgr.wait_units(timeout=30)
    assert {u.part for u in units} == {second}
    with pytest.raises(ValueError, match=r"partition='nope' is not a partition of this manager"):
        umgr.submit_units(CUD(executable="/bin/true", partition="nope"))


def test_callbacks_drive_a_pipeline_without_polling(session):
    """An EnTK-style upper layer: each stage's units are submitted from the callback that sees
    the previous stage finish."""
    pilot, umgr = active_pilot(session, parts=((2,),))
    stages = 3
    per_stage = 4
    done_in_stage = Counter()
    seen_states = []
    finished = threading.Event()

    def on_unit(unit, state):
        seen_states.append((unit.uid, state))
        if state != rp.DONE:
            return
        stage = int(unit.description.name)
        done_in_stage[stage] += 1
        if done_in_stage[stage] == per_stage:
            if stage + 1 < stages:
                umgr.submit_units(
                    [CUD(executable="/bin/true", name=str(stage + 1)) for _ in range(per_stage)]
                )
            else:
                finished.set()

    umgr.register_callback(on_unit)
    umgr.submit_units([CUD(executable="/bin/true", name="0") for _ in range(per_stage)])
    assert finished.wait(30)
    assert dict(done_in_stage) == {0: per_stage, 1: per_stage, 2: per_stage}
    first = [s for uid, s in seen_states if uid == "unit.000000"]
    assert first == ["NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE"]  # NEW too, as RP


def test_manager_callbacks_see_their_own_objects_after_add_pilots(session):
    """A pilot's state changes go to its PilotManager's callbacks, also once a UnitManager uses
    the pilot; the UnitManager's callbacks see its units only."""
    pmgr, umgr = rp.PilotManager(session), rp.UnitManager(session)
    pilot_seen, umgr_seen = [], []
    pmgr.register_callback(lambda pilot, state: pilot_seen.append(state))
    umgr.register_callback(lambda obj, state: umgr_seen.append((type(obj).__name__, state)))
    pd = rp.ComputePilotDescription(parts=[rp.ComputePartitionDescription(cores=1)], runtime=5)
    pilot = pmgr.submit_pilots(pd)
    umgr.add_pilots(pilot)  # before the pilot is ACTIVE
    assert pilot.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    assert umgr.submit_units(CUD(executable="/bin/true")).wait(timeout=30) == rp.DONE
    pilot.cancel(timeout=30)
    deadline = time.monotonic() + 10
    while rp.CANCELED not in pilot_seen:  # callbacks run on the channel thread, after the change
        assert time.monotonic() < deadline, pilot_seen
        time.sleep(0.02)
    assert pilot_seen == [rp.LAUNCHING, rp.PENDING, rp.ACTIVE, rp.CANCELED]
    assert {kind for kind, _ in umgr_seen} == {"Unit"}
    assert [state for _, state in umgr_seen] == [
        rp.NEW,
        rp.SCHEDULING,
        rp.QUEUED,
        rp.EXECUTING,
        rp.DONE,
    ]


def test_unregister_callback_stops_it(session):
    pilot, umgr = active_pilot(session, parts=((1,),))

    def one() -> None:  # a unit, and its callbacks run (they run after the waiters wake)
        assert umgr.submit_units(CUD(executable="/bin/true")).wait(timeout=30) == rp.DONE
        time.sleep(0.3)

    seen, kept = [], []
    cb = lambda unit, state: seen.append(state)  # noqa: E731
    umgr.register_callback(cb)
    umgr.register_callback(lambda unit, state, data: kept.append(data), cb_data="x")
    one()
    umgr.unregister_callback(cb)
    n = len(seen)
    one()
    assert len(seen) == n and n >= 2  # cb no more; the other still called
    assert len(kept) == 2 * n
    umgr.unregister_callback()
    one()
    assert len(kept) == 2 * n
    with pytest.raises(ValueError, match="metric"):
        umgr.unregister_callback(cb, metric="nonsense")


def test_wait_inside_a_callback_raises_instead_of_hanging(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    errors = []

    def on_unit(unit, state):
        if state == rp.DONE:
            try:
                unit.wait(timeout=1)
            except RuntimeError as exc:
                errors.append(str(exc))

    umgr.register_callback(on_unit)
    umgr.submit_units(CUD(executable="/bin/true")).wait(timeout=30)
    deadline = time.monotonic() + 5
    while not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert errors and "inside a state callback" in errors[0]


def test_thousand_units_nothing_lost(session):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    units = umgr.submit_units([CUD(executable="/bin/true") for _ in range(1000)])
    umgr.wait_units(timeout=120)
    assert Counter(u.state for u in units) == {rp.DONE: 1000}
    session.writer.flush()
    hist = session.store.history(session=session.uid)
    per_unit: dict = {}
    for h in hist:
        if h["kind"] == "units":
            per_unit.setdefault(h["uid"], []).append(h["state"])
    # each state exactly once (a unit moved between partitions: its move's two besides)
    assert len(per_unit) == 1000 and {len(unmoved(s)) for s in per_unit.values()} == {5}


def test_cancel_units_queued_and_running(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    running = umgr.submit_units(CUD(executable="/bin/sleep", arguments=["30"]))
    running.wait(rp.EXECUTING, timeout=30)
    queued = umgr.submit_units([CUD(executable="/bin/sleep", arguments=["30"]) for _ in range(3)])
    queued[0].wait(rp.QUEUED, timeout=30)
    t0 = time.monotonic()
    umgr.cancel_units([running.uid] + [u.uid for u in queued])
    umgr.wait_units(timeout=30)
    assert time.monotonic() - t0 < 10
    for u in [running] + queued:
        assert u.state == rp.CANCELED and u.reason == "canceled by the user"
    assert [s for s, _ in queued[1].history][-1] == rp.CANCELED
    after = umgr.submit_units(CUD(executable="/bin/true"))  # the slot is free again
    assert after.wait(timeout=30) == rp.DONE


def test_cancel_units_not_yet_routed(session):
    umgr = rp.UnitManager(session)  # no pilot: units wait at the client
    units = umgr.submit_units([CUD(executable="/bin/true") for _ in range(3)])
    assert {u.state for u in units} == {rp.SCHEDULING}
    umgr.cancel_units()
    assert {u.state for u in units} == {rp.CANCELED}


def test_cancel_partition_reroutes_its_queued_units(session):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    first, second = pilot.partitions
    sleep = CUD(executable="/bin/sleep", arguments=["30"])
    busy = umgr.submit_units([sleep, sleep])  # one in each partition
    for u in busy:
        u.wait(rp.EXECUTING, timeout=30)
    assert {u.part for u in busy} == {first.uid, second.uid}
    waiting = umgr.submit_units([CUD(executable="/bin/true") for _ in range(2)])
    for u in waiting:
        u.wait(rp.QUEUED, timeout=30)
    in_first = next(u for u in waiting if u.part == first.uid)
    pinned = umgr.submit_units(CUD(executable="/bin/true", partition=first.uid))
    pinned.wait(rp.QUEUED, timeout=30)
    first.cancel(timeout=30)
    assert first.state == rp.CANCELED and first.reason == "canceled by the user"
    running_in_first = next(u for u in busy if u.part == first.uid)
    assert running_in_first.wait(timeout=30) == rp.CANCELED
    assert pinned.wait(timeout=30) == rp.FAILED
    assert f"partition {first.uid} was stopped" in pinned.reason
    # the queued unit went back to the client and on to the other partition
    in_first.wait(rp.QUEUED, timeout=30)
    assert in_first.part == second.uid
    states = [s for s, _ in in_first.history]
    assert states == ["NEW", "SCHEDULING", "QUEUED", "SCHEDULING", "QUEUED"]
    umgr.cancel_units([u.uid for u in busy if u.part == second.uid])
    assert umgr.wait_units([u.uid for u in waiting], timeout=30) == [rp.DONE, rp.DONE]
    assert second.state == rp.ACTIVE


def test_cancel_pilot_cancels_everything(session):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    units = umgr.submit_units([CUD(executable="/bin/sleep", arguments=["30"]) for _ in range(4)])
    for u in units[:2]:
        u.wait(rp.EXECUTING, timeout=30)
    pilot.cancel(timeout=30)
    assert pilot.state == rp.CANCELED
    assert {p.state for p in pilot.partitions} == {rp.CANCELED}
    assert umgr.wait_units(timeout=30) == [rp.CANCELED] * 4
    assert all(u.reason for u in units)


def test_cancel_pilot_before_it_is_up(session):
    pilot = local_pilot(session, parts=((1,),))
    pilot.cancel(timeout=30)
    assert pilot.state == rp.CANCELED
    assert pilot.partitions[0].state == rp.CANCELED


def test_runtime_expiry_tears_down_in_order(session):
    pilot, umgr = active_pilot(session, parts=((1,),), runtime=0.05)  # 3 s
    unit = umgr.submit_units(CUD(executable="/bin/sleep", arguments=["60"]))
    assert unit.wait(timeout=30) == rp.CANCELED
    assert "runtime" in unit.reason
    assert pilot.wait(timeout=30) == rp.DONE
    assert "runtime of 0.05 min expired" in pilot.reason
    assert pilot.partitions[0].state == rp.DONE
    late = umgr.submit_units(CUD(executable="/bin/true"))
    assert late.state == rp.FAILED and late.reason == "no live pilot is left to run it"


def test_no_process_left_after_close_even_with_running_units(make_session):
    from pilot.pmgr.core import reaper

    session = make_session()
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    umgr.submit_units([CUD(executable="/bin/sleep", arguments=["60"]) for _ in range(4)])
    deadline = time.monotonic() + 30
    while len([u for u in umgr.get_units() if u.state == rp.EXECUTING]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert len(reaper.session_processes(session.uid)) >= 5  # bootstrap, 2 agents, 2 units
    session.close()
    assert reaper.session_processes(session.uid) == []
    assert {u.state for u in umgr.get_units()} == {rp.CANCELED}


def test_pilot_job_that_dies_fails_with_its_output(session):
    import signal

    pilot, umgr = active_pilot(session, parts=((1,),))
    unit = umgr.submit_units(CUD(executable="/bin/sleep", arguments=["60"]))
    unit.wait(rp.EXECUTING, timeout=30)
    os.killpg(pilot.job.pid, signal.SIGKILL)
    assert pilot.wait(timeout=30) == rp.FAILED
    assert "exited with code -9" in pilot.reason
    assert unit.wait(timeout=30) == rp.FAILED
    assert "lost with partition" in unit.reason
