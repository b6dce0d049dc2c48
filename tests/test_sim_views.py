"""`pilot top` and the dashboard's node view of a pilot of 1,024 simulated nodes (local.sim:
128 cores and 8 GPUs a node, 8 partitions of 128 nodes): a summary per node, not a row per
unit, that says how busy the nodes are as the agents report it, and follows a change.

The workload: 100 units of 128 cores (100 nodes fully busy) and 50 of 64 cores (50 nodes half
busy), all `sleep 300`; then the 50 are canceled.  Both views must show the counts the
workload implies, and show the change.  The browser part runs in Debian's Chromium, as
tests/test_dashboard.py does (skipped, saying why, without it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pilot as rp
from pilot.pmgr.observe.top_frame import SHADES
from tests.conftest import active_pilot
from tests.test_dashboard import Dashboard, browser, page  # noqa: F401 (fixtures)

CPD, CUD = rp.ComputePartitionDescription, rp.ComputeUnitDescription
NODES = 1024


def big_pilot(session):
    pilot, umgr = active_pilot(
        session, parts=[CPD(nodes=NODES // 8)] * 8, resource="local.sim", nodes=NODES, runtime=10
    )
    full = umgr.submit_units([CUD(executable="sleep", arguments=["300"], cores=128)] * 100)
    half = umgr.submit_units([CUD(executable="sleep", arguments=["300"], cores=64)] * 50)
    umgr.wait_units([u.uid for u in full + half], state=rp.EXECUTING, timeout=60)
    return pilot, umgr, half


def top_once() -> str:
    out = subprocess.run(
        [sys.executable, "-m", "pilot", "top", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, COLUMNS="160"),
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def top_until(text: str, deadline_s: float) -> tuple[str, float]:
    """`pilot top --once` until its output holds `text` (the agents report each second);
    the last output and how long it took."""
    t0 = time.monotonic()
    while True:
        out = top_once()
        if text in out or time.monotonic() - t0 > deadline_s:
            return out, time.monotonic() - t0
        time.sleep(0.2)


def test_top_and_the_dashboard_sum_up_a_thousand_nodes(session, page, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    pilot, umgr, half = big_pilot(session)
    busy = "1024 nodes: 1024 up; 100 fully busy, 50 partly, 874 idle; cores 16000/131072"
    out, _ = top_until(busy, 10)
    assert busy in out, out[-3000:]
    lines = out.splitlines()
    assert len(lines) < 80, len(lines)  # a summary: not a row per unit, nor per node
    cells = [ln.strip(" │") for ln in lines]
    grid = [c for c in cells if len(c) == 64 and set(c) <= set(SHADES)]
    assert len(grid) == NODES // 64, lines  # a character per node, 64 to a line

    dash = Dashboard(session.uid, "--port", "0", "--interval", "0.5", log_dir=tmp_path)
    try:
        page.goto(dash.url)
        expect(page.locator(".nodegrid .ncell")).to_have_count(NODES)
        legend = page.locator(".nodesummary .legend")
        expect(legend).to_contain_text("100 fully busy, 50 partly, 874 idle")
        expect(legend).to_contain_text("cores 16,000/131,072")

        umgr.cancel_units([u.uid for u in half])
        umgr.wait_units([u.uid for u in half], timeout=30)
        t0 = time.monotonic()  # the agents' next report (each second), then a poll (0.5 s)
        expect(legend).to_contain_text("100 fully busy, 0 partly, 924 idle", timeout=5000)
        seen = time.monotonic() - t0
        assert seen < 2.5, seen
        out, took = top_until("100 fully busy, 0 partly, 924 idle", 10)
        assert "cores 12800/131072" in out, out[-3000:]
    finally:
        assert dash.stop() == 0, dash.stderr()
