"""Multi-node pilots with node daemons (local.nodes4: four logical nodes, a daemon each):
bring-up, partitions spanning nodes, forwarded output, node loss, ordered teardown."""

from __future__ import annotations

import json
import os
import signal
import time

import yaml

import pilot as rp
from tests.conftest import active_pilot
from tests.faults import processes_with


def nodes4(session, parts=None, resource="local.nodes4", runtime=5):
    parts = parts or [
        rp.ComputePartitionDescription(nodes=2),
        rp.ComputePartitionDescription(nodes=2),
    ]
    return active_pilot(session, parts=parts, resource=resource, runtime=runtime)


def nodes4_variant(tmp_path, **over) -> str:
    """local.nodes4 with some keys changed, as a config file."""
    with open(os.path.join(os.path.dirname(rp.__file__), "..", "configs", "local.yaml")) as f:
        cfg = yaml.safe_load(f)["nodes4"]
    path = tmp_path / "nodes4.yaml"
    path.write_text(yaml.safe_dump(dict(cfg, **over)))
    return str(path)


def sandbox_json(pilot, name):
    with open(os.path.join(pilot.sandbox, name)) as f:
        return json.load(f)


def test_bring_up_names_every_node_primary_first(session):
    pilot, _ = nodes4(session)
    net = sandbox_json(pilot, "network.json")
    assert sorted(net, key=int) == ["0", "1", "2", "3"]
    assert [net[i]["name"] for i in "0123"] == ["node0", "node1", "node2", "node3"]
    assert [net[i]["is_primary"] for i in "0123"] == [True, False, False, False]
    assert all(net[i]["state"] == "up" and net[i]["num_cpus"] >= 1 for i in "0123")
    assert pilot.nodes == {i: {"name": f"node{i}", "state": "up"} for i in range(4)}
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        log = f.read()
    steps = ["boot.nodes.launch", "boot.nodes.up", "boot.nodes.table", "boot.hello"]
    assert [log.index(s) for s in steps] == sorted(log.index(s) for s in steps)
    assert [p.resources["nodes"][0]["name"] for p in pilot.partitions] == ["node0", "node2"]


def test_units_run_on_every_node_with_output_tagged(session):
    pilot, umgr = nodes4(session)
    seen = []
    umgr.register_output_callback(lambda u, node, rank, stream, text: seen.append((u.uid, node)))
    units = []
    for part in pilot.partitions:
        units += umgr.submit_units(
            [
                rp.ComputeUnitDescription(
                    executable="/bin/sh",
                    arguments=["-c", 'echo "$PILOT_UNIT_ID on $PILOT_NODE_NAME"; echo err >&2'],
                    ranks=2,
                    partition=part.uid,
                )
                for _ in range(3)
            ]
        )
    umgr.wait_units(timeout=30)
    assert [u.state for u in units] == [rp.DONE] * 6, [u.reason for u in units]
    assert {n for u in units for n in u.node} == {"node0", "node1", "node2", "node3"}
    for u in units:
        out = sorted((node, stream, text) for node, _rank, stream, text in u.output)
        assert out == sorted(
            [(n, "stdout", f"{u.uid} on {n}\n") for n in u.node]
            + [(n, "stderr", "err\n") for n in u.node]
        )
        with open(os.path.join(u.sandbox, "STDOUT")) as f:
            assert sorted(f.read().splitlines()) == sorted(f"{u.uid} on {n}" for n in u.node)
    assert {uid for uid, _ in seen} == {u.uid for u in units}


def test_forwarded_output_is_bounded_files_have_it_all(session):
    pilot, umgr = nodes4(session)
    u = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/sh", arguments=["-c", "head -c 200000 /dev/zero | tr '\\0' x"]
        )
    )
    assert u.wait(timeout=30) == rp.DONE, u.reason
    text = "".join(t for _, _, stream, t in u.output if stream == "stdout")
    assert text.startswith("x" * 65536) and "output truncated" in text
    assert len(text) < 70000
    assert os.path.getsize(os.path.join(u.sandbox, "STDOUT")) == 200000


