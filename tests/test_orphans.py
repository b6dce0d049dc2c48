"""The bootstrap's last teardown step (partition/orphans.py end_children): a process it
adopted as a child subreaper (its parent died) and one that ignores SIGTERM both end before
the bootstrap does, so nothing the job started outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pilot import processes
from tests.conftest import ROOT

SCRIPT = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from pilot.partition import orphans
    assert orphans.become_subreaper()
    # a grandchild whose parent (sh) exits at once: adopted here; it ignores SIGTERM
    out = subprocess.run(
        ["sh", "-c", "(trap '' TERM; exec sleep 60) >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    )
    adopted = int(out.stdout)
    plain = subprocess.Popen(["sleep", "60"]).pid  # a child that ends on SIGTERM
    print(json.dumps({"adopted": adopted, "plain": plain}), flush=True)
    time.sleep(0.2)
    t0 = time.monotonic()
    left = orphans.end_children(grace=0.5)
    print(json.dumps({"left": sorted(left), "took": time.monotonic() - t0}), flush=True)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
def test_teardown_ends_adopted_and_stubborn_children():
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    pids = {}
    try:
        out, _ = proc.communicate(timeout=30)
        first, second = (json.loads(line) for line in out.splitlines())
        pids = first
        assert second["left"] == sorted([first["adopted"], first["plain"]])
        assert 0.5 <= second["took"] < 5  # SIGTERM, then SIGKILL for the one that ignores it
        for pid in first.values():
            assert not os.path.exists(f"/proc/{pid}"), f"{pid} outlived end_children"
        assert proc.returncode == 0
    finally:
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        for pid in pids.values():
            processes.signal_process(pid, signal.SIGKILL)
        while any(os.path.exists(f"/proc/{p}") for p in pids.values()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
