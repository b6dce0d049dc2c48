"""A run to watch with `pilot dashboard`, and the screenshot of the manual (docs/dashboard.png).

A pilot on `local.simulated` (three logical nodes of 4 cores and 2 GPUs) with a partition of
4 cores and 2 GPUs and one of 4 cores.  Waves of sleep units of mixed lengths and widths keep
them busy (a few GPU units, a few that fail); a third of the way in, a reconfig starts a third
partition on the free node, and two thirds in another stops the second partition (its running
units end CANCELED, the others go on in the rest).
`pilot dashboard SESSION` serves it all along; its URL is printed.

    python examples/dashboard_demo.py [--seconds 40] [--screenshot docs/dashboard.png]

With --screenshot the page is opened in Debian's Chromium (Playwright drives it; `pip install
playwright`, `apt-get install chromium`) near the end and saved as a PNG.
"""

from __future__ import annotations

import argparse
import os
import random
import select
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pilot as rp  # noqa: E402
from pilot.pmgr.observe.dashboard import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402

CPD, CUD = rp.ComputePartitionDescription, rp.ComputeUnitDescription


def wave(p0: str, rng: random.Random) -> list:
    units = []
    for _ in range(8):
        units.append(CUD(executable="/bin/sleep", arguments=[f"{rng.uniform(0.5, 3):.2f}"]))
    units.append(CUD(executable="/bin/sleep", arguments=["2"], gpus=1, partition=p0))
    units.append(CUD(executable="/bin/sleep", arguments=["1.5"], cores=2))
    if rng.random() < 0.3:
        units.append(CUD(executable="/bin/sh", arguments=["-c", "exit 3"]))
    return units


def screenshot(url: str, path: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS))
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            page.wait_for_selector("#chart-cores canvas", timeout=30_000)
            page.wait_for_timeout(3_000)
            page.screenshot(path=path, full_page=True)
        finally:
            browser.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--screenshot", help="a PNG of the page, taken near the end")
    args = ap.parse_args()
    rng = random.Random(45)
    pd = rp.ComputePilotDescription(
        resource="local.simulated", parts=[CPD(cores=4, gpus=2), CPD(cores=4)], nodes=3, runtime=10
    )
    with rp.Session() as session:
        pilot = rp.PilotManager(session).submit_pilots(pd)
        for part in pilot.partitions:
            assert part.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, part.reason
        p0, p1 = (p.uid for p in pilot.partitions)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        dash = subprocess.Popen(
            [sys.executable, "-m", "pilot", "dashboard", session.uid],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=ROOT),
        )
        try:
            ready, _, _ = select.select([dash.stdout], [], [], 60)
            url = dash.stdout.readline().strip() if ready else ""
            print(f"session {session.uid}; dashboard: {url}", flush=True)
            t0 = time.monotonic()
            started = stopped = shot = False
            while time.monotonic() - t0 < args.seconds:
                umgr.submit_units(wave(p0, rng))
                elapsed = time.monotonic() - t0
                if not started and elapsed > args.seconds / 3:
                    pilot.reconfig(start=[CPD(cores=4, gpus=2)])
                    started = True
                elif not stopped and elapsed > 2 * args.seconds / 3:
                    pilot.reconfig(stop=p1)
                    stopped = True
                if args.screenshot and not shot and elapsed > args.seconds - 8:
                    session.writer.flush(timeout=30)
                    screenshot(url, args.screenshot)
                    print(f"screenshot: {args.screenshot}", flush=True)
                    shot = True
                time.sleep(1.5)
            umgr.wait_units(timeout=120)
        finally:
            dash.send_signal(signal.SIGTERM)
            dash.wait(30)
            dash.stdout.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