def test_killed_daemon_fails_its_units_and_its_partition_goes_on_without_it(session):
    """kill -9 of node3's daemon: the units that ran there end FAILED naming the node; the
    partition that held it (node2, node3) goes on with node2, whose units run on untouched, and
    places what comes next there; the other partition and the pilot never notice."""
    pilot, umgr = nodes4(session)
    first, second = pilot.partitions
    sleepers = {
        part.uid: umgr.submit_units(
            [
                rp.ComputeUnitDescription(
                    executable="/bin/sleep", arguments=["30"], partition=part.uid
                )
                for _ in range(4)
            ]
        )
        for part in (first, second)
    }
    deadline = time.monotonic() + 20
    while any(u.state != rp.EXECUTING for us in sleepers.values() for u in us):
        assert time.monotonic() < deadline, [u.state for us in sleepers.values() for u in us]
        time.sleep(0.05)
    daemons = sandbox_json(pilot, "daemons.json")
    victim = daemons["3"]
    assert victim["name"] == "node3"
    on3 = [u for u in sleepers[second.uid] if u.node == "node3"]
    on2 = [u for u in sleepers[second.uid] if u.node == "node2"]
    assert on3 and on2, [u.node for u in sleepers[second.uid]]
    (queued,) = umgr.submit_units(  # three ranks: fits two nodes of 2 cores, not one
        [rp.ComputeUnitDescription(executable="/bin/true", ranks=3, partition=second.uid)]
    )
    os.kill(victim["pid"], signal.SIGKILL)
    assert queued.wait(timeout=20) == rp.FAILED, queued.state
    assert "node node3 lost" in queued.reason and "can never fit" in queued.reason, queued.reason
    for u in on3:
        assert u.wait(timeout=20) == rp.FAILED and "node node3 lost" in u.reason, u.reason
    assert second.state == rp.ACTIVE and first.state == rp.ACTIVE and pilot.state == rp.ACTIVE
    assert all(u.state == rp.EXECUTING for u in on2 + sleepers[first.uid])
    umgr.cancel_units(on2)  # (node2's cores free again: what comes next runs there)
    assert [u.wait(timeout=20) for u in on2] == [rp.CANCELED] * len(on2)
    more = umgr.submit_units(
        [rp.ComputeUnitDescription(executable="/bin/true", partition=second.uid)] * 4
    )
    assert [u.wait(timeout=20) for u in more] == [rp.DONE] * 4
    assert {u.node for u in more} == {"node2"}
    (late,) = umgr.submit_units(
        [rp.ComputeUnitDescription(executable="/bin/true", ranks=3, partition=second.uid)]
    )
    assert late.wait(timeout=20) == rp.FAILED and "1 lost" in late.reason, late.reason
    umgr.cancel_units(sleepers[first.uid])
    umgr.wait_units(timeout=20)
    assert second.state == rp.ACTIVE


def test_a_partition_that_lost_its_only_node_hands_its_queued_units_to_another(session):
    """kill -9 of the daemon of a one-node partition: its running units end FAILED naming the
    node, the partition FAILED, and its queued units go to the other partition and run there
    (they ended FAILED, "every node of this partition is lost", before its stop could hand
    them back)."""
    pilot, umgr = nodes4(
        session,
        parts=[rp.ComputePartitionDescription(nodes=1), rp.ComputePartitionDescription(nodes=3)],
    )
    lone, other = pilot.partitions
    units = umgr.submit_units(
        [rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["2"]) for _ in range(16)]
    )
    deadline = time.monotonic() + 20
    while not any(u.part == lone.uid and u.state == rp.QUEUED for u in units):
        assert time.monotonic() < deadline, [(u.part, u.state) for u in units]
        time.sleep(0.02)
    (node,) = {n["name"] for n in lone.resources["nodes"]}
    victim = next(d for d in sandbox_json(pilot, "daemons.json").values() if d["name"] == node)
    os.kill(victim["pid"], signal.SIGKILL)
    queued = [u for u in units if u.part == lone.uid and u.state == rp.QUEUED]
    assert umgr.wait_units(timeout=60)
    assert lone.wait(timeout=20) == rp.FAILED
    for u in units:
        if u.state == rp.FAILED:
            assert f"node {node} lost" in u.reason and u.node == node, (u.uid, u.reason)
    moved = [u for u in queued if u.state == rp.DONE]
    assert moved and all(u.part == other.uid for u in moved), [
        (u.uid, u.state, u.reason) for u in queued
    ]
    assert other.state == rp.ACTIVE and pilot.state == rp.ACTIVE


