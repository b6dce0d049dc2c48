"""Resource pools, placement and the scheduler's order (no processes)."""

from __future__ import annotations

import itertools
import random
import tracemalloc

import pytest

from pilot.agent.pool import SCALE, NodePool, PartitionPool, need_of
from pilot.agent.scheduler import MAX_OVERTAKES, Scheduler
from pilot.unit_record import UnitRecord


def node(i, cores=4, gpus=2, pool=None, name=None):
    return {
        "index": i,
        "name": name or f"n{i}",
        "host_id": 100 + i,
        "cores": list(range(cores)),
        "gpus": list(range(gpus)),
        "pool": pool or {},
    }


def req(cpus=1, gpus=0, ranks=1, resources=None, **policy):
    pol = {"placement": "ANYWHERE", "distribution": "ROUNDROBIN"}
    pol.update(policy)
    return {"cpus": cpus, "gpus": gpus, "ranks": ranks, "resources": resources or {}, "policy": pol}


def names(alloc):
    return [n.name for n, _ in alloc.ranks]


def test_roundrobin_spreads_and_block_fills():
    pool = PartitionPool([node(i) for i in range(3)])
    rr = [names(pool.allocate(req()))[0] for _ in range(6)]
    assert rr == ["n0", "n1", "n2", "n0", "n1", "n2"]
    pool = PartitionPool([node(i) for i in range(3)])
    block = [names(pool.allocate(req(distribution="BLOCK")))[0] for _ in range(6)]
    assert block == ["n0", "n0", "n0", "n0", "n1", "n1"]


def test_pins_local_host_name_host_id_and_unknown_hosts():
    pool = PartitionPool([node(i) for i in range(3)], agent_node=0)
    assert names(pool.allocate(req(placement="HOST_NAME", host_name="n2"))) == ["n2"]
    assert names(pool.allocate(req(placement="HOST_ID", host_id=101))) == ["n1"]
    assert names(pool.allocate(req(placement="LOCAL"))) == ["n0"]
    why = pool.never_fits(req(placement="HOST_NAME", host_name="nowhere"))
    assert why == "host_name='nowhere': no such node in this partition (nodes: n0, n1, n2)"
    assert "host_id=7: no such node" in pool.never_fits(req(placement="HOST_ID", host_id=7))
    dedicated = PartitionPool([node(0)], agent_node=None)
    assert "LOCAL: the agent's node holds no unit slots" in dedicated.never_fits(
        req(placement="LOCAL")
    )
    # (too many ranks for the node it is pinned to, not for the partition: the pin is named)
    why = pool.never_fits(req(ranks=5, placement="HOST_NAME", host_name="n1"))
    assert why == (
        "cores=1, gpus=0 x 5 ranks can never fit on the node it is pinned to, n1 "
        "(policy.host_name='n1'): it holds 4 cpus (4 slots), 2 gpus (2 slots)"
    ), why


def test_capacity_is_respected_wait_versus_reject():
    pool = PartitionPool([node(0, cores=2)])
    a, b = pool.allocate(req()), pool.allocate(req())
    assert pool.allocate(req()) is None  # does not fit now: wait
    assert pool.never_fits(req()) is None
    assert "cores=3, gpus=0 can never fit" in pool.never_fits(req(cpus=3))  # never: reject
    pool.release(a.aid)
    assert pool.allocate(req()) is not None
    pool.release(b.aid)
    with pytest.raises(ValueError, match="not held"):
        pool.release(b.aid)


def test_slots_greater_than_one_and_best_fit():
    gpus = {"gpus": [{"id": 0, "slots": 2}, {"id": 1, "slots": 2}]}
    pool = PartitionPool([node(0, cores=8, pool=gpus)])
    first = pool.allocate(req(gpus=1))
    second = pool.allocate(req(gpus=1))
    # best fit: the second one-slot request goes to the half-used GPU, keeping GPU 1 whole
    assert first.ranks[0][1]["gpus"][0][0] == second.ranks[0][1]["gpus"][0][0]
    whole = pool.allocate(req(gpus=2))
    assert [i for i, _ in whole.ranks[0][1]["gpus"]] == [1]
    assert pool.allocate(req(gpus=1)) is None
    for a in (first, second, whole):
        pool.release(a.aid)
    assert pool.nodes[0].free == pool.nodes[0].cap  # exactly back to where it was


def test_fractional_gpus_share_one_slot():
    pool = PartitionPool([node(0, cores=4, gpus=1)])
    a, b = pool.allocate(req(gpus=0.5)), pool.allocate(req(gpus=0.5))
    assert a.ranks[0][1]["gpus"] == b.ranks[0][1]["gpus"] == [(0, 500)]
    assert pool.allocate(req(gpus=0.5)) is None
    thirds = PartitionPool([node(0, cores=4, gpus=1)])
    assert all(thirds.allocate(req(gpus=1 / 3)) for _ in range(3))
    assert thirds.allocate(req(gpus=1 / 3)) is None


