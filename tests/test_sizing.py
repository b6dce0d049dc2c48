"""Pilot size derivation and partition allocation (no processes)."""

import pytest

import pilot as rp
from pilot.config import resource_config
from pilot.partition.plan import plan_pilot
from pilot.partition.resources import AllocationError, PilotResources

CPD = rp.ComputePartitionDescription


def size_of(resource, parts, **kw):
    return plan_pilot(rp.ComputePilotDescription(resource=resource, parts=parts, **kw)).size


def test_localhost_pilot_holds_exactly_what_its_partitions_need(tmp_path):
    cfg = tmp_path / "ov.yaml"
    cfg.write_text("cores_per_node: 16\ngpus_per_node: 4\nagent_overhead: {cores: 1}\n")
    size = size_of(str(cfg), [CPD(cores=4, gpus=2), CPD(cores=8, gpus=1)])
    # 4 + 8 cores for the partitions, one per agent on top
    assert (size["nodes"], size["cores"], size["gpus"]) == (1, 14, 3)


def test_a_pilot_of_more_nodes_than_a_one_node_resource_is_refused():
    """local.localhost has one node: nodes=5 was quietly a pilot of one."""
    with pytest.raises(ValueError, match="needs 5 nodes, the resource has 1"):
        size_of("local.localhost", [CPD(rp.FILL)], nodes=5)
    assert size_of("local.localhost", [CPD(rp.FILL)], nodes=1)["nodes"] == 1


def test_cray_agents_need_a_node_each():
    size = size_of("cray.fake", [CPD(nodes=30), CPD(nodes=30)])
    assert size["nodes"] == 62
    assert size["cores"] == 62 * 32


def test_node_granular_core_partitions_pack():
    # local.simulated: 3 nodes x 4 cores x 2 GPUs; 6 cores + 5 cores need all 3 nodes
    assert size_of("local.simulated", [CPD(cores=6), CPD(cores=5)])["nodes"] == 3
    assert size_of("local.simulated", [CPD(cores=2), CPD(cores=2)])["nodes"] == 1


def _pool(nodes, resource="cray.fake"):
    cfg = resource_config.load(resource)
    return PilotResources.for_pilot(
        {
            "nodes": nodes,
            "cores_per_node": cfg.cores_per_node,
            "gpus_per_node": cfg.gpus_per_node,
            "node_granular": True,
        },
        cfg,
    )


def test_rfc_reconfig_case_62_nodes():
    pool = _pool(62)
    a, b = pool.allocate(CPD(nodes=30)), pool.allocate(CPD(nodes=30))
    assert pool.free["nodes"] == 0
    pool.release(a)
    pool.release(b)
    first = [pool.allocate(CPD(nodes=20)) for _ in range(2)]
    with pytest.raises(
        AllocationError,
        match=r"needs 21 wholly free nodes \(20 \+ 1 for the "
        r"agent\), 20 free",
    ):
        pool.allocate(CPD(nodes=20))
    assert pool.free["nodes"] == 20  # the failed one took nothing
    for alloc in first:
        pool.release(alloc)
    shares = [pool.allocate(CPD("33%")) for _ in range(3)]
    assert [len(s.slots) + len(s.agent_nodes) for s in shares] == [20, 20, 20]
    for s in shares:
        pool.release(s)
    fill = pool.allocate(CPD(rp.FILL))
    assert (len(fill.slots), len(fill.agent_nodes)) == (61, 1)


def test_shares_and_all_gpus_on_a_core_granular_pilot(tmp_path):
    cfg = tmp_path / "g.yaml"
    cfg.write_text("cores_per_node: 8\ngpus_per_node: 4\n")
    rc = resource_config.load(str(cfg))
    pool = PilotResources.for_pilot(
        {"nodes": 1, "cores_per_node": 8, "gpus_per_node": 4, "node_granular": False}, rc
    )
    half = pool.allocate(CPD("50%"))
    assert (half.cores, half.gpus) == (4, 2)
    gpus = pool.allocate(CPD(gpus=rp.ALL))
    assert (gpus.cores, gpus.gpus) == (2, 2)  # one core per GPU unless cores= says otherwise
    rest = pool.allocate(CPD(rp.FILL))
    assert (rest.cores, rest.gpus) == (2, 0)
    with pytest.raises(AllocationError, match="FILL: 0 free core"):
        pool.allocate(CPD(rp.FILL))
    with pytest.raises(AllocationError, match=r"needs 1 cores, 0 free"):
        pool.allocate(CPD(cores=1))
    pool.release(half)
    assert pool.free == {"nodes": 0, "cores": 4, "gpus": 2}