def test_node_failure_fail_ends_the_pilot_with_the_node_named(session, tmp_path):
    pilot, umgr = nodes4(session, resource=nodes4_variant(tmp_path, node_failure="fail"))
    u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["30"]))
    assert u.wait(rp.EXECUTING, timeout=20) == rp.EXECUTING
    daemons = sandbox_json(pilot, "daemons.json")
    os.kill(daemons["1"]["pid"], signal.SIGKILL)
    assert pilot.wait(timeout=30) == rp.FAILED
    assert "node1" in pilot.reason
    assert u.state in (rp.FAILED, rp.CANCELED) and u.reason
    deadline = time.monotonic() + 10  # (the bootstrap logs its bye after it said it)
    while True:
        with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
            log = f.read()
        if "down.bye" in log or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    steps = ["node.lost", "down.agents", "down.wait", "down.nodes", "down.bye"]
    assert [log.index(s) for s in steps] == sorted(log.index(s) for s in steps)


def test_runtime_expiry_halts_daemons_in_order(session):
    pilot, umgr = nodes4(session, runtime=0.05)
    u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["60"]))
    assert pilot.wait(timeout=30) == rp.DONE
    assert "runtime" in pilot.reason
    assert u.wait(timeout=10) == rp.CANCELED
    daemons = sandbox_json(pilot, "daemons.json")
    for d in daemons.values():
        assert not os.path.exists(f"/proc/{d['pid']}") or _zombie(d["pid"])


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def test_reconfig_on_nodes_new_partition_spans_the_freed_nodes(session):
    pilot, umgr = nodes4(session)
    first, second = pilot.partitions
    (fill,) = pilot.reconfig(stop=second.uid, start=[rp.ComputePartitionDescription(size="FILL")])
    assert second.wait(timeout=20) == rp.CANCELED
    assert fill.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE, fill.reason
    assert [n["name"] for n in fill.resources["nodes"]] == ["node2", "node3"]
    u = umgr.submit_units(
        rp.ComputeUnitDescription(executable="/bin/true", ranks=4, partition=fill.uid)
    )
    assert u.wait(timeout=20) == rp.DONE, u.reason
    assert sorted(set(u.node)) == ["node2", "node3"]


def test_units_of_a_killed_agent_are_killed_by_their_daemons(session, tmp_path):
    pilot, umgr = nodes4(session)
    first, _ = pilot.partitions
    pidfile = tmp_path / "unit.pid"
    u = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/sh",
            arguments=["-c", f"echo $$ > {pidfile}; exec sleep 300"],
            partition=first.uid,
        )
    )
    assert u.wait(rp.EXECUTING, timeout=20) == rp.EXECUTING
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    unit_pid = int(pidfile.read_text())
    with open(os.path.join(pilot.sandbox, f"{first.uid}.agent.log")) as f:
        agent_pid = int(f.read().split("up, pid ", 1)[1].split(",", 1)[0])
    os.kill(agent_pid, signal.SIGKILL)
    assert first.wait(timeout=30) == rp.FAILED and "agent exited" in first.reason
    assert u.wait(timeout=10) == rp.FAILED and u.reason
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{unit_pid}") and not _zombie(unit_pid):
        assert time.monotonic() < deadline, "the unit outlived its partition"
        time.sleep(0.05)
    assert pilot.state == rp.ACTIVE


def test_channel_table_travels_down_a_fanout_tree(session, tmp_path):
    pilot, umgr = nodes4(session, resource=nodes4_variant(tmp_path, fanout=2))
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        log = f.read()
    assert "'bootstrap_sends': 2" in log and "'tree_depth': 2" in log
    forwarded = {}
    for i in range(4):
        with open(os.path.join(pilot.sandbox, "nodes", f"node.{i}.log")) as f:
            forwarded[i] = f.read().split("forwarded to ", 1)[1].split("\n", 1)[0]
    assert forwarded == {0: "[2, 3]", 1: "[]", 2: "[]", 3: "[]"}
    units = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true", ranks=2)] * 4)
    assert [u.wait(timeout=20) for u in units] == [rp.DONE] * 4


def test_a_small_table_goes_from_the_bootstrap_to_every_node(session):
    """fanout unset: four nodes' table is a few hundred bytes, so the bootstrap sends each node
    its copy itself and no node opens a connection to another to forward it."""
    pilot, umgr = nodes4(session)
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        log = f.read()
    assert "'bootstrap_sends': 4" in log and "'tree_depth': 1" in log and "'fanout': 4" in log
    for i in range(4):
        with open(os.path.join(pilot.sandbox, "nodes", f"node.{i}.log")) as f:
            assert "forwarded to []" in f.read()


