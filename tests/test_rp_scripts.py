"""RADICAL-Pilot scripts run here with one changed line (tests/rp_scripts/: written in RP's
style, `import pilot as rp`): each runs as its own process, to its end, and checks what RP
would give."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pmgr import reaper
from tests.conftest import ROOT

SCRIPTS = os.path.join(ROOT, "tests", "rp_scripts")
NAMES = sorted(f[:-3] for f in os.listdir(SCRIPTS) if f.endswith(".py"))


@pytest.mark.parametrize("name", NAMES)
def test_rp_script_runs_to_its_end(name, tmp_path):
    sessions = tmp_path / "sessions"
    out = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=ROOT, PILOT_SESSIONS_DIR=str(sessions)),
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.rstrip().endswith(f"OK {name}"), out.stdout[-2000:]
    for uid in os.listdir(sessions):
        left = reaper.session_processes(uid)
        if left:
            reaper.kill_session_processes(uid)
        assert not left, f"processes left behind: {left}"