def test_user_defined_types_and_count_zero():
    fpgas = {"fpgas": [{"id": "a", "slots": 1}, {"id": "b", "slots": 2}], "licenses": []}
    pool = PartitionPool([node(0, pool=fpgas)])
    got = pool.allocate(req(resources={"fpgas": 2}))
    assert [i for i, _ in got.ranks[0][1]["fpgas"]] == ["b"]  # best fit: one instance holds 2
    assert "licenses=1 can never fit" in pool.never_fits(req(resources={"licenses": 1}))
    why = pool.never_fits(req(resources={"tpus": 1}))
    assert why.startswith("resources={'tpus': ...}: type 'tpus' is not declared")


def test_affinity_picks_exactly_those_ids():
    pool = PartitionPool([node(0), node(1)])
    a = pool.allocate(req(cpus=2, cpu_affinity=[1, 3], placement="HOST_NAME", host_name="n1"))
    assert names(a) == ["n1"] and [i for i, _ in a.ranks[0][1]["cpus"]] == [1, 3]
    assert pool.allocate(req(cpu_affinity=[1], placement="HOST_NAME", host_name="n1")) is None
    assert "policy.cpu_affinity=[9]" in pool.never_fits(req(cpu_affinity=[9]))
    twice = req(cpus=2, cpu_affinity=[0, 0])  # (the client refuses it; the agent never grants
    assert pool.allocate(twice) is None  # one instance twice)
    assert pool.never_fits(twice) == "policy.cpu_affinity=[0, 0]: names an id more than once"
    g = pool.allocate(req(gpus=1, gpu_affinity=[1]))
    assert [i for i, _ in g.ranks[0][1]["gpus"]] == [1]


def test_multi_rank_all_or_nothing():
    pool = PartitionPool([node(i, cores=2, gpus=0) for i in range(3)])
    a = pool.allocate(req(cpus=2, ranks=2))
    assert sorted(names(a)) == ["n0", "n1"]
    assert pool.allocate(req(cpus=2, ranks=2)) is None  # one node left: nothing taken
    assert pool.nodes[2].free_cpus == 2
    assert "x 4 ranks can never fit" in pool.never_fits(req(cpus=2, ranks=4))


def test_a_unit_that_can_never_fit_once_a_node_is_lost_is_told_why_it_was_lost():
    """A unit that arrives after a node was lost and needs it: its reason names the node and
    why it was lost (the agent's on_node_lost fails the units it already had the same way)."""
    pool = PartitionPool([node(0, cores=2, gpus=0), node(1, cores=2, gpus=0)])
    assert pool.never_fits(req(ranks=3)) is None
    assert pool.remove_node(1, "node n1 lost: its daemon exited with code -9")
    why = pool.never_fits(req(ranks=3))
    assert "can never fit" in why and "1 node(s) (1 lost: node n1 lost: its daemon exited" in why
    assert not pool.remove_node(1, "again")  # (gone already: said once)