def test_a_silent_daemon_is_lost_after_node_timeout(session, tmp_path):
    """node1's daemon stopped (alive but silent: only heartbeats can tell): after node_timeout
    its units end FAILED with the reason; its partition goes on with node0."""
    pilot, umgr = nodes4(session, resource=nodes4_variant(tmp_path, node_timeout=2))
    first, second = pilot.partitions
    sleepers = umgr.submit_units(
        [rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["30"], partition=first.uid)]
        * 4
    )
    umgr.wait_units([u.uid for u in sleepers], state=rp.EXECUTING, timeout=20)
    on1 = [u for u in sleepers if u.node == "node1"]
    victim = sandbox_json(pilot, "daemons.json")["1"]
    os.kill(victim["pid"], signal.SIGSTOP)  # alive but silent: only heartbeats can tell
    try:
        t0 = time.monotonic()
        for u in on1:
            assert u.wait(timeout=20) == rp.FAILED
            assert "node node1 lost: no word from its daemon for 2 s" in u.reason, u.reason
        assert time.monotonic() - t0 < 10
        assert first.state == rp.ACTIVE and second.state == rp.ACTIVE
        rest = [u for u in sleepers if u not in on1]
        assert all(u.state == rp.EXECUTING for u in rest)
        umgr.cancel_units(rest)
        umgr.wait_units([u.uid for u in rest], timeout=20)
        u = umgr.submit_units(
            rp.ComputeUnitDescription(executable="/bin/true", ranks=2, partition=first.uid)
        )
        assert u.wait(timeout=20) == rp.DONE and u.node == ["node0", "node0"]
    finally:
        os.kill(victim["pid"], signal.SIGCONT)


def test_a_network_config_file_names_the_nodes_instead_of_discovery(session, tmp_path):
    from pilot.config import network

    me = network.describe()
    names = ["alpha", "beta", "gamma", "delta"]
    given = {i: dict(me, name=n, host_id=1000 + i, is_primary=i == 0) for i, n in enumerate(names)}
    path = tmp_path / "net.yaml"
    path.write_text(network.dump(given, "yaml"))
    pd = rp.ComputePilotDescription(
        resource="local.nodes4",
        parts=[rp.ComputePartitionDescription(nodes=2), rp.ComputePartitionDescription(nodes=2)],
        runtime=5,
        network_config=str(path),
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    for part in pilot.partitions:
        assert part.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, part.reason
    net = sandbox_json(pilot, "network.json")
    assert [(net[i]["name"], net[i]["host_id"]) for i in "0123"] == [
        (n, 1000 + i) for i, n in enumerate(names)
    ]
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    u = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/sh",
            arguments=["-c", "echo $PILOT_NODE_NAME"],
            policy=rp.Policy(placement=rp.Policy.Placement.HOST_ID, host_id=1002),
            partition=pilot.partitions[1].uid,
        )
    )
    assert u.wait(timeout=20) == rp.DONE, u.reason
    assert u.node == "gamma" and [t for *_, t in u.output] == ["gamma\n"]


