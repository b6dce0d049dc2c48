"""Fault injection: kill -9 at random moments; every unit still ends exactly once, as its
ground-truth log says (tests/faults.py)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

import pilot as rp
from tests.conftest import active_pilot
from tests.faults import agent_pid, check_exactly_once, kill, processes_with, truth_unit


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_agent_killed_mid_run(session, tmp_path, seed):
    """The agent of one partition dies (SIGKILL) while units run there: its running units are
    killed and end FAILED, its queued ones run in the other partition, nothing runs twice."""
    rng = random.Random(seed)
    log = str(tmp_path / "truth.log")
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    victim, other = pilot.partitions
    units = umgr.submit_units([truth_unit(log, sleep=0.2) for _ in range(30)])
    pid = agent_pid(pilot, victim)
    deadline = time.monotonic() + 20
    while not any(u.state == rp.EXECUTING and u.part == victim.uid for u in units):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 0.5))
    kill(pid)
    assert victim.wait(timeout=30) == rp.FAILED and "agent exited" in victim.reason
    umgr.wait_units(timeout=60)
    states = check_exactly_once(session, units, log)
    assert states[rp.DONE] >= 20, states  # most ran, in one partition or the other
    assert any(u.part == other.uid and u.state == rp.DONE for u in units)
    assert (
        processes_with(f"PILOT_SESSION_ID={session.uid}", f"PILOT_PARTITION_ID={victim.uid}") == []
    )  # no orphan runs on
    assert other.state == rp.ACTIVE and pilot.state == rp.ACTIVE


KILLED_CLIENT = r"""
import os, random, sys, time
sys.path.insert(0, sys.argv[1])
import pilot as rp
from tests.faults import truth_unit
s = rp.Session()
pd = rp.ComputePilotDescription(resource="local.localhost", cores=2, runtime=5,
                                parts=[rp.ComputePartitionDescription(cores=1)] * 2)
pilot = rp.PilotManager(s).submit_pilots(pd)
for part in pilot.partitions:
    part.wait(rp.ACTIVE, timeout=30)
umgr = rp.UnitManager(s)
umgr.add_pilots(pilot)
print(s.uid, flush=True)
units = umgr.submit_units([truth_unit(sys.argv[2], sleep=0.05) for _ in range(300)])
time.sleep(random.Random(int(sys.argv[3])).uniform(0.0, 0.3))
os._exit(0)  # killed right after submit: no close, no flush
"""


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_client_killed_right_after_submit(make_session, tmp_path, seed):
    """A new client attaches: every unit the store knows ends exactly once, none ran twice,
    and no unit ran that the store does not know (it was persisted before it was sent)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    log = str(tmp_path / "truth.log")
    out = subprocess.run(
        [sys.executable, "-c", KILLED_CLIENT, ROOT, log, str(seed)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert out.returncode == 0, out.stderr
    session = make_session(uid=out.stdout.split()[0])
    (pilot,) = rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    units = umgr.get_units()
    umgr.wait_units(timeout=120)
    states = check_exactly_once(session, units, log)
    from tests.faults import read_truth

    starts, _ = read_truth(log)
    known = {u.uid for u in units}
    assert set(starts) <= known, f"ran but unknown to the store: {sorted(set(starts) - known)[:5]}"
    assert states[rp.DONE] == len(units), states  # nothing was lost on the way
    assert pilot.state == rp.ACTIVE


@pytest.mark.parametrize("seed", [1, 2])
def test_node_daemon_killed_mid_run(session, tmp_path, seed):
    """A node's daemon dies (SIGKILL): units there end FAILED and their processes do not run
    on, its partition goes on with its other node, nothing runs twice."""
    import json
    import os

    rng = random.Random(seed)
    log = str(tmp_path / "truth.log")
    parts = [rp.ComputePartitionDescription(nodes=2), rp.ComputePartitionDescription(nodes=2)]
    pilot, umgr = active_pilot(session, parts=parts, resource="local.nodes4")
    victim, other = pilot.partitions
    units = umgr.submit_units([truth_unit(log, sleep=0.3) for _ in range(40)])
    node = victim.resources["nodes"][0]
    with open(os.path.join(pilot.sandbox, "daemons.json")) as f:
        daemon = json.load(f)[str(node["index"])]
    deadline = time.monotonic() + 20
    while not any(u.state == rp.EXECUTING and u.part == victim.uid for u in units):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 0.4))
    kill(daemon["pid"])
    umgr.wait_units(timeout=90)
    states = check_exactly_once(session, units, log)
    assert states[rp.DONE] >= 25, (states, Counter(u.reason for u in units))
    for u in units:
        if u.state != rp.DONE:
            assert u.node == node["name"] and f"node {node['name']} lost" in u.reason, u
    assert victim.state == rp.ACTIVE
    assert (
        processes_with(f"PILOT_SESSION_ID={session.uid}", f"PILOT_NODE_NAME={node['name']}") == []
    )  # no unit runs on there
    assert other.state == rp.ACTIVE and pilot.state == rp.ACTIVE


