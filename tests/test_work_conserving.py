"""Work-conserving placement (docs/concepts.md): a unit that fits free slots never waits behind
another unit's slot, whatever the speed tricks (lanes queue units ahead of time).  Checked on
the times the agent recorded: while a unit waited (QUEUED -> EXECUTING), no core of its
partition may idle longer than a reaction time.  `/bin/sleep` units use no CPU, so a loaded
machine does not move the numbers; the tolerance is the agent's reaction to an exit."""

from __future__ import annotations

import logging

import pilot as rp
from pilot.partition.plan import plan_pilot
from tests.conftest import active_pilot

TOLERANCE = 0.3  # s a core may idle while a unit waits (the agent's turn, on a busy machine)


def sleep(seconds: float, **kw) -> rp.ComputeUnitDescription:
    return rp.ComputeUnitDescription(executable="/bin/sleep", arguments=[str(seconds)], **kw)


def idle_while_waiting(units, cores: int) -> tuple[float, str]:
    """The longest stretch during which fewer than `cores` single-core units ran while a unit
    that went on to run was QUEUED, and that unit's uid."""
    busy, waits = [], []
    for u in units:
        h = dict(u.history)
        if rp.EXECUTING in h:
            busy.append((h[rp.EXECUTING], h.get(u.state, float("inf"))))
            waits.append((h[rp.QUEUED], h[rp.EXECUTING], u.uid))
    edges = sorted({t for run in busy for t in run} | {t for w in waits for t in w[:2]})
    worst, who, run, since = 0.0, "", 0.0, None
    for a, b in zip(edges, edges[1:]):
        mid = (a + b) / 2
        waiting = [uid for q, s, uid in waits if q <= mid < s]
        if waiting and sum(s <= mid < e for s, e in busy) < cores:
            run = run + (b - a) if since == a else b - a  # (adjacent stretches add up)
            since = b
            if run > worst:
                worst, who = run, waiting[0]
        else:
            since = None
    return worst, who


def test_a_short_unit_never_waits_behind_a_long_one_while_a_core_idles(session):
    pilot, umgr = active_pilot(session, parts=((2,),), runtime=5)
    units = umgr.submit_units([sleep(1.5)] + [sleep(0.25) for _ in range(8)])
    assert set(umgr.wait_units(timeout=60)) == {rp.DONE}
    worst, who = idle_while_waiting(units, cores=2)
    assert worst < TOLERANCE, f"a core idled {worst:.2f} s while {who} waited"
    ends = [dict(u.history)[rp.DONE] for u in units]
    submitted = min(dict(u.history)[rp.QUEUED] for u in units)
    # greedy in submit order: the long one on a core, the eight short ones on the other,
    # the last two after the long one ends: 1.75 s (per-core queues took 2.5 s)
    assert max(ends) - submitted < 1.75 + 2 * TOLERANCE, max(ends) - submitted


def test_units_queued_behind_long_ones_move_to_a_partition_with_free_cores(session, tmp_path):
    """Across partitions: units sent to one whose cores long units hold are asked back when
    another has free cores and the client nothing to send it (pmgr/core/routing.py
    rebalance), and run there.  Before, 6 short units waited 8 s behind the long ones while
    the other partition idled."""
    cfg = tmp_path / "four.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 4\n")
    pilot, umgr = active_pilot(session, parts=((2,), (2,)), resource=str(cfg), cores=4)
    longs = umgr.submit_units([sleep(6) for _ in range(3)])
    shorts = umgr.submit_units([sleep(0.2) for _ in range(12)])
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 15
    started = min(dict(u.history)[rp.EXECUTING] for u in longs)
    late = [u.uid for u in shorts if dict(u.history)[rp.EXECUTING] - started > 4.0]
    assert late == [], [(u.uid, u.part, [s for s, _ in u.history]) for u in shorts]
    moved = [u for u in shorts if [s for s, _ in u.history].count(rp.QUEUED) == 2]
    assert moved, "no unit was moved"
    assert {u.part for u in moved} <= {p.uid for p in pilot.partitions}


def test_canceled_units_free_their_cores_at_once(session):
    """RADICAL-Pilot's task_cancelation pattern, shrunk: 16 units of 0.8 s on 4 cores; after
    the first four end, six waiting ones are canceled: the six left run in two rounds."""
    pilot, umgr = active_pilot(session, parts=((4,),), cores=4, runtime=5)
    units = umgr.submit_units([sleep(0.8) for _ in range(16)])
    first = units[:4]
    umgr.wait_units([u.uid for u in first], timeout=30)
    waiting = [u for u in units if u.state not in (rp.EXECUTING, *rp.FINAL)]
    umgr.cancel_units([u.uid for u in waiting[:6]])
    umgr.wait_units(timeout=60)
    canceled = [u for u in units if u.state == rp.CANCELED]
    done = [u for u in units if u.state == rp.DONE]
    assert len(canceled) >= 5 and len(done) + len(canceled) == 16, [u.state for u in units]
    worst, who = idle_while_waiting(units, cores=4)
    assert worst < TOLERANCE, f"a core idled {worst:.2f} s while {who} waited"


