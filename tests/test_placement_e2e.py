"""Placement, pools and environments with real pilots, agents and unit processes."""

from __future__ import annotations

import os
import sys

import pytest

import pilot as rp
from tests.conftest import active_pilot

P = rp.Policy
CPD = rp.ComputePartitionDescription
CUD = rp.ComputeUnitDescription
# one write per line: the ranks of a unit share its stdout, and print() under PYTHONUNBUFFERED=1
# writes the line and its newline separately, which another rank's line can come between
SHOW = (
    'import os, sys; e = os.environ; sys.stdout.write("|".join([e["PILOT_NODE_NAME"], '
    'e["PILOT_CPU_IDS"], e["PILOT_GPU_IDS"], e.get("CUDA_VISIBLE_DEVICES", "-"), '
    '",".join(map(str, sorted(os.sched_getaffinity(0)))), e["PILOT_RANK"]]) + "\\n")'
)


def show(**kw):
    return CUD(executable=sys.executable, arguments=["-c", SHOW], **kw)


@pytest.fixture
def simulated(session):
    """local.simulated: 3 nodes n0..n2, 4 cores and 2 GPUs each, one partition on all."""
    return active_pilot(session, parts=(CPD(cores=12, gpus=6),), resource="local.simulated")


def test_roundrobin_and_block_over_simulated_nodes(simulated):
    pilot, umgr = simulated
    rr = umgr.submit_units([CUD(executable="/bin/sleep", arguments=["0.5"]) for _ in range(3)])
    umgr.wait_units(timeout=60)
    assert [u.node for u in rr] == ["n0", "n1", "n2"]
    with P(distribution=P.Distribution.BLOCK):
        block = umgr.submit_units(
            [CUD(executable="/bin/sleep", arguments=["0.5"]) for _ in range(6)]
        )
    umgr.wait_units(timeout=60)
    # BLOCK fills one node (4 cores) before it starts the next; which one is free to choose
    first = block[0].node
    assert [u.node for u in block[:4]] == [first] * 4
    assert len({u.node for u in block[4:]}) == 1 and block[4].node != first


def test_pins_and_unknown_hosts(simulated):
    pilot, umgr = simulated
    pinned = umgr.submit_units(show(policy=P(placement=P.Placement.HOST_NAME, host_name="n2")))
    by_id = umgr.submit_units(show(policy=P(placement=P.Placement.HOST_ID, host_id=1)))
    nowhere = umgr.submit_units(show(policy=P(placement=P.Placement.HOST_NAME, host_name="n7")))
    umgr.wait_units(timeout=60)
    assert pinned.state == rp.DONE and pinned.node == "n2"
    assert pinned.stdout.startswith("n2|")
    assert by_id.node == "n1"
    assert nowhere.state == rp.FAILED
    assert nowhere.reason == ("host_name='n7': no such node in this partition (nodes: n0, n1, n2)")
    assert [s for s, _ in nowhere.history] == ["NEW", "SCHEDULING", "FAILED"]


def test_units_see_their_ids_and_are_bound(simulated):
    pilot, umgr = simulated
    u = umgr.submit_units(
        show(
            cores=2,
            gpus=1,
            policy=P(cpu_affinity=[1, 2], placement=P.Placement.HOST_NAME, host_name="n1"),
        )
    )
    assert u.wait(timeout=60) == rp.DONE, u.reason
    node, cpus, gpus, cuda, mask, rank = u.stdout.strip().split("|")
    assert (node, cpus, rank) == ("n1", "1,2", "0")
    assert gpus == cuda and len(gpus.split(",")) == 1
    real = sorted(os.sched_getaffinity(0))  # logical cores map onto the real ones round-robin
    assert mask == ",".join(map(str, sorted({real[1 % len(real)], real[2 % len(real)]})))
    assert u.slots["cpus"] == [1, 2]


def test_multi_rank_unit_runs_one_process_per_rank(simulated):
    pilot, umgr = simulated
    u = umgr.submit_units(show(ranks=3, cores_per_rank=4))
    assert u.wait(timeout=60) == rp.DONE, u.reason
    assert sorted(u.node) == ["n0", "n1", "n2"]  # a list for multi-node units
    ranks = sorted(line.rsplit("|", 1)[-1] for line in u.stdout.splitlines())
    assert ranks == ["0", "1", "2"], repr(u.stdout)
    assert len(u.slots) == 3 and all(len(s["cpus"]) == 4 for s in u.slots)


def test_fractional_gpus_share_one(session, tmp_path):
    cfg = tmp_path / "onegpu.yaml"
    cfg.write_text("cores_per_node: 2\ngpus_per_node: 1\n")
    pilot, umgr = active_pilot(session, parts=(CPD(cores=2, gpus=1),), resource=str(cfg))
    script = "import os, time; print(os.environ['PILOT_GPU_IDS']); time.sleep(1)"
    halves = umgr.submit_units(
        [CUD(executable=sys.executable, arguments=["-c", script], gpus=0.5) for _ in range(2)]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE, rp.DONE]
    assert [u.stdout for u in halves] == ["0\n", "0\n"]
    (s0, e0), (s1, e1) = [(dict(u.history)[rp.EXECUTING], dict(u.history)[rp.DONE]) for u in halves]
    assert s1 < e0 and s0 < e1  # ran at the same time, on the same GPU