def test_a_node_pool_matches_a_plain_model_under_random_takes_and_gives():
    """The node pool's compact state (bit masks, partly held instances, shared layouts) against
    a plain dict of free thousandths an instance, over random whole, fractional, pinned and
    multi-slot requests taken and given back: the same grants fit, the same capacity is left,
    and every instance is exactly free again at the end."""
    rng = random.Random(5)
    extra = {"fpgas": [{"id": "a", "slots": 1}, {"id": "b", "slots": 3}]}
    n = NodePool(node(0, cores=8, gpus=3, pool=extra))
    model = {t: dict(c) for t, c in n.cap.items()}
    held = []
    for _ in range(3000):
        if held and rng.random() < 0.45:
            grant = held.pop(rng.randrange(len(held)))
            n.give(grant)
            for t, got in grant.items():
                for i, a in got:
                    model[t][i] += a
        else:
            r = {
                "cpus": rng.choice([0, 1, 1, 2, 3, 0.5, 0.25]),
                "gpus": rng.choice([0, 0, 1, 2, 0.5, 1 / 3]),
                "fpgas": rng.choice([0, 0, 0, 1, 2, 0.5]),
            }
            pin = rng.sample(range(8), rng.choice([1, 2])) if rng.random() < 0.1 else None
            if pin is not None:
                r["cpus"] = len(pin)
            grant = n.take(r, cpu_ids=pin)
            if grant is not None:
                held.append(grant)
                for t, got in grant.items():
                    assert sum(a for _, a in got) >= need_of(r[t]) - (r[t] >= 1) * SCALE
                    for i, a in got:
                        assert model[t][i] >= a, (t, i, a, model[t])
                        model[t][i] -= a
            else:  # (nothing changed, and the plain model agrees it does not fit whole)
                k = int(r["cpus"]) if r["cpus"] >= 1 and pin is None else 0
                assert n.free == model and (not k or n.whole["cpus"] < k or r["gpus"] or r["fpgas"])
        assert n.free == model
        assert n.whole == {t: sum(f // SCALE for f in model[t].values()) for t in model}
    for grant in held:
        n.give(grant)
    assert n.free == n.cap


def test_an_idle_node_of_128_cores_holds_about_a_kilobyte():
    """Issue 55's memory: nodes of one shape share their layout, and a node holds only what is
    in use (its mask ints and the instances partly held), not a dict entry an instance; it is
    as small again once a full load has come and gone.  Per node: the slope between a pool of
    32 and one of 96 nodes (what the interpreter keeps whatever the size, its free lists,
    cancels out)."""

    def measured(n: int) -> tuple[int, int, int]:
        nodes = [node(i, cores=128, gpus=8) for i in range(n)]
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            pool = PartitionPool(nodes)
            made = tracemalloc.get_traced_memory()[0] - before
            held = []
            for k in itertools.count():  # (GPUs, whole and half, with cores; then cores)
                a = pool.allocate(req(gpus=rng_gpus(k))) or pool.allocate(req())
                if a is None:
                    break
                held.append(a)
            assert pool.free_cpus == 0 and all(n.whole["gpus"] == 0 for n in pool.nodes)
            loaded = tracemalloc.get_traced_memory()[0] - before
            for a in held:
                pool.release(a.aid)
            held.clear()
            cycled = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert pool.free_cpus == n * 128
        return made, loaded, cycled

    small, large = measured(32), measured(96)
    made, loaded, cycled = ((b - a) / 64 for a, b in zip(small, large))
    assert made < 2048, f"{made:.0f} bytes a node idle"  # (before: ~20 KB)
    assert loaded > 128 * 200, f"{loaded:.0f} bytes a node: not a full load"  # (a grant a core)
    assert cycled < 2048, f"{cycled:.0f} bytes a node after a full load"  # (before: ~34 KB)


def rng_gpus(k: int):
    return (0, 0, 0, 0.5, 1)[k % 5]  # (mostly cores, some whole and half GPUs)


def test_large_units_are_not_starved_by_small_ones():
    """Small units arrive behind a 4-core one on a 4-core node and keep overtaking it while
    cores free up one at a time; aging stops that after MAX_OVERTAKES."""
    sched = Scheduler([node(0, cores=4, gpus=0)])
    running, started = [], []
    sched.queue.append(UnitRecord.at_agent(dict(req(cpus=1), uid="s0")))
    sched.queue.append(UnitRecord.at_agent(dict(req(cpus=4), uid="big")))
    for i in range(1, 500):
        sched.queue.append(UnitRecord.at_agent(dict(req(cpus=1), uid=f"s{i}")))
    for _ in range(2000):
        for unit, alloc in list(sched.ready()):
            running.append((unit, alloc))
            started.append(unit["uid"])
        if "big" in started:
            break
        unit, alloc = running.pop(0)  # the oldest running unit ends
        sched.release(alloc)
    assert "big" in started, "the 4-core unit never started"
    overtook = started.index("big") - 1  # small ones started after it was queued
    assert 0 < overtook <= MAX_OVERTAKES


def test_a_higher_priority_after_a_sort_is_sorted_in_too():
    """Priorities arriving in two batches: the second batch's high unit goes ahead of the low
    ones the first sort left at the tail (it was appended behind them, and the third of three
    high units started after a low one)."""
    sched = Scheduler([node(0, cores=1, gpus=0)])

    def arrive(*units):
        for uid, p in units:
            sched.enqueue(UnitRecord.at_agent(dict(req(cpus=1), uid=uid, priority=p)))
        if sched.unsorted:
            sched.reorder()

    arrive(("low0", 0), ("low1", 0))
    assert not sched.unsorted
    arrive(("high0", 5), ("high1", 5))
    arrive(("high2", 5))
    arrive(("mid", 3), ("low2", 0))
    assert [u["uid"] for u in sched.queue] == [
        "high0",
        "high1",
        "high2",
        "mid",
        "low0",
        "low1",
        "low2",
    ]
    # taken ahead by a lane (out of the queue), the tail is still the lowest held
    taken = [sched.queue.popleft() for _ in range(len(sched.queue))]
    assert taken[-1]["uid"] == "low2"
    sched.enqueue(UnitRecord.at_agent(dict(req(cpus=1), uid="high3", priority=5)))
    assert sched.unsorted
