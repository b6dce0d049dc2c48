"""Liveness that tolerates what networks do (pilot/wire/liveness.py, partition/nodes/pulse.py,
pmgr/batch/slurm.py).

- An outage of a node's link shorter than node_timeout never ends the node, though TCP's
  back-off stretches the silence on the node's data channels well past node_timeout.
- Silence is not death: a node is lost for silence only while the bootstrap hears another
  one; every node silent at once, or the bootstrap frozen for longer than node_timeout, ends
  no node and no unit (the daemons run their units on and report when it speaks again).
- A failed batch-system query never ends a pilot: SLURM's controller unreachable for a few
  polls is asked again (back-off); one that stays unreachable ends it with that reason.
The namespace tests need root (tests/netns.py); the frozen bootstrap runs on logical nodes;
the SLURM tests a local SLURM (tests/slurm.sh, root).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import pilot as rp
from pilot.pmgr.core import reaper
from tests import netns
from tests.conftest import ROOT
from tests.faults import check_exactly_once, truth_unit
from tests.test_netns import resource
from tests.test_nodes import nodes4, nodes4_variant
from tests.test_slurm import (
    _why_not as slurm_unavailable,
    slurm,  # noqa: F401 (the fixture: a local SLURM, tests/slurm.sh)
)

needs_netns = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
needs_slurm = pytest.mark.skipif(slurm_unavailable() is not None, reason=str(slurm_unavailable()))
FAKE_SQUEUE = """#!/bin/sh
# squeue as a controller that cannot be reached: while FILE holds a count > 0 (or "always")
n=$(cat FILE 2>/dev/null || echo 0)
if [ "$n" = always ] || [ "$n" -gt 0 ]; then
  [ "$n" = always ] || echo $((n - 1)) > FILE
  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2
  exit 1