def test_bootstrap_killed_mid_run(session, tmp_path):
    """The pilot job's first process dies (SIGKILL): the pilot and its partitions end FAILED,
    every unit ends once, with a reason, and no unit process is left running."""
    log = str(tmp_path / "truth.log")
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    units = umgr.submit_units([truth_unit(log, sleep=0.2) for _ in range(20)])
    deadline = time.monotonic() + 20
    while sum(u.state == rp.DONE for u in units) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(pilot.job.pid, signal.SIGKILL)
    assert pilot.wait(timeout=30) == rp.FAILED
    umgr.wait_units(timeout=30)
    check_exactly_once(session, units, log)
    deadline = time.monotonic() + 10  # agents see their parent gone and end their units
    while processes_with(f"PILOT_SESSION_ID={session.uid}", f"PILOT_PILOT_ID={pilot.uid}"):
        assert time.monotonic() < deadline, processes_with(
            f"PILOT_SESSION_ID={session.uid}", f"PILOT_PILOT_ID={pilot.uid}"
        )
        time.sleep(0.1)


def test_reconfig_storm(session, tmp_path):
    """Partitions stopped and started while units run: queued units move, running ones end
    CANCELED or DONE as their processes did, none is lost or runs twice."""
    log = str(tmp_path / "truth.log")
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    units = umgr.submit_units([truth_unit(log, sleep=0.05) for _ in range(150)])
    rng = random.Random(7)
    for _ in range(12):
        live = [p for p in pilot.partitions if not p.final]
        stop = rng.choice(live).uid
        pilot.reconfig(stop=stop, start=[rp.ComputePartitionDescription(cores=1)])
        time.sleep(rng.uniform(0.05, 0.3))
    umgr.wait_units(timeout=120)
    states = check_exactly_once(session, units, log)
    assert states[rp.DONE] >= 100, states
    assert sum(not p.final for p in pilot.partitions) == 2


@pytest.mark.parametrize("seed", [1, 2])
def test_database_killed_and_restarted_mid_run(make_session, tmp_path, mongo_server, seed):
    """MongoDB dies (SIGKILL) while units run and comes back: no unit is lost or doubled, and
    the store ends with every unit's history exactly once (retried writes add nothing)."""
    import signal

    from tests.mongo_server import MongoServer

    if mongo_server[0] == "external":
        pytest.skip("MONGODB_URI: cannot kill an external server; covered with SecantusDB")
    rng = random.Random(seed)
    storage = tmp_path / "db"
    storage.mkdir()
    server = MongoServer(str(storage))
    server.start()
    try:
        log = str(tmp_path / "truth.log")
        session = make_session(database_url=server.database_url())
        pilot, umgr = active_pilot(session, parts=((1,), (1,)))
        units = umgr.submit_units([truth_unit(log, sleep=0.02) for _ in range(200)])
        time.sleep(rng.uniform(0.2, 1.0))
        server.stop(signal.SIGKILL)
        time.sleep(rng.uniform(0.5, 1.5))
        server.start()  # same port, same data directory
        umgr.wait_units(timeout=120)
        states = check_exactly_once(session, units, log)
        assert states == {rp.DONE: 200}, states
        assert not session.writer.unpersisted
        session.close()  # (while its database is up: else its last records wait for it)
    finally:
        server.stop()


def test_writes_that_land_without_their_answer_are_stored_once(make_session, tmp_path, mongo_url):
    """A MongoDB write can land and its answer be lost (the connection drops after the server
    applied it): the writer tries the same batch again, and every unit's history is stored once
    (every third batch here lands, then fails as a dropped connection does)."""
    from pymongo.errors import AutoReconnect

    log = str(tmp_path / "truth.log")
    session = make_session(database_url=mongo_url)
    store = session.writer.store
    write = store.write_batch
    landed = []

    def lands_then_fails(batch):
        refused = write(batch)
        landed.append(len(batch))
        if len(landed) % 3 == 0:
            raise AutoReconnect("connection closed (after the server applied the write)")
        return refused

    store.write_batch = lands_then_fails
    try:
        pilot, umgr = active_pilot(session, parts=((1,), (1,)))
        units = umgr.submit_units([truth_unit(log, sleep=0.01) for _ in range(120)])
        umgr.wait_units(timeout=120)
        states = check_exactly_once(session, units, log)
        assert states == {rp.DONE: 120}, states
        assert len(landed) >= 6, landed  # (the failure was met, more than once)
    finally:
        del store.write_batch


