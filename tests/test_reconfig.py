"""Reconfig of running pilots: sizes, over-commit, FILL, re-routing, the RFC's Cray case, soak."""

from __future__ import annotations

import time
from collections import Counter

import pytest

import pilot as rp
from tests.conftest import active_pilot

CPD = rp.ComputePartitionDescription
CUD = rp.ComputeUnitDescription


@pytest.fixture
def four_cores(tmp_path):
    cfg = tmp_path / "four.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 4\ngpus_per_node: 2\n")
    return str(cfg)


def test_reconfig_returns_handles_at_once_and_they_come_up(session, four_cores):
    pilot, umgr = active_pilot(session, parts=((2,),), resource=four_cores, cores=4)
    new = pilot.reconfig(start=[CPD(cores=1), CPD(cores=1, gpus=1)])
    assert all(isinstance(p, rp.Partition) and p.history[0][0] == rp.NEW for p in new)
    assert [p.uid for p in new] == [f"{pilot.uid}.part.0001", f"{pilot.uid}.part.0002"]
    for p in new:
        assert p.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE, p.reason
    assert [p.uid for p in pilot.partitions] == [f"{pilot.uid}.part.000{i}" for i in range(3)]
    assert [s for s, _ in new[1].history] == ["NEW", "PENDING", "STARTING", "ACTIVE"]
    assert (new[1].cores, new[1].gpus) == (1, 1)
    assert pilot.free == {"nodes": 0, "cores": 0, "gpus": 1}
    u = umgr.submit_units(CUD(executable="/bin/true", gpus=1))
    assert u.wait(timeout=30) == rp.DONE and u.part == new[1].uid


def test_overcommit_fails_only_what_does_not_fit(session, four_cores):
    pilot, umgr = active_pilot(session, parts=((2,),), resource=four_cores, cores=4)
    first = pilot.partitions[0]
    running = umgr.submit_units(CUD(executable="/bin/sleep", arguments=["2"]))
    running.wait(rp.EXECUTING, timeout=30)
    a, b, c = pilot.reconfig(start=[CPD(cores=1), CPD(cores=4), CPD(cores=1)])
    assert a.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    assert b.wait(rp.ACTIVE, timeout=20) == rp.FAILED
    assert b.reason == "does not fit the free resources: needs 4 cores, 1 free"
    assert c.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    assert first.state == rp.ACTIVE  # nothing that was running is disturbed
    assert running.wait(timeout=30) == rp.DONE
    assert pilot.free == {"nodes": 0, "cores": 0, "gpus": 2}


def test_share_and_fill_after_partial_stops(session, four_cores):
    pilot, umgr = active_pilot(session, parts=((1,), (1,), (2,)), resource=four_cores)
    p0, p1, p2 = pilot.partitions
    half = pilot.reconfig(stop=[p0.uid, p1.uid], start=[CPD("50%")])[0]
    assert half.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE, half.reason
    assert (half.cores, half.gpus) == (2, 0)  # 50% of 4 cores; the pilot has no GPUs
    assert p0.wait(timeout=20) == rp.CANCELED and p0.reason == "stopped by reconfig"
    # (each stopped partition ends when its own agent has gone: p1's end may come after p0's)
    assert p1.wait(timeout=20) == rp.CANCELED and p1.reason == "stopped by reconfig"
    pilot.reconfig(stop=half.uid)
    half.wait(timeout=20)
    fill = pilot.reconfig(start=[rp.FILL])[0]
    assert fill.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    assert fill.cores == 2 and pilot.free["cores"] == 0
    empty = pilot.reconfig(start=[CPD(rp.FILL)])[0]
    assert empty.wait(rp.ACTIVE, timeout=20) == rp.FAILED
    assert "FILL: 0 free core" in empty.reason
    assert p2.state == rp.ACTIVE
    assert len(pilot.partitions) == 6


