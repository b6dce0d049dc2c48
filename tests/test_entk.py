"""RADICAL-EnTK's API as `pilot.entk` (pmgr/compat/entk/).  Pipelines of our own in EnTK's style
(tests/entk_scripts/) each run as a process, in a fresh working directory, and are checked for
what EnTK would show: the order of stages from the times their tasks recorded, pipelines side
by side, what a post_exec added, the contents of staged data, suspend and resume, failed tasks;
then the partitions-per-stage example (examples/entk_partitions.py).  Below them, without a
pilot: the errors EnTK's objects raise, each naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pilot.entk as re
from pilot.pmgr.compat.entk import references
from pilot.pmgr.compat.entk.describe import Catalog
from pilot.pmgr.core import reaper
from tests.conftest import ROOT

SCRIPTS = os.path.join(ROOT, "tests", "entk_scripts")
TASK_DONE = ["DESCRIBED", "SCHEDULING", "SCHEDULED", "SUBMITTING", "DONE"]
STAGE_DONE = ["DESCRIBED", "SCHEDULING", "SCHEDULED", "DONE"]


def run(script: str, cwd, sessions, *args: str, timeout: float = 120) -> str:
    """Run `script` as its own process in `cwd`; its stdout.  No process of its sessions may
    be left behind."""
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_SESSIONS_DIR=str(sessions))
    env.pop("RADICAL_PILOT_BULK_CB", None)
    try:
        out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                             timeout=timeout, cwd=cwd, env=env)  # fmt: skip
    finally:
        left = {}
        for uid in os.listdir(sessions):
            pids = reaper.session_processes(uid)
            if pids:
                left[uid] = pids
                reaper.kill_session_processes(uid)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert not left, f"processes left behind: {left}"
    return out.stdout


def result(stdout: str) -> dict:
    lines = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, stdout[-2000:]
    return json.loads(lines[-1][len("RESULT ") :])


def times(path) -> dict:
    """times.txt ('<pipeline>.<stage>.<task> start|end <epoch>') as {(p, s): (first start,
    last end)}."""
    spans: dict = {}
    for line in path.read_text().splitlines():
        label, kind, when = line.rsplit(" ", 2)
        p, s, _ = label.split(".")
        first, last = spans.get((p, s), (float("inf"), 0.0))
        t = float(when)
        spans[p, s] = (min(first, t), last) if kind == "start" else (first, max(last, t))
    return spans


def in_order(spans: dict, pipeline: str, stages: list[str]) -> None:
    for before, after in zip(stages, stages[1:]):
        ended, started = spans[pipeline, before][1], spans[pipeline, after][0]
        assert started >= ended, f"{pipeline}: {after} started {ended - started:.3f} s early"


def script(name: str, tmp_path, sessions_dir, *args: str):
    work = tmp_path / "work"
    work.mkdir()
    return run(os.path.join(SCRIPTS, f"{name}.py"), work, sessions_dir, *args), work


def test_stages_in_order_pipelines_side_by_side_and_a_second_run(tmp_path, sessions_dir):
    out, work = script("order_and_concurrency", tmp_path, sessions_dir)
    res = result(out)
    assert res["same_pilot"]  # run() again: the same pilot
    for name, p in res["pipelines"].items():
        assert p["history"] == ["DESCRIBED", "SCHEDULING", "DONE"], name
        for s in p["stages"]:
            assert s["history"] == STAGE_DONE
            assert [t["history"] for t in s["tasks"].values()] == [TASK_DONE] * 2
    spans = times(work / "times.txt")
    for p in ("a", "b", "c"):
        in_order(spans, p, ["s1", "s2", "s3"])
    for s in ("s1", "s2", "s3"):  # a's and b's stages run at the same time
        (a0, a1), (b0, b1) = spans["a", s], spans["b", s]
        assert max(a0, b0) < min(a1, b1), f"{s}: a and b did not overlap"
    assert spans["c", "s1"][0] >= max(spans["a", "s3"][1], spans["b", "s3"][1])
    assert "Update: a.s1.t1 state: DONE" in out  # EnTK's report


def test_post_exec_adds_tasks_and_stages(tmp_path, sessions_dir):
    out, work = script("adaptive", tmp_path, sessions_dir)
    res = result(out)
    pipe = res["pipelines"]["adapt"]
    assert res["n"] == 3 and pipe["state"] == "DONE"
    assert [s["name"] for s in pipe["stages"]] == ["count", "work", "more 1", "more 2"]
    assert sorted(pipe["stages"][1]["tasks"]) == ["w0", "w1", "w2", "w3"]  # 3 added
    assert all(s["state"] == "DONE" for s in pipe["stages"])
    spans = times(work / "times.txt")
    in_order(spans, "adapt", ["work", "more 1", "more 2"])


def test_suspend_and_resume_from_post_exec(tmp_path, sessions_dir):
    out, work = script("suspend_resume", tmp_path, sessions_dir)
    res = result(out)
    a, b = res["pipelines"]["a"], res["pipelines"]["b"]
    assert res["suspended"] == "SUSPENDED"
    assert res["before_resume"] == ["DONE", "DESCRIBED", "DESCRIBED"]  # s1 ran to its end
    assert b["history"] == ["DESCRIBED", "SCHEDULING", "SUSPENDED", "SCHEDULING", "DONE"]
    assert a["state"] == "DONE"
    spans = times(work / "times.txt")
    resumed = spans["a", "s3"][1]  # a's last stage's post_exec resumed b
    assert spans["b", "s1"][1] < resumed  # b's first stage ended while b was suspended
    assert spans["b", "s2"][0] >= resumed  # and its second one waited for resume()
    in_order(spans, "b", ["s1", "s2", "s3"])


def test_staged_data_references_and_a_failed_task(tmp_path, sessions_dir):
    out, work = script("data", tmp_path, sessions_dir)
    res = result(out)
    data, bad = res["pipelines"]["data"], res["pipelines"]["bad"]
    assert data["state"] == "DONE"
    assert (work / "got" / "all.txt").read_text() == "shared\nlocal\nshared\nSHARED\nLOCAL\n"
    assert (work / "final.txt").read_text() == "SHARED\nLOCAL\n"  # AppManager.outputs
    maker = data["stages"][0]["tasks"]["maker"]["path"]
    user = data["stages"][1]["tasks"]["user"]["path"]
    assert os.readlink(os.path.join(user, "both.txt")) == os.path.join(maker, "both.txt")
    failing = bad["stages"][0]["tasks"]["failing"]
    assert (failing["state"], failing["exit_code"]) == ("FAILED", 3)
    assert "3" in failing["exception"] and res["detail"] == "going wrong\n"
    assert bad["state"] == "DONE" and bad["stages"][0]["state"] == "DONE"  # not error_is_fatal
    assert "Task task." in out and "going wrong" in out  # reported


def test_resubmitted_and_fatal_failures(tmp_path, sessions_dir):
    out, work = script("failures", tmp_path, sessions_dir)
    res = result(out)
    flaky = res["pipelines"]["retried"]["stages"][0]["tasks"]["flaky"]
    assert flaky["state"] == "DONE" and flaky["exception"] is None
    failed_run = [*TASK_DONE[:-1], "FAILED"]
    assert flaky["history"] == failed_run * 2 + TASK_DONE  # resubmit_failed: FAILED -> DESCRIBED
    assert (work / "runs.txt").read_text() == "run\n" * 3
    failing, beside = res["pipelines"]["failing"], res["pipelines"]["beside"]
    assert res["error"].startswith("EnTKError: Pipeline pipeline.")
    assert "task failing.s1.fatal: exit code 5" in res["error"]
    assert failing["history"][-1] == "FAILED" and failing["stages"][0]["state"] == "FAILED"
    assert failing["stages"][1]["state"] == "DESCRIBED"  # never started
    assert beside["state"] == "CANCELED" and res["sid_after"] is None  # run() terminated


def test_a_post_exec_that_raises_leaves_nothing_running_or_unfinished(tmp_path, sessions_dir):
    out, _ = script("post_exec_raises", tmp_path, sessions_dir)
    res = result(out)
    assert res["error"].startswith("EnTKError: post_exec of stage"), res["error"]
    assert "boom in post_exec" in res["error"]
    raising, beside = res["pipelines"]["raising"], res["pipelines"]["beside"]
    assert raising["state"] == "CANCELED", raising
    assert beside["state"] == "CANCELED", beside
    long = beside["stages"][0]
    assert long["state"] == "CANCELED" and long["tasks"]["t"]["state"] == "CANCELED", long
    assert raising["stages"][1]["state"] == "DESCRIBED"  # never started


def test_partitions_per_stage_example(tmp_path, sessions_dir):
    example = os.path.join(ROOT, "examples", "entk_partitions.py")
    work = tmp_path / "work"
    work.mkdir()
    out = run(example, work, sessions_dir, "--tasks", "2", "--summary", "summary.json")
    stages = json.loads((work / "summary.json").read_text())
    assert [s["stage"] for s in stages] == ["simulate 1", "analyse 1", "simulate 2", "analyse 2"]
    for before, after in zip(stages, stages[1:]):
        assert after["start"] >= before["end"]
    where = [{t["partition"] for t in s["tasks"]} for s in stages]
    names = [{t["name"] for t in s["tasks"]} for s in stages]
    assert names == [{"simulate"}, {"analyse", "lent"}, {"simulate"}, {"analyse", "lent"}]
    assert where[0] != where[2]  # simulate stopped for analyse 1, started again for simulate 2
    assert (where[1] - where[3]) and (where[1] & where[3])  # 'lent' anew, 'analyse' the same
    for s in stages:
        assert all(t["state"] == "DONE" for t in s["tasks"])
        gpus = {t["gpus"] for t in s["tasks"]}
        assert ("" not in gpus) if s["stage"].startswith("simulate") else gpus == {""}
    assert "analyse 2" in out


# -- without a pilot ----------------------------------------------------------------------------
def test_entk_objects_refuse_what_entk_refuses():
    t = re.Task()
    with pytest.raises(re.EnTKValueError, match="name"):
        t.name = "a_b"  # '_' separates the words of a reference
    with pytest.raises(re.EnTKError, match="re-assigned"):
        t.uid = "x"
    with pytest.raises(re.EnTKValueError, match="cpu_processes"):
        t.cpu_reqs = {"cpu_processes": 0}
    t.cpu_reqs = {"processes": 2, "process_type": "MPI", "threads_per_process": 2}
    assert (t.cpu_reqs.cpu_processes, t.cpu_reqs.cpu_threads) == (2, 2)
    assert re.Task({"executable": "/bin/true", "arguments": ["x"]})["arguments"] == ["x"]
    amgr = re.AppManager()
    with pytest.raises(re.EnTKMissingError, match="cpus"):
        amgr.resource_desc = {"resource": "local.localhost", "walltime": 10}
    with pytest.raises(re.EnTKValueError, match="nodes"):
        amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 1, "nodes": 1}
    p = re.Pipeline()
    with pytest.raises(re.EnTKTypeError, match="set or list"):
        amgr.workflow = p
    with pytest.raises(re.EnTKMissingError, match="stages is empty"):
        amgr.workflow = [p]
    with pytest.raises(re.EnTKMissingError, match="workflow"):
        amgr.run()


def test_suspend_and_resume_rules():
    p = re.Pipeline()
    with pytest.raises(re.EnTKError, match="not suspended"):
        p.resume()
    p.suspend()
    with pytest.raises(re.EnTKError, match="suspended"):
        p.suspend()
    p.resume()
    assert p.state_history == ["DESCRIBED", "SUSPENDED", "DESCRIBED"]


def test_references_name_one_task_by_name_or_uid():
    t = re.Task()
    t.name = "t"
    t.executable = "/bin/true"
    s = re.Stage()
    s.name = "s"
    s.add_tasks(t)
    p = re.Pipeline()
    p.add_stages(s)  # an unnamed pipeline is 'None' by name
    cat = Catalog()
    cat.pilot_sandbox = "/sb"
    cat.add([p])
    by_name = references.pilot_side("o", "$Pipeline_None_Stage_s_Task_t/x", cat)
    by_uid = references.pilot_side("o", f"$Pipeline_{p.uid}_Stage_{s.uid}_Task_{t.uid}/x", cat)
    assert by_name == by_uid == f"file:///sb/{t.uid}/x"
    assert references.pilot_side("o", "$SHARED/y", cat) == "pilot:///y"
    assert references.argument("o", "$SHARED/y", cat) == "$RP_PILOT_SANDBOX/y"
    with pytest.raises(re.EnTKValueError, match="no task has the uid or name 'u'"):
        references.pilot_side("o", "$Pipeline_None_Stage_s_Task_u/x", cat)
