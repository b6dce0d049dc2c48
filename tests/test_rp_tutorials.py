"""RADICAL-Pilot's documentation tutorials (tests/rp_tutorials/, RP 1.103's notebooks, unchanged)
run as notebooks: a kernel of this interpreter, cells in order, shell escapes as written, only
`import radical.pilot as rp` changed to `import pilot as rp` (tests/run_notebook.py).  Each runs
in a fresh working directory (the client sandbox) with HOME there too (the tutorials write
~/.radical/pilot/configs and read ~/radical.pilot.sandbox), and shows what it shows under RP."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from pilot.pmgr.core import reaper
from tests.conftest import ROOT
from tests.test_rp1_defaults import RP_PILOT_DEFAULTS, RP_PILOT_KEYS  # (RP's, from its source)

HERE = os.path.join(ROOT, "tests", "rp_tutorials")
# (found, not imported: radical.utils patches fork and logging in the process that imports it)
MISSING = [m for m in ("nbclient", "ipykernel", "radical.utils") if not importlib.util.find_spec(m)]
WHY_NOT = f"the tutorials need the test extra: {MISSING} missing" if MISSING else None
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))


def run(name: str, tmp_path) -> dict[int, str]:
    """The text each code cell showed, by cell index."""
    sessions = tmp_path / "sessions"
    out = tmp_path / "shown.json"
    bindir = os.path.dirname(sys.executable)  # (an activated virtualenv: radical-stack, ...)
    env = dict(
        os.environ,
        HOME=str(tmp_path),
        PILOT_SESSIONS_DIR=str(sessions),
        PYTHONPATH=ROOT,
        PATH=f"{bindir}:{os.environ.get('PATH', '')}",
    )
    env.pop("RADICAL_CONFIG_USER_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.run_notebook", os.path.join(HERE, name), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=env,
    )
    shown = {i: text for i, _, text in json.loads(out.read_text())} if out.exists() else {}
    for uid in os.listdir(sessions) if sessions.exists() else []:
        left = reaper.session_processes(uid)
        if left:
            reaper.kill_session_processes(uid)
        assert not left, f"processes left behind: {left}"
    assert proc.returncode == 0, (proc.stderr[-3000:], shown)
    return shown


def test_getting_started(tmp_path):
    shown = run("getting_started.ipynb", tmp_path)
    assert "radical.utils" in shown[1]  # !radical-stack
    assert "Getting Started (RP version" in shown[7]
    assert "ACTIVE" in shown[15]
    assert "(10) DONE" in shown[25]
    sandbox, listing = shown[29].split("\n")[:2]
    assert sandbox.startswith(f"{tmp_path}/radical.pilot.sandbox/session.")
    assert "task.000000.out" in listing.split()
    assert shown[31].startswith("0 : PID     : ")  # radical-pilot-hello.sh's report
    assert "0 : THREADS : 1" in shown[31]


def test_multiple_pilots(tmp_path):
    shown = run("multiple_pilots.ipynb", tmp_path)
    assert shown[7].strip() == "['pilot.0000', 'pilot.0001', 'pilot.0002']"
    assert shown[8].strip() == "['DONE', 'DONE', 'DONE', 'DONE']"
    # pinned to a pilot never added: it waits (TMGR_SCHEDULING), said once
    assert shown[12].splitlines()[-1] == "'SCHEDULING'"
    assert shown[12].count("unknown_pilot_id") == 1
    lines = shown[14].splitlines()
    assert [x.split(" - ")[0] for x in lines] == [f"task.00000{i}" for i in range(5)]
    assert {x.split("output: pilot_id=")[1][:10] for x in lines[:4]} == {
        "pilot.0000",
        "pilot.0001",
        "pilot.0002",
    }
    assert "task is assigned to pilot.0003" in lines[4] and 'pilot="pilot.0003"' in lines[4]
    # RP's task.description['pilot'] of a task pinned to no pilot: '' (RP 1.103's default)
    assert all(x.endswith('(in task description: pilot="")') for x in lines[:4]), lines


def test_staging_data(tmp_path):
    shown = run("staging_data.ipynb", tmp_path)
    assert shown[9].strip() == "['DONE', 'DONE']"
    # pilot.stage_out returns the targets as RP 1.103's complete_url makes them: client:///x
    # is the path of x in the client sandbox (the working directory)
    here = os.path.realpath(tmp_path)
    assert ast.literal_eval(shown[11]) == [f"{here}/output_dir/output.{i}.txt" for i in (0, 1)]
    assert (
        shown[12].splitlines()
        == ["Staged data (task_id=$RP_TASK_ID | pilot_id=$RP_PILOT_ID | session_id=$RP_SESSION_ID)"]
        * 2
    )  # the file's text, word-split by the shell (RP's $(cat input.txt) argument)


def test_configuration(tmp_path):
    shown = run("configuration.ipynb", tmp_path)
    assert "resource_manager     : SLURM" in shown[8]
    assert "cores_per_node       : 56" in shown[8]
    assert shown[9].split() == [
        "job_manager_endpoint",
        ":",
        "slurm+ssh://frontera.tacc.utexas.edu/",
        "filesystem_endpoint",
        ":",
        "sftp://frontera.tacc.utexas.edu/",
    ]
    assert "label                : tacc.frontera_tutorial" in shown[11]
    assert "job_manager_endpoint : slurm://frontera.tacc.utexas.edu/" in shown[11]
    assert "'state': 'PENDING'" in shown[14] and "'cores': 56" in shown[14]
    # pilot.as_dict(): RP 1.103's keys, with the no_submission schema's endpoints
    pilot = ast.literal_eval(shown[14])
    assert set(RP_PILOT_KEYS) <= set(pilot), set(RP_PILOT_KEYS) - set(pilot)
    assert pilot["session"].startswith("session.") and pilot["pmgr"] == "pmgr.0000"
    assert (pilot["js_url"], pilot["js_hop"]) == ("fork://localhost/", "fork://localhost/")
    assert pilot["endpoint_fs"] == "file://localhost/"
    box = f"file://localhost{os.path.realpath(tmp_path)}/radical.pilot.sandbox"
    assert pilot["resource_sandbox"] == box
    assert pilot["session_sandbox"] == f"{box}/{pilot['session']}"
    assert pilot["pilot_sandbox"] == f"{box}/{pilot['session']}/pilot.0000/"
    assert pilot["resources"] == {"cpu": 56, "gpu": 0}
    described = pilot["description"]  # the PilotDescription as given, every key
    assert set(RP_PILOT_DEFAULTS) <= set(described)
    assert {k: described[k] for k in RP_PILOT_DEFAULTS} == {
        **RP_PILOT_DEFAULTS,
        "resource": "tacc.frontera_tutorial",
        "access_schema": "no_submission",
        "project": "XYZ000",
        "queue": "production",
        "cores": 56,
        "runtime": 15,
        "exit_on_error": False,
    }


def test_debugging(tmp_path):
    shown = run("debugging.ipynb", tmp_path)
    assert "task.000000: DONE\ntask.000001: FAILED" in shown[3]
    assert "task.000001 stderr: /bin/sh: 1: data: not found" in shown[5]
    assert "task.000001.err" in shown[7] and shown[7].rstrip().endswith("data: not found")


def test_profiling(tmp_path):
    shown = run("profiling.ipynb", tmp_path)
    events = [line.split(",") for line in shown[6].splitlines()]
    assert [e[1] for e in events] == ["app_start", "app_stop"]
    assert {e[4] for e in events} == {"task.000000"}
    assert sorted(x.split(":")[0] for x in shown[8].splitlines()) == [
        f"task.00000{i}" for i in range(10)
    ]
    assert len([x for x in shown[10].splitlines() if "-> start:" in x and "stop:" in x]) == 10


def test_raptor(tmp_path):
    shown = run("raptor.ipynb", tmp_path)
    assert "'ACTIVE'" in shown[3]
    assert "out: This is a very odd message: 3" in shown[9]
    assert "out: Regular message" in shown[9] and shown[9].count("[DONE]") == 2