def test_stop_all_and_bad_requests_change_nothing(session, four_cores):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)), resource=four_cores)
    with pytest.raises(ValueError, match=r"stop='part.9999': no such partition in pilot.0000"):
        pilot.reconfig(stop="part.9999", start=[CPD(cores=1)])
    with pytest.raises(ValueError, match=r"start\[0\].gpus=1 but pilot.0000 has no GPUs"):
        pilot.reconfig(start=[CPD(cores=1, gpus=1)])
    with pytest.raises(ValueError, match=r"size='150%' must be a share"):
        pilot.reconfig(start=["150%"])
    assert [p.state for p in pilot.partitions] == [rp.ACTIVE, rp.ACTIVE]
    assert len(pilot.partitions) == 2
    new = pilot.reconfig(stop=rp.ALL, start=[CPD(cores=2)])
    assert new[0].wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    # (the stopped ones end when their agents have drained: maybe after the new one is up)
    assert [p.wait(timeout=20) for p in pilot.partitions[:2]] == [rp.CANCELED, rp.CANCELED]


def test_queued_units_move_to_a_partition_started_in_the_same_command(session, four_cores):
    pilot, umgr = active_pilot(session, parts=((1,),), resource=four_cores, cores=4)
    old = pilot.partitions[0]
    sleepers = umgr.submit_units(
        [CUD(executable="/bin/sleep", arguments=["0.3"]) for _ in range(6)]
    )
    sleepers[-1].wait(rp.QUEUED, timeout=30)
    new = pilot.reconfig(stop=old.uid, start=[CPD(cores=2)])[0]
    assert umgr.wait_units(timeout=60)
    states = Counter(u.state for u in sleepers)
    assert states[rp.DONE] >= 4 and states[rp.DONE] + states[rp.CANCELED] == 6
    assert all(
        u.part == new.uid
        for u in sleepers
        if u.state == rp.DONE and any(s == rp.SCHEDULING for s, _ in u.history[2:])
    )
    moved = [u for u in sleepers if [s for s, _ in u.history].count(rp.QUEUED) == 2]
    assert moved and all(u.part == new.uid and u.state == rp.DONE for u in moved)
    for u in sleepers:
        if u.state == rp.CANCELED:
            assert u.reason == "stopped by reconfig" and u.part == old.uid


def test_a_cancel_right_after_a_reconfig_is_not_lost_with_the_stopped_partition(
    session, four_cores
):
    """The cancel goes to the partition each unit was sent to; the one the reconfig stops hands
    its queued units back before the cancel reaches it: they end CANCELED, with the cancel's
    reason, and none runs elsewhere (before: routed again, and run to DONE)."""
    pilot, umgr = active_pilot(session, parts=((1,), (1,)), resource=four_cores, cores=4)
    old = pilot.partitions[0]
    units = umgr.submit_units([CUD(executable="/bin/sleep", arguments=["0.3"]) for _ in range(16)])
    units[-1].wait(rp.QUEUED, timeout=30)
    queued_on_old = [  # (sent there, not started: what the stop hands back)
        u.uid for u in units if u.part == old.uid and u.state in (rp.SCHEDULING, rp.QUEUED)
    ]
    pilot.reconfig(stop=old.uid, start=[CPD(cores=2)])
    umgr.cancel_units([u.uid for u in units], reason="not wanted any more")
    assert umgr.wait_units(timeout=60)
    assert queued_on_old
    for u in units:
        assert u.state in (rp.CANCELED, rp.DONE), (u.uid, u.state, u.reason)
        if u.uid in queued_on_old:
            assert u.state == rp.CANCELED, (u.uid, u.state, u.part, u.history)
            assert u.reason in ("not wanted any more", "stopped by reconfig"), u.reason
    again = [u.uid for u in units if [s for s, _ in u.history].count(rp.SCHEDULING) > 1]
    assert again == [], again  # (none routed again after the cancel)


