"""local.sim: simulated nodes (agent/node/sim.py), real node daemons many to a process.

What it simulates: a unit `sleep X` holds its slots X seconds, any other ends at once, exit 0;
what it does not: processes, output, sandboxes.  Everything else is the real pilot: bring-up,
the channel table and its fan-out, agents and their placement, node loss, halt."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest
import zmq

import pilot as rp
from pilot.agent.node.sim import HostPoller
from pilot.pmgr.core import reaper
from pilot.pmgr.observe.top_snapshot import Source
from pilot.pmgr.observe.top_target import resolve
from tests.conftest import active_pilot

CPD, CUD = rp.ComputePartitionDescription, rp.ComputeUnitDescription


def sim(session, nodes: int, parts: int = 2, **kw):
    return active_pilot(
        session,
        parts=[CPD(nodes=nodes // parts)] * parts,
        resource="local.sim",
        nodes=nodes,
        runtime=10,
        **kw,
    )


def test_sleep_holds_its_slots_and_anything_else_ends_at_once(session):
    pilot, umgr = sim(session, 8)
    assert len(pilot.nodes) == 8 and {n["state"] for n in pilot.nodes.values()} == {"up"}
    t0 = time.monotonic()
    quick = umgr.submit_units([CUD(executable="/bin/echo", arguments=[str(i)]) for i in range(500)])
    assert umgr.wait_units([u.uid for u in quick], timeout=60) == [rp.DONE] * 500
    # 8 nodes of 128 cores: a wave of 16 units of 64 cores, `sleep 1.5`, twice over
    sleeps = umgr.submit_units(
        [CUD(executable="/bin/sleep", arguments=["1.5"], cores=64) for _ in range(32)]
    )
    t1 = time.monotonic()
    assert umgr.wait_units([u.uid for u in sleeps], timeout=60) == [rp.DONE] * 32
    took = time.monotonic() - t1
    assert 3.0 <= took < 6.0, took  # two waves of 1.5 s, not one, not a process's start each
    assert all(u.exit_code == 0 for u in sleeps)
    assert {u.node for u in sleeps} == {n["name"] for n in pilot.nodes.values()}
    assert time.monotonic() - t0 < 30


def test_a_node_lost_among_many_fails_only_its_units(session, tmp_path):
    """One node's daemon ended as its process killed would (agent/node/sim.py: SIGUSR1 and the
    kill file): the bootstrap loses it after node_timeout, the units running there end FAILED
    with the reason, and every other node's units end DONE (its partition's too: the partition
    goes on without the node)."""
    import yaml

    cfg = tmp_path / "sim.yaml"
    with open(os.path.join(os.path.dirname(rp.__file__), "..", "configs", "local.yaml")) as f:
        base = yaml.safe_load(f)["sim"]
    cfg.write_text(yaml.safe_dump(dict(base, node_timeout=3)))
    pilot, umgr = active_pilot(
        session, parts=[CPD(nodes=4)] * 4, resource=str(cfg), nodes=16, runtime=10
    )
    units = umgr.submit_units([CUD(executable="sleep", arguments=["6"], cores=128)] * 16)
    umgr.wait_units([u.uid for u in units], state=rp.EXECUTING, timeout=60)
    victim = units[5].node
    hint = next(int(i) for i, n in pilot.nodes.items() if n["name"] == victim)
    host = os.path.join(pilot.sandbox, "nodes", "sim.0.json")
    with open(host + ".kill", "w") as f:
        json.dump([hint], f)
    (pid,) = [p for p in reaper.session_processes(session.uid)
              if "pilot.agent.node.sim" in open(f"/proc/{p}/cmdline").read()]  # fmt: skip
    t0 = time.monotonic()
    os.kill(pid, signal.SIGUSR1)
    umgr.wait_units([units[5].uid], timeout=30)
    # `pilot top`'s node view and partition rows (summed from it): the lost node holds
    # nothing, though its agent had said it was busy (its unit FAILED with it)
    source = Source(resolve(f"{session.uid}/{pilot.uid}"))
    try:
        deadline = time.monotonic() + 5
        while True:
            snap = source.poll()
            row = next((r for r in snap.nodes if r[1] == victim), None)
            if (row is not None and row[2] == "down") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert row is not None and row[2] == "down" and row[5:7] == [0, 0], row
    finally:
        source.close()
    umgr.wait_units(timeout=60)
    lost = [u for u in units if u.state == rp.FAILED]
    assert [u.node for u in lost] == [victim], [(u.node, u.state, u.reason) for u in units]
    assert victim in lost[0].reason and "lost" in lost[0].reason, lost[0].reason
    assert time.monotonic() - t0 < 3 + 3 + 5  # node_timeout + REJOIN, and a margin
    assert Counter(u.state for u in units) == {rp.DONE: 15, rp.FAILED: 1}
    assert all(p.state == rp.ACTIVE for p in pilot.partitions) and pilot.state == rp.ACTIVE


def test_a_simulated_pilot_too_large_for_this_machine_is_refused_at_submit(session):
    with pytest.raises(ValueError, match=r"simulated nodes need about [\d.]+ GiB"):
        rp.PilotManager(session).submit_pilots(
            rp.ComputePilotDescription(resource="local.sim", nodes=90_000, runtime=1)
        )


def test_the_hosts_poller_names_the_sockets_with_messages_and_only_those():
    """HostPoller (the header of agent/node/sim.py): epoll on the sockets' ZMQ_FDs, then
    ZMQ_EVENTS; a socket left with messages after a turn is found when named again."""
    ctx = zmq.Context()
    poller = HostPoller()
    pairs = []
    try:
        for i in range(300):
            a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
            a.bind(f"inproc://pair{i}")
            b.connect(f"inproc://pair{i}")
            poller.register(b)
            pairs.append((a, b))
        assert poller.poll(0) == []
        t0 = time.monotonic()
        assert poller.poll(100) == [] and time.monotonic() - t0 >= 0.09  # (it waited)
        some = pairs[::7]
        for a, _ in some:
            a.send_multipart([b"one"])
            a.send_multipart([b"two"])
        assert {s for s, _ in poller.poll(5000)} == {b for _, b in some}
        for _, b in some:  # one of two taken: named again, each is found again
            assert b.recv() == b"one"
        poller.look_again([b for _, b in some])
        assert {s for s, _ in poller.poll(0)} == {b for _, b in some}
        for _, b in some:
            assert b.recv() == b"two"
        poller.look_again([b for _, b in pairs])
        assert poller.poll(0) == []
        late = pairs[5]  # a message while it waits ends the wait
        timer = threading.Timer(0.2, lambda: late[0].send(b"late"))
        timer.start()
        t0 = time.monotonic()
        assert poller.poll(5000) == [(late[1], zmq.POLLIN)] and time.monotonic() - t0 < 4
        timer.join()
        poller.unregister(late[1])
        late[0].send(b"unheard")
        poller.look_again([late[1]])
        assert poller.poll(100) == []
        with pytest.raises(KeyError):
            poller.unregister(late[1])
    finally:
        for a, b in pairs:
            a.close(0)
            b.close(0)
        ctx.term()