def test_restartable_units_run_again_when_their_agent_dies(session, tmp_path):
    """Units marked restartable may run again elsewhere when their agent dies after starting
    them: they all end DONE, and the history of each one that ran twice shows the restart."""
    log = str(tmp_path / "truth.log")
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    victim, _ = pilot.partitions
    units = umgr.submit_units([truth_unit(log, sleep=0.3, restartable=True) for _ in range(10)])
    pid = agent_pid(pilot, victim)
    deadline = time.monotonic() + 20
    while not any(u.state == rp.EXECUTING and u.part == victim.uid for u in units):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    kill(pid)
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 10
    from tests.faults import read_truth

    starts, ends = read_truth(log)
    again = [u for u in units if starts[u.uid] > 1]
    assert again, "the unit killed with its agent ran again"
    for u in again:  # (its EXECUTING may have died with the agent before it was sent)
        states = [s for s, _ in u.history]
        pairs = set(zip(states, states[1:]))
        assert {(rp.EXECUTING, rp.SCHEDULING), (rp.QUEUED, rp.SCHEDULING)} & pairs, states
    assert all(ends[u.uid] >= 1 for u in units)


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_agent_zygote_killed_mid_run(session, tmp_path):
    """The agent zygote dies (SIGKILL) while a partition runs units: the agents it forked are
    the bootstrap's now and go on (every unit DONE, exactly once); a reconfig afterwards stops
    that partition (as asked) and starts one with another zygote, which becomes ACTIVE."""
    log = str(tmp_path / "truth.log")
    pilot, umgr = active_pilot(session, parts=((1,),))
    (part,) = pilot.partitions
    pid = agent_pid(pilot, part)
    zygote = _ppid(pid)
    units = umgr.submit_units([truth_unit(log, sleep=0.05) for _ in range(40)])
    deadline = time.monotonic() + 20
    while not any(u.state == rp.DONE for u in units):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    kill(zygote)
    umgr.wait_units(timeout=60)
    assert check_exactly_once(session, units, log)[rp.DONE] == 40
    assert part.state == rp.ACTIVE and _ppid(pid) != zygote  # adopted, still running
    (new,) = pilot.reconfig(stop=part.uid, start=[rp.ComputePartitionDescription(cores=1)])
    assert part.wait(timeout=30) == rp.CANCELED  # the adopted agent stops as asked
    assert part.reason == "stopped by reconfig"
    assert new.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, new.reason
    more = umgr.submit_units([truth_unit(log, sleep=0.0, partition=new.uid) for _ in range(3)])
    assert umgr.wait_units([u.uid for u in more], timeout=30) == [rp.DONE] * 3
    pilot.cancel()
    assert pilot.wait(timeout=30) in rp.FINAL and new.wait(timeout=30) in rp.FINAL


def test_a_zygote_that_dies_fails_the_agents_it_had_not_forked(tmp_path):
    """An agent asked of a zygote that dies before forking it ends at once, the zygote's death
    and its last words as the reason (before: its partition stayed STARTING)."""
    from pilot.partition.agents.forked import AgentForker

    launcher = AgentForker(str(tmp_path))
    first = launcher.zygote  # (its Popen: killed below only while it has not been reaped)
    zygote = first.pid
    try:
        os.kill(zygote, signal.SIGSTOP)  # it cannot fork what is asked now
        proc = launcher.spawn(str(tmp_path / "a.json"), str(tmp_path / "a.log"))
        kill(zygote)
        ended = proc.wait(10)
        assert ended is not None and ended.code is None
        assert "could not be forked: the agent zygote exited with code -9" in ended.why
        assert launcher.fd is None
        again = launcher.spawn(str(tmp_path / "b.json"), str(tmp_path / "b.log"))  # a new one
        assert launcher.zygote.pid != zygote and launcher.fd is not None
        ended = again.wait(20)  # (no such config: that agent fails, and says so)
        assert ended is not None and ended.code == 1, ended
    finally:
        launcher.close()
        if first.poll() is None:  # (the test failed before it was killed)
            first.kill()
            first.wait()
