"""Policy merge and capture semantics (no processes)."""

from __future__ import annotations

import threading

import pytest

import pilot as rp
from pilot.unit_record import UnitRecord

P = rp.Policy
CUD = rp.ComputeUnitDescription


def test_unset_fields_come_from_the_global_policy():
    pol = CUD(executable="x").policy
    assert pol.placement is P.Placement.ANYWHERE
    assert pol.distribution is P.Distribution.ROUNDROBIN
    assert pol.wait_mode is P.WaitMode.IDLE and pol.refcounted is True
    assert pol.gpu_env_str == "CUDA_VISIBLE_DEVICES"
    assert pol.host_name is None and pol.cpu_affinity is None


def test_precedence_field_by_field():
    with P(distribution=P.Distribution.BLOCK, gpu_env_str="ROCR_VISIBLE_DEVICES"):
        with P(placement=P.Placement.HOST_NAME, host_name="n1", gpu_env_str="HIP_VISIBLE"):
            pol = CUD(executable="x", policy=P(gpu_affinity=[1], host_name="n2")).policy
    assert pol.placement is P.Placement.HOST_NAME  # inner context
    assert pol.host_name == "n2"  # explicit over inner context
    assert pol.distribution is P.Distribution.BLOCK  # outer context
    assert pol.gpu_env_str == "HIP_VISIBLE"  # inner over outer
    assert pol.gpu_affinity == [1]  # explicit
    assert pol.wait_mode is P.WaitMode.IDLE  # global


def test_context_yields_the_policy_and_pops_on_exit():
    with P(placement=P.Placement.LOCAL) as p:
        assert isinstance(p, P) and p.placement is P.Placement.LOCAL
        assert CUD(executable="x").policy.placement is P.Placement.LOCAL
    assert CUD(executable="x").policy.placement is P.Placement.ANYWHERE


def test_capture_at_construction():
    explicit = P(host_name="n0", placement=P.Placement.HOST_NAME)
    ud = CUD(executable="x", policy=explicit)
    explicit.host_name = "n9"  # later edits to the object change nothing built
    with P(distribution=P.Distribution.BLOCK):  # nor does a context entered afterwards
        assert ud.policy.host_name == "n0"
        assert ud.policy.distribution is P.Distribution.ROUNDROBIN
    assert ud.policy is not explicit


def test_contexts_are_thread_local():
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def other():
        with P(placement=P.Placement.LOCAL):
            inside.set()
            release.wait(5)
            seen["other"] = CUD(executable="x").policy.placement

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(5)
    seen["main"] = CUD(executable="x").policy.placement
    release.set()
    t.join(5)
    assert seen == {"main": P.Placement.ANYWHERE, "other": P.Placement.LOCAL}


def test_group_and_template_merge():
    with P(placement=P.Placement.HOST_NAME, host_name="ctx-node", gpu_env_str="CTX"):
        group = rp.UnitGroup(policy=P(distribution=P.Distribution.BLOCK, host_name="grp-node"))
    t1 = rp.UnitTemplate(executable="/bin/true", policy=P(gpu_affinity=[0]))
    t2 = rp.UnitTemplate(executable="/bin/true", policy=P(host_name="tmpl-node"))
    first = group.add(1, template=t1)
    rest = group.add(3, template=t2)
    assert len(group) == 4 and list(group) == first + rest
    p1, p2 = first[0].policy, rest[0].policy
    assert p1.gpu_affinity == [0] and p1.host_name == "grp-node"  # template, then group
    assert p2.host_name == "tmpl-node" and p2.gpu_affinity is None  # template wins
    for p in (p1, p2):
        assert p.distribution is P.Distribution.BLOCK  # group
        assert p.placement is P.Placement.HOST_NAME  # context at group construction
        assert p.gpu_env_str == "CTX"
        assert p.wait_mode is P.WaitMode.IDLE  # global
    # a context around add() is not the group's context
    with P(gpu_env_str="LATER"):
        later = group.add(1, template=t1)[0]
    assert later.policy.gpu_env_str == "CTX"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"placement": "SOMEWHERE"}, r"placement='SOMEWHERE' must be one of \['LOCAL'"),
        ({"cpu_affinity": [1, 1]}, r"cpu_affinity=\[1, 1\] names an id twice"),
        ({"gpu_affinity": "0,1"}, r"gpu_affinity='0,1' must be a list of ids"),
        ({"host_id": "7"}, r"host_id='7' must be an integer"),
        ({"refcounted": "yes"}, r"refcounted='yes' must be True or False"),
        ({"hostname": "n1"}, r"Policy: unknown key\(s\) \['hostname'\]; accepted: \["),
    ],
)
def test_policy_errors_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        P(**kwargs)


def test_a_node_pin_needs_its_node_and_a_pin_can_be_overridden():
    """HOST_NAME without a host_name (HOST_ID without a host_id) names no node: said (a unit
    fails at submit with it, pmgr/core/routing.py never_fits; it failed only at the agent,
    "host_name=None: no such node").  A context's pin is overridden by a unit's own placement."""
    from pilot.policy import pin_error

    assert pin_error(CUD(executable="x", policy=P(placement="HOST_NAME")).policy) == (
        "policy.placement=HOST_NAME needs policy.host_name"
    )
    assert "needs policy.host_id" in pin_error(
        CUD(executable="x", policy=P(placement="HOST_ID")).policy
    )
    assert (
        pin_error(CUD(executable="x", policy=P(placement="HOST_NAME", host_name="n1")).policy)
        is None
    )
    with P(placement="HOST_NAME", host_name="n1"):
        free = CUD(executable="x", policy=P(placement="ANYWHERE"))
    assert free.policy.placement == P.Placement.ANYWHERE and pin_error(free.policy) is None


def test_a_unit_pinned_to_no_node_fails_at_submit_saying_so(session):
    from tests.conftest import active_pilot

    pilot, umgr = active_pilot(session, parts=((1,),))
    (u,) = umgr.submit_units([CUD(executable="/bin/true", policy=P(placement="HOST_NAME"))])
    assert u.wait(timeout=30) == rp.FAILED
    assert u.reason == "policy.placement=HOST_NAME needs policy.host_name", u.reason


def test_affinity_and_counts_must_agree():
    with pytest.raises(ValueError, match=r"cores=3 but policy.cpu_affinity=\[0, 1\] names 2"):
        CUD(executable="x", cores=3, policy=P(cpu_affinity=[0, 1]))
    with pytest.raises(ValueError, match=r"policy.gpu_affinity names one rank's GPU\(s\); ranks=2"):
        CUD(executable="x", ranks=2, policy=P(gpu_affinity=[0]))
    d = CUD(executable="x", policy=P(cpu_affinity=[2, 3]))
    assert UnitRecord.for_description("unit.0000", d, d.to_stored())["cpus"] == 2