def test_units_handed_back_wait_for_a_partition_started_in_the_same_command(session, four_cores):
    """Stop one of two partitions and start one in its place: the units the stopped one hands
    back are not all queued on the partition that stays while the new one comes up (the
    routing window is a small one while a partition is starting): both run them."""
    pilot, umgr = active_pilot(session, parts=((2,), (2,)), resource=four_cores, cores=4)
    old, stays = pilot.partitions
    units = umgr.submit_units([CUD(executable="/bin/sleep", arguments=["0.2"]) for _ in range(40)])
    units[-1].wait(rp.QUEUED, timeout=30)
    new = pilot.reconfig(stop=old.uid, start=[CPD(cores=2)])[0]
    assert umgr.wait_units(timeout=120)
    ran = Counter(u.part for u in units if u.state == rp.DONE)
    assert ran[new.uid] >= 5 and ran[stays.uid] >= 5, ran


def test_rfc_cray_case_62_then_63_nodes(session):
    pd = rp.ComputePilotDescription(
        resource="cray.fake", parts=[CPD(nodes=30), CPD(nodes=30)], runtime=5
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.size["nodes"] == 62
    for p in pilot.partitions:
        assert p.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, p.reason
    assert len(pilot.partitions[0].resources["nodes"]) == 30
    assert len(pilot.partitions[0].resources["agent_nodes"]) == 1
    three = pilot.reconfig(stop=rp.ALL, start=[CPD(nodes=20)] * 3)
    states = [p.wait(rp.ACTIVE, timeout=30) for p in three]
    assert states == [rp.ACTIVE, rp.ACTIVE, rp.FAILED]
    assert "needs 21 wholly free nodes (20 + 1 for the agent), 20 free" in three[2].reason
    shares = pilot.reconfig(stop=rp.ALL, start=[CPD("33%")] * 3)
    assert [p.wait(rp.ACTIVE, timeout=30) for p in shares] == [rp.ACTIVE] * 3
    assert [len(p.resources["nodes"]) for p in shares] == [19, 19, 19]
    fill = pilot.reconfig(stop=rp.ALL, start=[rp.FILL])[0]
    assert fill.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE
    assert len(fill.resources["nodes"]) == 61
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    units = umgr.submit_units([CUD(executable="/bin/true") for _ in range(20)])
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 20
    assert {u.part for u in units} == {fill.uid}
    assert len(pilot.partitions) == 2 + 3 + 3 + 1


def test_soak_reconfig_cycles_while_units_run(session, four_cores):
    """200 reconfig cycles while 2,000 units run: nothing lost, nothing left running."""
    pilot, umgr = active_pilot(session, parts=((2,), (1,)), resource=four_cores, cores=4)
    units = umgr.submit_units([CUD(executable="/bin/true") for _ in range(2000)])
    live = [p for p in pilot.partitions]
    t0 = time.monotonic()
    for i in range(200):
        victim = live.pop(0)
        new = pilot.reconfig(stop=victim.uid, start=[CPD(cores=1 + i % 2)])[0]
        assert new.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE, new.reason
        live.append(new)
    cycles = time.monotonic() - t0
    assert umgr.wait_units(timeout=120)
    counts = Counter(u.state for u in units)
    assert counts[rp.DONE] + counts[rp.CANCELED] == 2000, (counts, _debug_failed(units))
    for u in units:
        finals = [s for s, _ in u.history if s in rp.FINAL]
        assert len(finals) == 1, (u.uid, u.history)
        if u.state == rp.CANCELED:
            assert u.reason == "stopped by reconfig"
    session.writer.flush()
    rows = session.store.history(session=session.uid)
    per_unit_final = Counter(
        r["uid"] for r in rows if r["kind"] == "units" and r["state"] in rp.FINAL
    )
    assert len(per_unit_final) == 2000 and set(per_unit_final.values()) == {1}
    assert len(pilot.partitions) == 202
    assert cycles < 60


def _debug_failed(units):
    return Counter(u.reason for u in units if u.state == rp.FAILED)


def test_stop_takes_all_in_any_case_and_a_bad_name_says_so():
    from pilot.ids import resolve_partitions

    live = {"pilot.0000.part.0000": True, "pilot.0000.part.0001": False}
    for name in (rp.ALL, "all", "All"):
        assert resolve_partitions(name, "pilot.0000", live) == ["pilot.0000.part.0000"]
    with pytest.raises(ValueError, match=r"stop='part.0009': .*, or ALL for every one"):
        resolve_partitions("part.0009", "pilot.0000", live)
