"""A pilot that grows by batch jobs of its own and gives them back (max_nodes, rp.Adapt):
local.nodes4, four logical nodes with a daemon each; the pilot's first job holds some of them,
a later job (a process tree of the `local` batch system, running partition/nodes/join_job.py) the
others.  The same on a real SLURM, job by job on different hosts: tests/test_cluster.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import pilot as rp
from pilot import processes
from pilot.pmgr.observe import timeline
from tests.conftest import ROOT, local_pilot
from tests.faults import check_exactly_once, truth_unit

CPD = rp.ComputePartitionDescription
CUD = rp.ComputeUnitDescription


def grown_pilot(session, nodes=2, max_nodes=4, **kw):
    pilot = local_pilot(
        session, parts=[CPD(nodes=nodes)], resource="local.nodes4", nodes=nodes,
        max_nodes=max_nodes, **kw,
    )  # fmt: skip
    assert pilot.partitions[0].wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, pilot.partitions[0].reason
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    return pilot, umgr


def gone(pid: int) -> bool:
    """Process `pid` ended (or is a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def wait_for(what, timeout: float = 30.0, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(step)
    return what()


def job(pilot, name="job.0001") -> dict:
    return next((j for j in pilot.jobs if j["job"] == name), {})


def where(units) -> set[str]:
    return {u.stdout.strip() for u in units}


def names(umgr, n: int, **kw) -> list:
    return umgr.submit_units(
        [CUD(executable="/bin/sh", arguments=["-c", "echo $PILOT_NODE_NAME"], **kw)] * n
    )


def test_a_reconfig_beyond_the_free_nodes_grows_the_pilot_and_gives_the_job_back(session):
    pilot, umgr = grown_pilot(session)
    first = pilot.partitions[0]
    [new] = pilot.reconfig(start=CPD(nodes=2), reason="more room")
    assert new.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, new.reason
    assert [s for s, _ in new.history] == ["NEW", "PENDING", "STARTING", "ACTIVE"]
    assert sorted(n["name"] for n in new.resources["nodes"]) == ["node2", "node3"]
    grown = wait_for(lambda: job(pilot).get("state") == "joined" and job(pilot))
    assert grown["names"] == ["node2", "node3"] and grown["nodes"] == 2
    assert grown["reason"] == f"more room: partition(s) {new.uid} need 2 more node(s)"
    assert [j["job"] for j in pilot.jobs] == ["job.0000", "job.0001"]
    assert {i: n["state"] for i, n in pilot.nodes.items()} == {i: "up" for i in range(4)}
    units = names(umgr, 6, partition=new.uid)
    assert umgr.wait_units([u.uid for u in units], timeout=60) == [rp.DONE] * 6
    assert where(units) == {"node2", "node3"}
    free = pilot.free
    assert free["nodes"] == 0, free
    # `pilot top` shows the job and why it was asked for
    env = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="200", LINES="60")  # (room for its events)
    top = subprocess.run(
        [sys.executable, "-m", "pilot", "top", f"{session.uid}/{pilot.uid}", "--once"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert top.returncode == 0, top.stderr
    assert "grown by: job.0001 joined (2 node(s): node2, node3)" in top.stdout, top.stdout
    assert f"grow: job.0001 of 2 node(s): more room: partition(s) {new.uid}" in top.stdout
    # shrink: stopping every partition on the job's nodes ends the job, the pilot goes on
    pilot.reconfig(stop=new.uid)
    assert new.wait(rp.FINAL, timeout=30) == rp.CANCELED
    ended = wait_for(lambda: job(pilot).get("state") == "released" and job(pilot))
    assert ended["why_ended"] == "no partition holds its node(s) any more"
    assert wait_for(lambda: gone(int(ended["id"])), timeout=30), "the job's process is still there"
    assert wait_for(lambda: pilot.nodes[2]["state"] == "released")
    assert pilot.state == rp.ACTIVE and first.state == rp.ACTIVE
    again = names(umgr, 2)
    assert umgr.wait_units([u.uid for u in again], timeout=30) == [rp.DONE] * 2
    assert where(again) <= {"node0", "node1"}
    [newer] = pilot.reconfig(start=CPD(nodes=2))  # and grow again: the nodes given back serve
    assert newer.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, newer.reason
    assert sorted(n["name"] for n in newer.resources["nodes"]) == ["node2", "node3"]
    assert wait_for(lambda: job(pilot, "job.0002").get("state") == "joined")
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        log = f.read()
    assert "grow: job.0001 of 2 node(s) asked for" in log
    assert "join: job job.0001 joined with node(s) [2, 3]" in log
    assert "release: job.0001: no partition holds its node(s) any more" in log


def test_two_jobs_at_once_join_and_go_back_in_any_order(session):
    pilot, umgr = grown_pilot(session, nodes=1)
    [one] = pilot.reconfig(start=CPD(nodes=1))
    [two] = pilot.reconfig(start=CPD(nodes=2))  # before the first job joined, mostly
    assert one.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, one.reason
    assert two.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, two.reason
    placed = [sorted(n["name"] for n in p.resources["nodes"]) for p in (one, two)]
    assert sorted(placed[0] + placed[1]) == ["node1", "node2", "node3"], placed
    assert [j["nodes"] for j in pilot.jobs] == [1, 1, 2]
    pilot.reconfig(stop=two.uid)  # the later job back first
    assert wait_for(lambda: job(pilot, "job.0002").get("state") == "released")
    assert job(pilot, "job.0001")["state"] == "joined" and one.state == rp.ACTIVE
    units = names(umgr, 1, partition=one.uid)
    assert umgr.wait_units([u.uid for u in units], timeout=30) == [rp.DONE]
    assert where(units) == set(placed[0])
    [three] = pilot.reconfig(start=CPD(nodes=2))  # the released nodes serve a third job
    assert three.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, three.reason
    pilot.reconfig(stop=[one.uid, three.uid])
    assert wait_for(lambda: {j["state"] for j in pilot.jobs[1:]} == {"released"}), pilot.jobs
    assert {i: n["state"] for i, n in pilot.nodes.items()}[0] == "up"


def test_a_partition_too_large_for_max_nodes_fails_with_the_reason_and_nothing_moves(session):
    pilot, umgr = grown_pilot(session, max_nodes=3)
    [new] = pilot.reconfig(start=CPD(nodes=2))
    assert new.wait(rp.FINAL, timeout=30) == rp.FAILED
    assert "max_nodes=3 leaves room for 1" in new.reason and "needs 2 more node(s)" in new.reason
    assert [j["job"] for j in pilot.jobs] == ["job.0000"]
    [fits] = pilot.reconfig(start=CPD(nodes=1))  # within max_nodes: grows by one node
    assert fits.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, fits.reason
    assert job(pilot)["nodes"] == 1
    assert pilot.partitions[0].state == rp.ACTIVE


def test_without_max_nodes_an_over_committing_reconfig_fails_as_before(session):
    pilot = local_pilot(session, parts=[CPD(nodes=2)], resource="local.nodes4", nodes=2)
    assert pilot.partitions[0].wait(rp.ACTIVE, timeout=30) == rp.ACTIVE
    [new] = pilot.reconfig(start=CPD(nodes=2))
    assert new.wait(rp.FINAL, timeout=30) == rp.FAILED
    assert new.reason.startswith("does not fit the free resources: needs 2 wholly free nodes")
    assert [j["job"] for j in pilot.jobs] == ["job.0000"]


def test_shares_and_fill_are_of_what_the_pilot_has_and_never_grow_it(session):
    pilot, _ = grown_pilot(session)
    [share, fill] = pilot.reconfig(start=[CPD("50%"), CPD(rp.FILL)])
    assert share.wait(rp.FINAL, timeout=30) == rp.FAILED
    assert fill.wait(rp.FINAL, timeout=30) == rp.FAILED
    assert [j["job"] for j in pilot.jobs] == ["job.0000"]


def test_max_nodes_is_checked_against_the_resource(session):
    pmgr = rp.PilotManager(session)
    with pytest.raises(ValueError, match="max_nodes=5 is more than the 4 node"):
        pmgr.submit_pilots(
            rp.ComputePilotDescription(resource="local.nodes4", nodes=2, max_nodes=5,
                                       parts=[CPD(nodes=2)])
        )  # fmt: skip
    with pytest.raises(ValueError, match="max_nodes=1 is less than its 2 node"):
        pmgr.submit_pilots(
            rp.ComputePilotDescription(resource="local.nodes4", nodes=2, max_nodes=1,
                                       parts=[CPD(nodes=2)])
        )  # fmt: skip
    with pytest.raises(ValueError, match="runs no node daemons"):
        pmgr.submit_pilots(rp.ComputePilotDescription(cores=1, max_nodes=2))
    with pytest.raises(ValueError, match="adapt needs max_nodes"):
        pmgr.submit_pilots(
            rp.ComputePilotDescription(resource="local.nodes4", nodes=1, adapt=rp.Adapt())
        )
    with pytest.raises(ValueError, match="Adapt.*grow_after=-1 must be a number of seconds >= 0"):
        rp.Adapt(grow_after=-1)
    with pytest.raises(ValueError, match="adapt="):
        rp.ComputePilotDescription(adapt=3)


def test_a_job_the_batch_system_ends_fails_its_units_with_the_reason_exactly_once(
    session, tmp_path
):
    pilot, umgr = grown_pilot(session)
    [new] = pilot.reconfig(start=CPD(nodes=2))
    assert new.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, new.reason
    log = str(tmp_path / "truth.log")
    doomed = umgr.submit_units([truth_unit(log, sleep=60, partition=new.uid) for _ in range(6)])
    others = umgr.submit_units([truth_unit(log, sleep=0.2) for _ in range(4)])
    assert wait_for(lambda: open(log).read().count("start") >= 4 if os.path.exists(log) else 0)
    # the batch system ends the job (its walltime, scancel from outside): SIGTERM to it all
    grown = job(pilot)
    processes.signal_group(int(grown["id"]), signal.SIGTERM)
    assert umgr.wait_units([u.uid for u in doomed], timeout=60) == [rp.FAILED] * 6
    for u in doomed:  # killed as its node's daemon halted, or failed as its node was lost
        assert "node2" in u.reason or "node3" in u.reason, u.reason
        assert "halted (node daemon received SIGTERM)" in u.reason or "lost" in u.reason
    assert new.wait(rp.FINAL, timeout=30) == rp.FAILED
    assert umgr.wait_units([u.uid for u in others], timeout=60) == [rp.DONE] * 4
    check_exactly_once(session, doomed + others, log)
    assert wait_for(lambda: job(pilot).get("state") in ("ended", "released"))
    assert pilot.state == rp.ACTIVE and pilot.partitions[0].state == rp.ACTIVE
    more = names(umgr, 2)
    assert umgr.wait_units([u.uid for u in more], timeout=30) == [rp.DONE] * 2


def test_an_adaptive_pilot_grows_under_load_and_gives_idle_nodes_back(session):
    adapt = rp.Adapt(max_nodes=4, grow_after=0.5, idle_after=1)
    pilot = local_pilot(session, parts=[CPD(nodes=1)], resource="local.nodes4", nodes=1,
                        adapt=adapt)  # fmt: skip
    assert pilot.partitions[0].wait(rp.ACTIVE, timeout=30) == rp.ACTIVE
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    units = umgr.submit_units(
        [CUD(executable="/bin/sh", arguments=["-c", "sleep 1.5; echo $PILOT_NODE_NAME"])] * 16
    )
    assert umgr.wait_units(timeout=90) == [rp.DONE] * 16
    assert len(where(units)) > 1, "every unit ran on the first node: the pilot did not grow"
    log = wait_for(lambda: len(pilot.adapt_log) >= 2 and pilot.adapt_log, timeout=30)
    assert [d["action"] for d in log] == ["grow", "shrink"], log
    assert log[0]["nodes"] == 3 and "unit(s) waited" in log[0]["reason"]
    grown = wait_for(lambda: job(pilot).get("state") == "released" and job(pilot))
    assert grown["reason"].startswith("adapt: grow by 3 node(s)")
    stopped = pilot.partitions[1]
    assert stopped.wait(rp.FINAL, timeout=10) == rp.CANCELED
    assert stopped.reason.startswith("stopped by reconfig: adapt: shrink by 3 node(s)")
    assert pilot.partitions[0].state == rp.ACTIVE
    pilot.cancel(timeout=30)  # the pilot's record keeps its jobs and decisions: the plot's marks
    session.writer.flush(timeout=30)
    [drawn] = timeline.load(session.store, session.uid).pilots
    marks = [label for _, label in drawn.job_marks()]
    assert marks == ["grow job.0001 +3 node(s)", "released job.0001"], marks
    doc = session.store.get("pilots", pilot.uid)
    assert [d["action"] for d in doc["adapt"]] == ["grow", "shrink"]


FIRST_CLIENT = r"""
import json, os
import pilot as rp
s = rp.Session()
pd = rp.ComputePilotDescription(resource="local.nodes4", nodes=2, max_nodes=4, runtime=5,
                                parts=[rp.ComputePartitionDescription(nodes=2)])
pilot = rp.PilotManager(s).submit_pilots(pd)
pilot.partitions[0].wait(rp.ACTIVE, timeout=30)
[new] = pilot.reconfig(start=rp.ComputePartitionDescription(nodes=2))
assert new.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, new.reason
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "pilot": pilot.uid, "new": new.uid}), flush=True)
os._exit(0)  # the client dies; the pilot and both its jobs go on
"""


def test_a_client_that_attaches_sees_the_pilot_with_all_its_jobs(make_session, tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CLIENT], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    first = json.loads(out.stdout.strip().splitlines()[-1])
    session = make_session(uid=first["session"], database_url=url)
    (pilot,) = rp.PilotManager(session).get_pilots()
    assert pilot.state == rp.ACTIVE
    grown = wait_for(lambda: job(pilot).get("state") == "joined" and job(pilot))
    assert grown["names"] == ["node2", "node3"], pilot.jobs
    new = pilot.partition(first["new"])
    assert new.state == rp.ACTIVE
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    units = names(umgr, 4, partition=new.uid)
    assert umgr.wait_units([u.uid for u in units], timeout=60) == [rp.DONE] * 4
    assert where(units) == {"node2", "node3"}
    pilot.reconfig(stop=new.uid)  # the new client gives the job back: it ends on its own
    assert wait_for(lambda: job(pilot).get("state") == "released")
    assert wait_for(lambda: gone(int(grown["id"])), timeout=30), "the job still runs"


def test_an_entk_stage_asking_for_more_nodes_than_the_pilot_has_grows_it(sessions_dir):
    import pilot.entk as re

    def task(i: int) -> re.Task:
        t = re.Task()
        t.name = f"t{i}"
        t.executable = "/bin/sh"
        t.arguments = ["-c", "echo $PILOT_NODE_NAME"]
        t.stdout = "out.txt"
        return t

    small, wide = re.Stage(), re.Stage()
    small.name, wide.name = "small", "wide"
    small.add_tasks([task(i) for i in range(2)])
    wide.add_tasks([task(i) for i in range(6)])
    small.partition = "small"
    wide.partition = "wide"
    wide.reconfig = {"start": [{"name": "wide", "nodes": 3}]}  # three nodes: the pilot has one
    p = re.Pipeline()
    p.add_stages([small, wide])
    amgr = re.AppManager()
    amgr.resource_desc = {
        "resource": "local.nodes4", "walltime": 5, "cpus": 2, "max_nodes": 4,
        "partitions": [{"name": "small", "nodes": 1}],
    }  # fmt: skip
    amgr.workflow = [p]
    amgr.run()
    jobs = amgr.pilot.jobs
    amgr.terminate()
    assert p.state == re.states.DONE
    ran = [open(os.path.join(t.path, "out.txt")).read().strip() for t in wide.tasks]
    assert set(ran) == {"node1", "node2", "node3"}, ran
    assert {open(os.path.join(t.path, "out.txt")).read().strip() for t in small.tasks} == {"node0"}
    assert jobs[1]["nodes"] == 3 and jobs[1]["names"] == ["node1", "node2", "node3"]


def node_after(seconds: float) -> str:
    time.sleep(seconds)
    return os.environ["PILOT_NODE_NAME"]


def refuse(x):
    raise KeyError(x)


def test_an_executor_with_max_nodes_grows_under_load(session):
    pd = rp.ComputePilotDescription(
        resource="local.nodes4", nodes=1, runtime=5, parts=[CPD(nodes=1)],
        adapt=rp.Adapt(grow_after=0.5, idle_after=1),
    )  # fmt: skip
    with rp.Executor(session=session, pilot_description=pd, max_nodes=3) as ex:
        calls = [ex.submit(node_after, 1.0) for _ in range(16)]
        ran = [f.result(timeout=120) for f in calls]
        with pytest.raises(KeyError, match="no such"):  # the call's own exception, on a node
            ex.submit(refuse, "no such").result(timeout=60)
        grown = ex.pilot.adapt_log
    assert len(set(ran)) > 1 and set(ran) <= {"node0", "node1", "node2"}, ran
    assert grown[0]["action"] == "grow" and grown[0]["nodes"] == 2, grown
    with pytest.raises(ValueError, match="max_nodes= grows the pilot it submits"):
        rp.Executor(session=session, max_nodes=2)
    with pytest.raises(ValueError, match="max_nodes= and partition= given"):
        rp.Executor(session=session, pilot_description=pd, max_nodes=2, partition="x")