fi
exec REAL "$@"
"""


@pytest.fixture
def hosts():
    with netns.TestHosts(3) as h:
        yield h
    assert not h.left(), "namespaces left behind"


def scenario(hosts, *args: str) -> dict:
    out = hosts.run_in(
        hosts.ctl,
        [sys.executable, "-m", "tests.scenarios.liveness_client", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    left = reaper.session_processes(result["session"])
    if left:
        reaper.kill_session_processes(result["session"])
    assert not left, f"processes left behind: {left}"
    return result


def test_a_pulse_connection_is_closed_after_half_the_node_timeout_within_bounds():
    """ZeroMQ closes a silent pulse connection after node_timeout / 2, at least 1.5 s (an
    outage's end found fast) and at most 5 s (a loaded machine's late pings close none)."""
    from pilot.wire import liveness

    got = [liveness.dead_ms(t) for t in (1, 2, 4, 6, 10, 60)]
    assert got == [1500, 1500, 2000, 3000, 5000, 5000]


def test_the_pulse_slows_down_as_a_pilot_grows_so_the_bootstrap_hears_a_bounded_rate():
    """Up to 1,024 nodes every 0.5 s; beyond, at most `pulse_rate` heartbeats a second reach
    the bootstrap; never longer than node_timeout / 4 or 5 s; REJOIN and ZeroMQ's ping follow
    the period (three times its growth; a third of the dead time at most)."""
    from pilot.wire import liveness

    assert [liveness.period(n, 60) for n in (1, 4, 1024, 2048, 4096, 9408, 100_000)] == [
        0.5, 0.5, 0.5, 1.0, 2.0, 9408 / 2048, 5.0,
    ]  # fmt: skip
    assert liveness.period(4096, 10) == 2.0 and liveness.period(10_000, 10) == 2.5
    assert liveness.period(4096, 1) == 0.5  # (a short node_timeout: never below 0.5 s)
    assert liveness.period(64, 60, rate=16) == 4.0
    assert liveness.rejoin(0.5) == 3.0 and liveness.rejoin(2.0) == 7.5
    assert liveness.tolerance(10, 2.0) == 17.5 and liveness.tolerance(10) == 13.0
    assert liveness.ping_ms(10) == 500 and liveness.ping_ms(10, 2.0) == 1666
    assert liveness.ping_ms(60, 2.0) == 1666 and liveness.ping_ms(3, 2.0) == 500


def test_the_bootstraps_pulse_socket_keeps_no_timer_per_connection():
    """libzmq cancels a timer by walking every timer of its I/O thread: a ZeroMQ heartbeat on
    the bootstrap's ROUTER (or a TTL the daemons ask it to keep) is a timer per connection,
    made and cancelled with every message, O(nodes) a message.  The ROUTER sets none (TCP
    keepalive and TCP_MAXRT instead); the daemon's DEALER pings, closes a dead link, and asks
    for no TTL."""
    import zmq

    from pilot.wire import liveness

    ctx = zmq.Context()
    try:
        router = liveness.pulse_socket(ctx, zmq.ROUTER, 10, 2.0)
        dealer = liveness.pulse_socket(ctx, zmq.DEALER, 10, 2.0)
        assert router.getsockopt(zmq.HEARTBEAT_IVL) == 0
        assert router.getsockopt(zmq.HEARTBEAT_TIMEOUT) in (-1, 0)
        assert router.getsockopt(zmq.TCP_KEEPALIVE) == 1
        assert router.getsockopt(zmq.TCP_MAXRT) == 35_000  # (twice the tolerance, 17.5 s)
        assert dealer.getsockopt(zmq.HEARTBEAT_IVL) == 1666
        assert dealer.getsockopt(zmq.HEARTBEAT_TIMEOUT) == 5000
        assert dealer.getsockopt(zmq.HEARTBEAT_TTL) == 0
        router.close()
        dealer.close()
    finally:
        ctx.term()


@needs_netns
@pytest.mark.parametrize(
    "seconds,pulse_rate", [("4.2", None), ("5.6", None), ("4.2", 1)], ids=["4.2", "5.6", "4.2-slow"]
)
def test_an_outage_shorter_than_node_timeout_ends_no_node(hosts, tmp_path, seconds, pulse_rate):
    """4.2 s (and 5.6 s) of silent drops on node 2's link, node_timeout 6 s: on a plain TCP
    connection the silence after 4.2 s is ~7 s (retransmission back-off), yet the node stays
    and every unit ends DONE exactly once, those on that node included.  So with a pulse of
    1.5 s (pulse_rate 1: the longest node_timeout 6 s allows)."""
    res = resource(
        tmp_path, hosts, node_timeout=6, **({"pulse_rate": pulse_rate} if pulse_rate else {})
    )
    victim = hosts.hosts[1]
    r = scenario(hosts, "outage", res, hosts.ctl, "2", victim, seconds)
    assert r["silent_s"] >= float(seconds)
    assert "node.lost" not in r["log"], r["log"][-3000:]
    assert r["states"] == {"DONE": 18}, (r["states"], r["reasons"])
    assert r["part"] == ["ACTIVE", None]
    assert r["victim_units"] >= 2  # it ran units before, during and after the outage
    for name, text in r["node_logs"].items():
        assert "halted (no word" not in text, (name, text[-2000:])


@needs_netns
@pytest.mark.parametrize("node_timeout,pulse_rate", [(3, None), (8, 1)], ids=["0.5s", "2s"])
def test_silent_nodes_are_lost_while_another_is_heard(hosts, tmp_path, node_timeout, pulse_rate):
    """The links of nodes 2 and 3 drop everything while node 1's carries on: those two are
    lost after node_timeout + REJOIN (the bootstrap hears node 1 meanwhile: they are gone,
    not it), their units end FAILED with the reason naming them; the partition goes on with
    node 1, whose units run on; every unit ends once.  So with a pulse every 2 s (pulse_rate
    1, node_timeout 8 s), the REJOIN that comes with it (7.5 s) named in the reason."""
    from pilot.wire import liveness

    more = {"pulse_rate": pulse_rate} if pulse_rate else {}
    res = resource(tmp_path, hosts, node_timeout=node_timeout, **more)
    period = liveness.period(hosts.k, node_timeout, pulse_rate or liveness.PULSE_RATE)
    r = scenario(hosts, "silent", res, hosts.ctl, f"2:{hosts.hosts[1]}", f"3:{hosts.hosts[2]}")
    assert r["lost"], r
    for state, reason in r["lost"]:
        assert state == "FAILED" and "lost" in reason, r["lost"]
        assert f"no word from its daemon for {node_timeout} s (node_timeout)" in reason, reason
        assert f"nor in the {liveness.rejoin(period):g} s more" in reason, reason
        assert f"while node {hosts.hosts[0]} was heard" in reason, reason
    assert r["part"] == ["ACTIVE", None], r["part"]
    assert r["elsewhere"] in (["EXECUTING"], []), r["elsewhere"]
    tolerance = liveness.tolerance(node_timeout, period)
    assert r["ended_s"] < tolerance + 15, r["ended_s"]  # tolerance, then a bounded teardown
    assert r["ended_s"] > tolerance - period - 0.5, r["ended_s"]  # (not lost before it)
    assert set(r["states"]) <= {"FAILED", "CANCELED"} and sum(r["states"].values()) == 12
    assert r["final"][0] == "CANCELED", r["final"]  # (canceled by the scenario, at its end)


@needs_netns
def test_every_node_silent_at_once_ends_no_node(hosts, tmp_path):
    """Every node's link drops everything for 8 s, node_timeout 3 s: the bootstrap hears none
    of them, which says nothing of the nodes (its own link is the likely cause), so none is
    lost; their daemons run their units on, and every unit ends DONE exactly once."""
    res = resource(tmp_path, hosts, node_timeout=3)
    r = scenario(hosts, "outage", res, hosts.ctl, "1,2,3", hosts.hosts[0], "8")
    assert r["silent_s"] >= 8.0
    assert "node.lost" not in r["log"], r["log"][-3000:]
    assert "node.silent: no word from any of the 3 live daemon(s)" in r["log"], r["log"][-3000:]
    assert r["states"] == {"DONE": 18}, (r["states"], r["reasons"])
    assert r["part"] == ["ACTIVE", None]


def read_node_logs(pilot) -> str:
    text = ""
    for name in sorted(os.listdir(os.path.join(pilot.sandbox, "nodes"))):
        with open(os.path.join(pilot.sandbox, "nodes", name)) as f:
            text += f.read()
    return text


def freeze_bootstrap(session, tmp_path, freeze: float, node_timeout: float, **over) -> dict:
    """A 4-node pilot whose bootstrap is stopped (SIGSTOP) for `freeze` s while units run, some
    ending in the freeze; what came of it (the units checked exactly once)."""
    resource = nodes4_variant(tmp_path, node_timeout=node_timeout, **over)
    pilot, umgr = nodes4(session, resource=resource)
    log = str(tmp_path / "truth.log")
    sleep = freeze / 2  # (the first units end during the freeze, the next start after it)
    units = umgr.submit_units([truth_unit(log, sleep=sleep) for _ in range(12)])
    deadline = time.monotonic() + 20
    while sum(u.state == rp.EXECUTING for u in units) < 8:
        assert time.monotonic() < deadline, [u.state for u in units]
        time.sleep(0.02)
    os.kill(pilot.job.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        time.sleep(freeze)
    finally:
        os.kill(pilot.job.pid, signal.SIGCONT)
    frozen = time.monotonic() - t0
    umgr.wait_units(timeout=60)
    states = check_exactly_once(session, units, log)
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        boot = f.read()
    # (the units may all have ended in the freeze: their outcomes can reach the client before
    # a daemon hears its first pulse from the bootstrap and logs node.heard)
    deadline = time.monotonic() + 10
    nodes = read_node_logs(pilot)
    while nodes.count("node.heard") < nodes.count("node.silent") and time.monotonic() < deadline:
        time.sleep(0.05)
        nodes = read_node_logs(pilot)
    return {"pilot": pilot, "frozen": frozen, "states": states, "boot": boot, "nodes": nodes}


def test_a_bootstrap_frozen_longer_than_node_timeout_ends_no_node_and_no_unit(session, tmp_path):
    """Silence is not death: the bootstrap stopped for 8 s, node_timeout 2 s (4.8 s of
    silence is the tolerance) and client_timeout 5 s: every daemon runs its units on and logs
    the silence; the client waits for a pilot whose job lives, and the bootstrap does not take
    the time it was stopped for the client's silence; the units that ended meanwhile are
    reported when the bootstrap runs again, each exactly once; no node is lost and every unit
    ends DONE.  (The same with 20, 50 and 120 s and node_timeout 10 s: bench/freeze.py.)"""
    r = freeze_bootstrap(session, tmp_path, freeze=8.0, node_timeout=2.0, client_timeout=5)
    assert r["frozen"] >= 8.0
    assert r["states"] == {rp.DONE: 12}, r["states"]
    assert "node.lost" not in r["boot"], r["boot"][-3000:]
    assert r["pilot"].state == rp.ACTIVE, r["pilot"].reason
    assert all(p.state == rp.ACTIVE for p in r["pilot"].partitions)
    assert "node.silent: no word from the bootstrap" in r["nodes"], r["nodes"][-3000:]
    assert "node.heard: the bootstrap speaks again" in r["nodes"], r["nodes"][-3000:]
    assert "halted" not in r["nodes"]


@pytest.fixture
def unreachable(tmp_path, monkeypatch):
    """A `squeue` first on PATH that fails while the file it returns says so (a count or
    "always"), then runs the real one."""
    real = shutil.which("squeue")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fail = tmp_path / "squeue-fails"
    fail.write_text("0")
    script = FAKE_SQUEUE.replace("FILE", str(fail)).replace("REAL", real)
    (bin_dir / "squeue").write_text(script)
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return fail, real


def slurm_pilot(session):
    pd = rp.ComputePilotDescription(
        resource="slurm.localhost", parts=[rp.ComputePartitionDescription(nodes=1)], runtime=3
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, pilot.reason
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    return pilot, umgr


@needs_slurm
def test_a_slurm_controller_unreachable_for_some_polls_ends_no_pilot(
    slurm,  # noqa: F811
    session,
    unreachable,
    tmp_path,
):
    """squeue fails 6 times in a row (a controller restarting for ~6 polls of 1 s; PSI/J
    fails every job it follows at the third): the pilot stays ACTIVE and runs its units."""
    fail, real = unreachable
    pilot, umgr = slurm_pilot(session)
    fail.write_text("6")
    deadline = time.monotonic() + 40
    while fail.read_text().strip() != "0" or pilot.job.failed_queries:
        assert time.monotonic() < deadline, (fail.read_text(), pilot.state, pilot.reason)
        assert pilot.state == rp.ACTIVE, pilot.reason
        time.sleep(0.2)
    assert pilot.job.batch_state == "ACTIVE"
    log = str(tmp_path / "truth.log")
    units = umgr.submit_units([truth_unit(log, sleep=0.2) for _ in range(4)])
    umgr.wait_units(timeout=60)
    assert check_exactly_once(session, units, log) == {rp.DONE: 4}
    assert pilot.state == rp.ACTIVE, pilot.reason
    pilot.cancel(timeout=60)
    assert pilot.state == rp.CANCELED, pilot.reason


@needs_slurm
def test_a_slurm_controller_that_stays_unreachable_ends_the_pilot_with_the_reason(
    slurm,  # noqa: F811
    session,
    unreachable,
    tmp_path,
):
    """squeue never answers: after QUERY_TRIES failed queries with back-off the pilot ends
    FAILED saying so, its job is canceled, its units end once each with the reason."""
    from pilot.pmgr.batch.slurm import QUERY_TRIES

    fail, real = unreachable
    pilot, umgr = slurm_pilot(session)
    log = str(tmp_path / "truth.log")
    units = umgr.submit_units([truth_unit(log, sleep=60) for _ in range(2)])
    assert all(u.wait(rp.EXECUTING, timeout=30) == rp.EXECUTING for u in units)
    fail.write_text("always")
    t0 = time.monotonic()
    assert pilot.wait([rp.FAILED, rp.DONE, rp.CANCELED], timeout=90) == rp.FAILED
    took = time.monotonic() - t0
    assert f"SLURM could not be asked about job {pilot.job.pid}: {QUERY_TRIES} queries" in (
        pilot.reason
    ), pilot.reason
    assert "Unable to contact slurm controller" in pilot.reason, pilot.reason
    assert took > (1 + 2 + 4) + 2 * QUERY_TRIES, took  # asked again, backing off (poll: 1 s)
    umgr.wait_units(timeout=30)
    assert set(check_exactly_once(session, units, log)) == {rp.FAILED}
    fail.write_text("0")
    deadline = time.monotonic() + 30
    while subprocess.run(
        [real, "-h", "-j", str(pilot.job.pid), "-t", "PD,R,CG", "-o", "%i"],
        capture_output=True,
        text=True,
        timeout=20,
    ).stdout.strip():
        assert time.monotonic() < deadline, "the pilot's job still runs"
        time.sleep(0.5)
    # its processes end too, bounded: the job leaves squeue first, and the bootstrap then ends
    # its own children (SIGTERM, SIGKILL after 2 s: partition/orphans.py) before it exits
    deadline = time.monotonic() + 15
    while left := reaper.session_processes(session.uid):
        assert time.monotonic() < deadline, f"the canceled job's processes still run: {left}"
        time.sleep(0.2)
