"""examples/pipeline.py end to end: every stage DONE, the reconfigs in the store, the picture."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from pilot.pmgr.core import reaper
from pilot.pmgr.store import open_store
from tests.conftest import ROOT

DEADLINE = 120  # s; the example takes about 15 s
# units per simulation stage (the example's --tasks; its default 4): with 2, every stage still
# spreads its units over all it runs on (both GPUs; the analyse partition and the lent one)
# and ends DONE, the reconfigs and the picture are the same; one wave of units per stage
# instead of two (~6 s instead of ~11 s of stages)
TASKS = 2
STAGES = ("simulate-1", "analyse-1", "simulate-2", "analyse-2")


def test_pipeline_example_runs_its_stages_reconfigs_and_plots(sessions_dir, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "examples", "pipeline.py"), "--plot", str(png)]
        + ["--tasks", str(TASKS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(tmp_path),
        env={**os.environ, "PILOT_SESSIONS_DIR": str(sessions_dir)},
        start_new_session=True,  # its own process group: killed as one if it overruns
    )
    try:
        out, _ = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    session = re.search(r"^session (session\.\S+)", out or "", re.M)
    uid = session.group(1) if session else None
    left = reaper.session_processes(uid) if uid else []
    if left:
        reaper.kill_session_processes(uid)
    assert proc.returncode == 0, out
    assert not left, f"processes left behind by the example: {left}"

    for name in STAGES:
        done = re.search(rf"^stage {name} +(\d+)/(\d+) units DONE .* on (pilot\S+)", out, re.M)
        assert done and done.group(1) == done.group(2) != "0", f"{name}:\n{out}"
    assert len(re.findall(r"^reconfig: stop pilot\.\S+ \([\w+]+\), start pilot", out, re.M)) == 3

    store = open_store(f"sqlite:///{sessions_dir / uid / 'state.db'}")
    try:
        parts = store.find("partitions", session=uid)
    finally:
        store.close()
    stopped = [p["uid"] for p in parts if p.get("reason") == "stopped by reconfig"]
    assert len(parts) == 5 and len(stopped) == 3, parts
    assert "5 partitions, 3 reconfigs" in out

    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 300_000