def test_custom_types_placeholders_and_inherited_gpu_mask(make_session, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")  # what a batch system would give us
    session = make_session()
    cfg = tmp_path / "fpga.yaml"
    cfg.write_text(
        "cores_per_node: 2\ngpus_per_node: 3\n"
        "resource_pool:\n  fpgas: [{id: fa, slots: 1}, {id: fb, slots: 2}]\n"
        "  licenses: 0\n"
    )
    pilot, umgr = active_pilot(
        session,
        parts=(CPD(cores=2, gpus=3, resources={"fpgas": 2, "licenses": 0}),),
        resource=str(cfg),
    )
    env = {"MY_GPUS": "gpus=%(gpu_ids)s", "MY_FPGAS": "%(fpga_ids)s", "PCT": "100% %Y %%"}
    script = (
        'import os; e = os.environ; print(e["CUDA_VISIBLE_DEVICES"], e["PILOT_GPU_IDS"], '
        'e["MY_GPUS"], e["PILOT_FPGA_IDS"], e["MY_FPGAS"], e["PCT"])'
    )
    good = umgr.submit_units(
        CUD(
            executable=sys.executable,
            arguments=["-c", script],
            environment=env,
            resources={"fpgas": 2},
            policy=P(gpu_affinity=[2]),
        )
    )
    bad_name = umgr.submit_units(CUD(executable="/bin/true", environment={"X": "%(tpu_ids)s"}))
    bad_type = umgr.submit_units(CUD(executable="/bin/true", resources={"tpus": 1}))
    zero = umgr.submit_units(CUD(executable="/bin/true", resources={"licenses": 1}))
    umgr.wait_units(timeout=60)
    assert good.state == rp.DONE, good.reason
    assert good.stdout.split() == ["6", "2", "gpus=2", "fb", "fb", "100%", "%Y", "%%"]
    assert bad_name.state == rp.FAILED
    assert bad_name.reason.startswith(
        "environment['X']: placeholder %(tpu_ids)s cannot be "
        "filled; known: %(cpu_ids)s, %(fpga_ids)s"
    )
    assert bad_type.state == rp.FAILED and "type 'tpus' is not declared" in bad_type.reason
    assert zero.state == rp.FAILED and "licenses=1 can never fit" in zero.reason


def test_groups_submit_together(simulated):
    pilot, umgr = simulated
    group = rp.UnitGroup(policy=P(distribution=P.Distribution.BLOCK))
    group.add(
        2,
        template=rp.UnitTemplate(
            executable="/bin/sleep",
            arguments=["0.3"],
            policy=P(placement=P.Placement.HOST_NAME, host_name="n2"),
        ),
    )
    group.add(2, template=rp.UnitTemplate(executable="/bin/sleep", arguments=["0.3"]))
    units = umgr.submit_units(group)
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 4
    # BLOCK fills the node already in use (n2, where the pinned ones went) before the next
    assert [u.node for u in units] == ["n2", "n2", "n2", "n2"]
    assert units[2].description.policy.distribution is P.Distribution.BLOCK


def test_a_change_to_the_global_policy_reaches_units_built_after_it(simulated):
    """rp.GLOBAL_POLICY is the lowest level of the merge, read when a unit is built (it was
    copied once at import: units without a policy kept CUDA_VISIBLE_DEVICES)."""
    pilot, umgr = simulated
    script = 'echo "${CUDA_VISIBLE_DEVICES-unset}|${HIP_VISIBLE_DEVICES-unset}|$PILOT_GPU_IDS"'
    gpu = dict(executable="/bin/sh", arguments=["-c", script], gpus=1)
    before = CUD(**gpu)
    try:
        rp.GLOBAL_POLICY.gpu_env_str = "HIP_VISIBLE_DEVICES"
        after, with_policy = CUD(**gpu), CUD(**gpu, policy=P(distribution=P.Distribution.BLOCK))
    finally:
        rp.GLOBAL_POLICY.gpu_env_str = "CUDA_VISIBLE_DEVICES"
    later = CUD(**gpu)  # built after it was set back
    units = umgr.submit_units([before, after, with_policy, later])
    assert set(umgr.wait_units(timeout=60)) == {rp.DONE}
    seen = [u.stdout.strip().split("|") for u in units]
    for (cuda, hip, ids), hip_wanted in zip(seen, (False, True, True, False)):
        assert ids and (hip, cuda) == ((ids, "unset") if hip_wanted else ("unset", ids)), seen
