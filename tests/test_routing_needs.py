"""Routing looks at what a unit needs beyond its cores and GPUs (pmgr/core/routing.py, `_place`;
Partition.could_hold): a node pin goes to the partition that holds the node, a resource type to
a partition that declares it; a unit that no partition can hold goes where its shape fits and
its agent fails it, saying why.  Before, both went to whichever partition had the fewest units
and failed there ("no such node in this partition", "type 'fpgas' is not declared")."""

from __future__ import annotations

import pytest

import pilot as rp

CPD = rp.ComputePartitionDescription
CUD = rp.ComputeUnitDescription


@pytest.fixture
def three_nodes(session):
    """A pilot of three logical nodes (4 cores, 2 GPUs each), a partition on each; the first
    declares 2 FPGAs."""
    parts = [CPD(cores=4, resources={"fpgas": 2}), CPD(cores=4), CPD(cores=4)]
    pd = rp.ComputePilotDescription(resource="local.simulated", nodes=3, parts=parts, runtime=5)
    pilot = rp.PilotManager(session).submit_pilots(pd)
    for p in pilot.partitions:
        assert p.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, p.reason
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    return pilot, umgr


def test_a_node_pin_and_a_resource_type_go_where_they_can_run(three_nodes):
    pilot, umgr = three_nodes
    node_of = {p.uid: [n["name"] for n in p.resources["nodes"]] for p in pilot.partitions}
    last = pilot.partitions[-1]
    (host,) = node_of[last.uid]
    pinned = [
        CUD(executable="/bin/true", policy=rp.Policy(placement="HOST_NAME", host_name=host))
        for _ in range(6)
    ]
    fpgas = [CUD(executable="/bin/true", resources={"fpgas": 1}) for _ in range(6)]
    plain = [CUD(executable="/bin/true") for _ in range(6)]
    units = umgr.submit_units(pinned + fpgas + plain)
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 18, [(u.uid, u.reason) for u in units]
    assert {u.part for u in units[:6]} == {last.uid}
    assert {u.part for u in units[6:12]} == {pilot.partitions[0].uid}


def test_a_unit_no_partition_can_hold_fails_saying_why(three_nodes):
    pilot, umgr = three_nodes
    nowhere = umgr.submit_units(
        [
            CUD(executable="/bin/true", policy=rp.Policy(placement="HOST_NAME", host_name="n9")),
            CUD(executable="/bin/true", resources={"tpus": 1}),
            CUD(executable="/bin/true", resources={"fpgas": 3}),
        ]
    )
    assert umgr.wait_units(timeout=60) == [rp.FAILED] * 3
    assert "host_name='n9': no such node" in nowhere[0].reason, nowhere[0].reason
    assert "type 'tpus' is not declared" in nowhere[1].reason, nowhere[1].reason
    assert "can never fit" in nowhere[2].reason, nowhere[2].reason
    assert nowhere[2].part == pilot.partitions[0].uid  # (where its type is: too few of it)
