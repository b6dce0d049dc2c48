"""RADICAL-Pilot's documentation tutorials (tests/rp_tutorials/, RP 1.103's notebooks, unchanged)
run as notebooks: a kernel of this interpreter, cells in order, shell escapes as written, only
`import radical.pilot as rp` changed to `import pilot as rp` (tests/run_notebook.py).  Each runs
in a fresh working directory (the client sandbox) with HOME there too (the tutorials write
~/.radical/pilot/configs and read ~/radical.pilot.sandbox), and shows what it shows under RP."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pilot.pmgr import reaper
from tests.conftest import ROOT

HERE = os.path.join(ROOT, "tests", "rp_tutorials")
try:
    import nbclient  # noqa: F401
    import radical.utils  # noqa: F401  (the tutorials' own import: `import radical.utils as ru`)

    WHY_NOT = None
except ImportError as exc:
    WHY_NOT = f"the tutorials need the test extra (nbclient, ipykernel, radical.utils): {exc}"
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