def test_mixed_shapes_see_the_ids_of_the_slot_they_took_over(session):
    """Units with and without a GPU, alternating, on a partition with fewer GPUs than cores:
    a unit queued ahead starts only in a lane of its own shape, and sees that lane's ids."""
    script = 'echo "$PILOT_CPU_IDS|$PILOT_GPU_IDS|$CUDA_VISIBLE_DEVICES|$PILOT_NODE_NAME"'
    desc = [
        rp.ComputeUnitDescription(
            executable="/bin/sh", arguments=["-c", f"sleep 0.{i % 3}; {script}"], gpus=i % 2
        )
        for i in range(40)
    ]
    part = rp.ComputePartitionDescription(cores=3, gpus=1)
    pilot, umgr = active_pilot(session, parts=(part,), resource="local.simulated", runtime=5)
    units = umgr.submit_units(desc)
    assert set(umgr.wait_units(timeout=60)) == {rp.DONE}
    for u in units:
        cpus, gpu_ids, visible, node = u.stdout.strip().split("|")
        assert cpus == ",".join(map(str, u.slots["cpus"])), (u.uid, u.slots, u.stdout)
        gpus = ",".join(map(str, u.slots.get("gpus", ())))
        assert gpu_ids == visible == gpus, (u.uid, u.slots, u.stdout)
        assert node == u.node, (u.uid, u.node, u.stdout)


def test_a_partition_beyond_the_machine_is_as_a_pilot_beyond_it(caplog):
    """One rule for logical cores on a local resource: a partition larger than the machine is
    accepted with the same warning as a pilot larger than it (cores=)."""
    import os

    more = len(os.sched_getaffinity(0)) + 2
    with caplog.at_level(logging.WARNING):
        by_part = plan_pilot(
            rp.ComputePilotDescription(
                resource="local.localhost", parts=[rp.ComputePartitionDescription(cores=more)]
            )
        ).size
        by_pilot = plan_pilot(
            rp.ComputePilotDescription(
                resource="local.localhost",
                cores=more,
                parts=[rp.ComputePartitionDescription(cores=more)],
            )
        ).size
    assert by_part["cores"] == by_pilot["cores"] == more
    warned = [r.getMessage() for r in caplog.records if "logical" in r.getMessage()]
    assert len(warned) == 2, warned


def test_the_agent_says_how_it_starts_units(make_session, monkeypatch):
    """The agent's log names its spawn path (clone3 / clone / vfork / posix_spawn) and whether
    lanes are on; PILOT_NATIVE=0 turns agent/_spawn-src/ off and the log says so."""
    import os

    for native in ("1", "0"):
        monkeypatch.setenv("PILOT_NATIVE", native)
        session = make_session()
        pilot, umgr = active_pilot(session, parts=((1,),))
        umgr.submit_units([sleep(0.01) for _ in range(3)])
        assert set(umgr.wait_units(timeout=30)) == {rp.DONE}
        part = pilot.partitions[0]
        with open(os.path.join(pilot.sandbox, f"{part.uid}.agent.log")) as f:
            up = next(line for line in f if ": up, pid" in line)
        if native == "0":
            assert "spawn posix_spawn (turned off by PILOT_NATIVE=0)" in up, up
            assert "lanes off" in up, up
        else:
            assert any(f"spawn {m}," in up for m in ("clone3", "clone", "vfork", "posix_spawn"))
        pilot.cancel()
        pilot.wait(timeout=30)


def test_a_higher_priority_starts_before_the_lower_ones_queued_at_the_agent(session):
    """Units already QUEUED at the agent (some held ahead by its lanes) are overtaken by a
    higher priority that comes later; equal priorities keep their order of arrival."""
    pilot, umgr = active_pilot(session, parts=((2,),))
    blockers = umgr.submit_units([sleep(1.0) for _ in range(2)])  # both cores busy
    low = umgr.submit_units([sleep(0.05) for _ in range(6)])
    for u in low:
        u.wait(rp.QUEUED, timeout=20)
    high = umgr.submit_units([sleep(0.05, priority=5) for _ in range(3)])
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 11
    started = {u.uid: dict(u.history)[rp.EXECUTING] for u in blockers + low + high}
    order = sorted(started, key=started.get)
    after_blockers = [uid for uid in order if uid not in {u.uid for u in blockers}]
    # the cores freed by the blockers go to the high units first (lanes held low ones ahead:
    # taken back), also when the high ones reach the agent in two batches (tests/test_pool.py);
    # and no low one starts a unit (50 ms) before a high one (when the first two high ones end
    # at once, the third and a low one start in the same moment, in either order)
    assert set(after_blockers[:2]) <= {u.uid for u in high}, after_blockers
    for h in high:
        for lo in low:
            assert started[lo.uid] >= started[h.uid] - 0.04, (h.uid, lo.uid, after_blockers)
    # equal priorities in their order of arrival: two cores may start two of them at the same
    # moment (two lanes), in either order, never a later one a unit (50 ms) before an earlier one
    for a, b in zip(low, low[1:]):
        assert started[b.uid] >= started[a.uid] - 0.04, (a.uid, b.uid, after_blockers)
    for a, b in zip(high, high[1:]):
        assert started[b.uid] >= started[a.uid] - 0.04, (a.uid, b.uid, after_blockers)
