"""A full disk is named, never fatal, never silent (tests/scenarios/full_disk_client.py).

Each scenario runs a client in a private mount namespace (unshare -m) with a 2 MB tmpfs that
only it sees: unit sandboxes fill it up, or the session's store lives on it.  Needs root and
util-linux's unshare.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter

import pytest

from pilot.pmgr.core import reaper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "a private tmpfs needs root (mount -t tmpfs in unshare -m)"
    if shutil.which("unshare") is None:
        return "needs `unshare` (apt install util-linux)"
    return None


pytestmark = pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))


def run(scenario: str, tmp_path, timeout: float = 180) -> dict:
    small, roomy = tmp_path / "small", tmp_path / "roomy"
    small.mkdir()
    roomy.mkdir()
    script = (
        f"mount -t tmpfs -o size=2m,mode=0700 tmpfs {small} && exec {sys.executable} "
        f"-m tests.scenarios.full_disk_client {scenario} {small} {roomy}"
    )
    proc = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    left = reaper.session_processes(result["session"])
    if left:
        reaper.kill_session_processes(result["session"])
    assert not left, f"processes left behind: {left}"
    result["stderr"] = err
    return result


def test_full_sandboxes_are_named_in_the_reason_and_the_log(tmp_path):
    r = run("sandboxes", tmp_path)
    units = r["units"]
    states = Counter(u[1] for u in units)
    assert sum(states.values()) == 8 and set(states) <= {"DONE", "FAILED"}, states
    failed = [u for u in units if u[1] == "FAILED"]
    assert failed, "2 MB cannot hold 8 x 400 KB: some units must have lost output"
    for uid, _, code, reason, _ in failed:
        assert code == 0  # (they ran to their end: only their output was lost)
        assert "No space left on device" in reason, reason
        # where: its stdout file, or its stderr file when that write was the one refused
        assert f"{uid}.out" in reason or f"{uid}.err" in reason, reason
        assert "bytes lost" in reason, reason
    for uid, state, _, _, stderr in units:
        if state == "DONE":
            assert r["sizes"][uid] == 400_000  # a DONE unit's output is whole
            assert "its-own-words" in (stderr or "")
    kept = sum(size or 0 for size in r["sizes"].values())
    assert kept > 1_500_000, r["sizes"]  # output kept as far as the disk took it
    assert r["logged"], "the agent's log says nothing of the full disk"
    # exactly once: one final state each, in the store as in the client
    assert r["finals"] == 8
    assert r["stored"] == {u[0]: u[1] for u in units}


def test_a_full_store_holds_units_names_them_and_resumes(tmp_path):
    r = run("store", tmp_path)
    # while the disk was full: the new units wait (never sent unpersisted) and are named
    assert r["states"] == ["DONE", "SCHEDULING"], r["states"]
    assert len(r["unpersisted"]) >= 500, r["unpersisted"][:5]
    assert all(u.startswith("unit.") for u in r["unpersisted"])
    assert r["submit_took"] >= 2.0  # beyond the ids reserved ahead: it waited for the store
    assert "database or disk is full" in r["stderr"]  # sqlite's own words, logged
    assert "no transaction is active" not in r["stderr"]
    # space came back: everything written, everything ran, exactly once
    assert r["after"] == ["DONE"]
    assert r["unpersisted_after"] == []
    assert len(r["stored"]) == r["n"] == 1505
    assert set(r["stored"].values()) == {"DONE"}