def test_agents_needing_a_node_run_there_under_its_daemon(session, tmp_path):
    res = nodes4_variant(tmp_path, agent_overhead={"cores": 0, "gpus": 0, "nodes": 1})
    pilot, umgr = nodes4(
        session,
        resource=res,
        parts=[rp.ComputePartitionDescription(nodes=1), rp.ComputePartitionDescription(nodes=1)],
    )
    assert pilot.size["nodes"] == 4  # a node for each partition's agent
    daemons = sandbox_json(pilot, "daemons.json")
    pid_of = {d["name"]: d["pid"] for d in daemons.values()}
    for part in pilot.partitions:
        (agent_node,) = part.resources["agent_nodes"]
        (unit_node,) = [n["name"] for n in part.resources["nodes"]]
        with open(os.path.join(pilot.sandbox, f"{part.uid}.agent.log")) as f:
            agent_pid = int(f.read().split("up, pid ", 1)[1].split(",", 1)[0])
        with open(f"/proc/{agent_pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        assert ppid == pid_of[agent_node]  # started by its agent node's daemon
        u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true", partition=part.uid))
        assert u.wait(timeout=20) == rp.DONE and u.node == unit_node
    first, second = pilot.partitions
    (agent_node,) = first.resources["agent_nodes"]
    os.kill(pid_of[agent_node], signal.SIGKILL)  # the agent's node goes: so does the partition
    assert first.wait(timeout=20) == rp.FAILED
    assert agent_node in first.reason, first.reason
    assert second.state == rp.ACTIVE
    u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    assert u.wait(timeout=20) == rp.DONE and u.part == second.uid


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _gone(pids, seconds: float) -> list[int]:
    """The pids still running (not zombies) after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while (live := [p for p in pids if os.path.exists(f"/proc/{p}") and not _zombie(p)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    return live


def test_fork_daemons_come_from_one_zygote_and_leave_nothing_behind(session):
    """launch_method fork: every daemon is a child of the node zygote (not of the bootstrap),
    runs its own log, and pilot end leaves neither daemons nor the zygote running."""
    pilot, umgr = nodes4(session)
    daemons = sandbox_json(pilot, "daemons.json")
    parents = {_ppid(d["pid"]) for d in daemons.values()}
    assert len(parents) == 1
    (zygote,) = parents
    assert zygote != pilot.job.pid and _ppid(zygote) == pilot.job.pid
    with open(f"/proc/{zygote}/cmdline", "rb") as f:
        assert b"pilot.agent.node.zygote" in f.read()
    for d in daemons.values():
        with open(os.path.join(pilot.sandbox, "nodes", f"node.{d['hint']}.log")) as f:
            assert f"{d['name']}: up, pid {d['pid']}" in f.read()
        with open(f"/proc/{d['pid']}/cmdline", "rb") as f:
            assert b"pilot.agent.node.zygote" in f.read()  # forked, not a fresh interpreter
    more = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 8)
    assert [u.wait(timeout=20) for u in more] == [rp.DONE] * 8
    pilot.cancel(timeout=30)
    assert _gone([zygote, *(d["pid"] for d in daemons.values())], 15) == []


def test_exec_launch_starts_each_daemon_as_a_fresh_interpreter(session, tmp_path):
    """launch_method exec (the old fork path, bench/bringup.py's baseline)."""
    pilot, umgr = nodes4(session, resource=nodes4_variant(tmp_path, launch_method="exec"))
    daemons = sandbox_json(pilot, "daemons.json")
    for d in daemons.values():
        assert _ppid(d["pid"]) == pilot.job.pid
        with open(f"/proc/{d['pid']}/cmdline", "rb") as f:
            assert b"pilot.agent.node.daemon" in f.read()
    u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    assert u.wait(timeout=20) == rp.DONE
    pilot.cancel(timeout=30)
    assert _gone([d["pid"] for d in daemons.values()], 15) == []


def test_a_killed_node_zygote_leaves_its_daemons_running_and_reaped(session):
    """The zygote dies (SIGKILL): its daemons go on (the bootstrap adopts them), units still
    run on every node, and pilot end reaps them all."""
    pilot, umgr = nodes4(session)
    daemons = sandbox_json(pilot, "daemons.json")
    (zygote,) = {_ppid(d["pid"]) for d in daemons.values()}
    os.kill(zygote, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while {_ppid(d["pid"]) for d in daemons.values()} != {pilot.job.pid}:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    more = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 8)
    assert [u.wait(timeout=20) for u in more] == [rp.DONE] * 8
    assert all(p.state == rp.ACTIVE for p in pilot.partitions)
    pilot.cancel(timeout=30)
    assert _gone([d["pid"] for d in daemons.values()], 15) == []


def test_forked_daemons_halt_when_the_bootstrap_is_killed(session):
    """The bootstrap dies (SIGKILL): its forked daemons (whose parent is the zygote) notice
    (--watch-pid) and halt, the zygote exits, nothing is left running."""
    pilot, umgr = nodes4(session)
    u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["60"]))
    assert u.wait(rp.EXECUTING, timeout=20) == rp.EXECUTING
    daemons = sandbox_json(pilot, "daemons.json")
    (zygote,) = {_ppid(d["pid"]) for d in daemons.values()}
    assert processes_with(f"PILOT_SESSION_ID={session.uid}")  # the unit (the marker works)
    os.kill(pilot.job.pid, signal.SIGKILL)
    assert pilot.wait(timeout=30) == rp.FAILED
    assert _gone([zygote, *(d["pid"] for d in daemons.values())], 15) == []
    assert _gone(processes_with(f"PILOT_SESSION_ID={session.uid}"), 10) == []  # its units too
    with open(os.path.join(pilot.sandbox, "nodes", f"node.{daemons['1']['hint']}.log")) as f:
        assert "the bootstrap process (pid" in f.read()
