"""The daemon runner's side of the ranks channel (agent/runners/daemons.py), against real
CURVE sockets standing in for two node daemons: a turn's ranks go to each node as one `exec`
that carries the partition's environment once; a kill follows the exec it is for; a daemon that
takes no more fails only the units of the ranks it did not take, with the reason, and their
ranks on other nodes are killed.  (No processes: the daemons' side is tests/test_nodes.py.)"""

from __future__ import annotations

import signal

import pytest
import zmq

from pilot.agent.node.dispatch import FROM_RANKS
from pilot.agent.pool import PartitionPool
from pilot.agent.rank_env import exec_env, grant_ids, rank_env, with_nodes
from pilot.agent.runners.daemons import DaemonRunner
from pilot.wire import security
from pilot.wire.protocol import unpack

WAIT_MS = 5000  # every receive here has this deadline


def node(i, cores=4):
    return {"index": i, "name": f"n{i}", "host_id": i, "cores": list(range(cores)), "gpus": [0, 1]}


def unit(uid, ranks=1):
    return {
        "uid": uid,
        "executable": "/bin/true",
        "arguments": [uid],
        "ranks": ranks,
        "environment": {"MINE": uid},
    }


@pytest.fixture
def rig(tmp_path):
    """A DaemonRunner of two nodes; `daemons[i]` the ROUTER of node i's stand-in (a CURVE
    server with the session's keys)."""
    made = []

    def make():
        keys_dir = security.make_keys(str(tmp_path))
        ctx = zmq.Context()
        keys = security.load(keys_dir)
        daemons, nodes = [], []
        for i in range(2):
            n = node(i)
            sock = ctx.socket(zmq.ROUTER)
            sock.setsockopt(zmq.LINGER, 0)
            keys.serve(sock)
            port = sock.bind_to_random_port("tcp://127.0.0.1")
            n["endpoint"] = f"tcp://127.0.0.1:{port}"
            daemons.append(sock)
            nodes.append(n)
        cfg = {
            "uid": "part.0000",
            "session": "s.0000",
            "pilot": "pilot.0000",
            "pilot_sandbox": str(tmp_path / "pilot.0000"),
            "nodes": nodes,
            "curve": keys_dir,
        }
        runner = DaemonRunner(cfg, ctx)
        made.append((ctx, keys, runner, daemons))
        return runner, PartitionPool(nodes), daemons

    yield make
    for ctx, keys, runner, daemons in made:
        runner.sock.setsockopt(zmq.LINGER, 0)  # (what full() queued goes nowhere)
        runner.close()
        for sock in daemons:
            sock.close(0)
        keys.close()
        ctx.term()


def recv(sock) -> tuple[bytes, dict]:
    """The next message to a stand-in daemon, checked as a daemon checks it."""
    assert sock.poll(WAIT_MS), "nothing arrived within the deadline"
    frames = sock.recv_multipart()
    assert frames[0] == b"part.0000"  # (the agent's identity: its partition)
    FROM_RANKS.read(frames[1], frames[2])  # (pilot/wire/messages.py: a bad message raises)
    return frames[1], unpack(frames[2])


def spawn(runner, pool, u, **where):
    alloc = pool.allocate({"cpus": 1, "gpus": 0, "ranks": u["ranks"], "policy": where or {}})
    assert alloc is not None
    return runner.spawn(u, f"/sandbox/{u['uid']}", alloc)


def test_a_turn_of_ranks_is_one_exec_per_node_with_the_partition_env_once(rig):
    runner, pool, daemons = rig()
    for i in range(3):
        spawn(runner, pool, unit(f"u.{i}"), placement="HOST_NAME", host_name="n0")
    spawn(runner, pool, unit("u.3"), placement="HOST_NAME", host_name="n1")
    assert all(not s.poll(100) for s in daemons)  # nothing sent before the turn ends
    runner.flush()
    kind, body = recv(daemons[0])
    assert kind == b"exec" and body["node"] == "n0"
    assert [r["uid"] for r in body["ranks"]] == ["u.0", "u.1", "u.2"]
    assert body["env"]["PILOT_PARTITION_ID"] == "part.0000"
    assert body["env"]["RP_PILOT_ID"] == "pilot.0000"
    for r in body["ranks"]:  # what its environment is made of, not the environment
        assert r["unit"] == {"environment": {"MINE": r["uid"]}} and "env" not in r
        assert r["argv"] == ["/bin/true", r["uid"]]
    kind, body = recv(daemons[1])
    assert [r["uid"] for r in body["ranks"]] == ["u.3"] and body["node"] == "n1"
    assert not daemons[0].poll(100)  # one message, not one per rank


def test_the_daemon_makes_the_environment_the_agent_would(rig):
    """exec_env at the daemon == the partition's env under rank_env at the agent (the local
    runner's), for a unit with its own environment (placeholders too), name, RP 1.x profile
    command, GPU variable and a variable that shadows the partition's."""
    runner, pool, daemons = rig()
    u = unit("u.0", ranks=2)
    u.update(
        name="mine",
        prof="command",
        environment={"RP_PILOT_ID": "mine", "CORES": "%(cpu_ids)s"},
        policy={"gpu_env_str": "MY_GPUS"},
    )
    alloc = _across(pool)
    runner.spawn(u, "/sandbox/u.0", alloc)
    runner.flush()
    for i, (node, grant) in enumerate(alloc.ranks):
        _, body = recv(daemons[i])
        rank = body.pop("ranks")[0]
        got = exec_env(body, rank)
        both = with_nodes(u, alloc.ranks)  # (as the local runner gives it)
        own, var = rank_env(
            both, "/sandbox/u.0", node.name, grant_ids(node.cap, grant), i, 2, True, runner.prof
        )
        assert got == ({**runner.base_env, **own}, var)
        env = got[0]
        assert env["RP_PILOT_ID"] == "mine" and env["PILOT_PARTITION_ID"] == "part.0000"
        assert env["PILOT_RANK"] == str(i) and env["PILOT_NODE_NAME"] == node.name
        assert env["PILOT_NODE_LIST"] == ",".join(n.name for n, _ in alloc.ranks)
        assert env["CORES"] == env["PILOT_CPU_IDS"] and env["RP_TASK_NAME"] == "mine"
        assert env["RP_PROF"] == runner.prof and var == "MY_GPUS" and env["MY_GPUS"] == ""


def test_a_kill_follows_the_exec_it_is_for(rig):
    runner, pool, daemons = rig()
    run = spawn(runner, pool, unit("u.0"), placement="HOST_NAME", host_name="n0")
    runner.kill(run, signal.SIGTERM)  # (before the turn's flush)
    assert recv(daemons[0])[0] == b"exec"
    kind, body = recv(daemons[0])
    assert kind == b"kill" and body["uids"] == ["u.0"] and body["sig"] == signal.SIGTERM


def full(runner, daemons, index: int) -> None:
    """Node `index`'s queue full (a daemon that takes no more: its queue at the high-water
    mark): its stand-in gone, so that nothing drains the runner's connection to it, which is
    then filled to its high-water mark."""
    daemons[index].close(0)
    for _ in range(300_000):
        try:
            runner.send(index, [b"x"])
        except zmq.Again:
            return
    raise AssertionError("a queue of high-water mark 100,000 took 300,000 messages")


def test_a_daemon_that_takes_no_more_fails_only_its_units_and_kills_their_other_ranks(rig):
    runner, pool, daemons = rig()
    full(runner, daemons, 1)
    alone = spawn(runner, pool, unit("u.0"), placement="HOST_NAME", host_name="n1")
    fine = spawn(runner, pool, unit("u.1"), placement="HOST_NAME", host_name="n0")
    wide = runner.spawn(unit("u.2", ranks=2), "/sandbox/u.2", _across(pool))
    runner.flush()
    assert runner.due() == 0.0  # (the agent reaps them on its next turn)
    ended = {r.unit["uid"]: (r, code) for r, code in runner.reap()}
    assert set(ended) == {"u.0"}  # u.2's rank on n0 was sent: it ends when n0 says so
    run, _ = ended["u.0"]
    assert run is alone and run.not_started  # (FAILED with the reason, no exit code)
    assert run.fail_reason == "cannot start: the node daemon of n1 takes no more work"
    kind, body = recv(daemons[0])
    assert kind == b"exec" and [r["uid"] for r in body["ranks"]] == ["u.1", "u.2"]
    kind, body = recv(daemons[0])  # u.2's rank there is killed; u.1 runs on
    assert kind == b"kill" and body["uids"] == ["u.2"]
    assert not daemons[0].poll(100)
    assert wide.fail_reason == alone.fail_reason and fine.fail_reason is None
    assert ("u.1", 0) in runner.running and ("u.2", 0) in runner.running


def _across(pool):
    """An allocation of two ranks, one on each node (n0 first)."""
    alloc = pool.allocate({"cpus": 1, "ranks": 2, "policy": {"distribution": "ROUNDROBIN"}})
    assert sorted(n.name for n, _ in alloc.ranks) == ["n0", "n1"]
    alloc.ranks.sort(key=lambda r: r[0].name)
    return alloc
