"""`pilot dashboard`: what watching costs a running pilot, and the server's memory on a big session.

    python bench/dashboard.py [--n 100000] [--reps 2] [--viewer browser|events] [--big 10000000]

Cost: N zero-launch units (local.zero: 64 logical cores in 2 partitions; units never start a
process, so the stack alone is measured, as bench/zero.py does), each run in a fresh process:
without the dashboard (the baseline) and with `pilot dashboard SESSION` serving the session and
a page open on it, alternating, --reps runs each.  The page is Debian's Chromium, headless,
with the dashboard loaded (--viewer browser, the default when /usr/bin/chromium exists), or a
reader of the page's event stream (--viewer events).  The clock runs from submit_units until
wait_units has returned and the store has every record (the writer flushed).  Printed per mode:
units/s (median) and its ratio to the baseline, CPU microseconds per unit of the pilot's
bootstrap and agents and of the client, and the dashboard server's CPU seconds and peak RSS.

Size: a synthetic session of --big units (bench/views.py's build: five history rows and a doc
a unit, written as the store writer writes them, 1,000 units/s), served by `pilot dashboard`
with one page's event stream read for LOOKS polls: the server's peak RSS (VmHWM), and the time
from the server's start to its first look (the /api/state answer).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.local_pilot import (  # noqa: E402
    PilotRun,
    cpu_s,
    in_fresh_process,
    status_mb,
    threads_cpu_s,
)
from pilot.pmgr.observe.dashboard import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402

CORES, PARTS = 64, 2
LOOKS = 5  # polls the big session's page waits for
READER = """
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r:
    for line in r:
        if line.startswith(b"event: series"):
            print("look", flush=True)
"""


class Served:
    """`pilot dashboard SESSION` and a viewer on it, each ended by its pid (the browser by
    its process group's id)."""

    def __init__(self, session: str, viewer: str, env: dict) -> None:
        self.env = env
        self.server = subprocess.Popen(
            [sys.executable, "-m", "pilot", "dashboard", session, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )
        ready, _, _ = select.select([self.server.stdout], [], [], 120)
        self.url = self.server.stdout.readline().strip() if ready else ""
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"pilot dashboard printed no URL: {self.url!r}")
        self.base, _, self.token = self.url.partition("/?token=")
        self.profile = None
        if viewer == "browser":
            self.profile = tempfile.mkdtemp(prefix="bench-chromium-")
            args = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", self.url]
            self.viewer = subprocess.Popen(
                args,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        else:
            self.viewer = subprocess.Popen(
                [sys.executable, "-c", READER, f"{self.base}/events?token={self.token}"],
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )

    def looks(self, n: int, timeout: float) -> None:
        """Wait for the event reader to have seen `n` pushes of the series."""
        deadline = time.monotonic() + timeout
        seen = 0
        while seen < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{seen} of {n} looks within {timeout} s")
            ready, _, _ = select.select([self.viewer.stdout], [], [], left)
            if ready and self.viewer.stdout.readline():
                seen += 1

    def stop(self) -> None:
        if getattr(self, "viewer", None) is not None:
            try:
                os.killpg(self.viewer.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self.viewer.wait(30)
            if self.viewer.stdout:
                self.viewer.stdout.close()
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            self.server.wait(30)
        self.server.stdout.close()
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)


def one_run(n: int, mode: str) -> dict:
    """N zero-launch units with the dashboard (mode: browser | events) or without (none)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PILOT_SESSIONS_DIR"] = tmp
        import pilot as rp

        pd = rp.ComputePilotDescription(
            resource="local.zero",
            runtime=600,
            parts=[rp.ComputePartitionDescription(cores=CORES // PARTS) for _ in range(PARTS)],
        )
        with rp.Session() as session:
            pilot = rp.PilotManager(session).submit_pilots(pd)
            for p in pilot.partitions:
                p.wait(rp.ACTIVE, timeout=60)
            umgr = rp.UnitManager(session)
            umgr.add_pilots(pilot)
            served = None
            if mode != "none":
                served = Served(session.uid, mode, dict(os.environ, PYTHONPATH=ROOT))
                if mode == "events":
                    served.looks(2, 60)
                else:
                    time.sleep(5)  # (the page loaded, its stream open, a few pushes drawn)
            descs = [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(n)]
            agents = PilotRun(session, pilot, umgr, 0.0).agents()
            boot, me = pilot.job.pid, os.getpid()

            def sample() -> dict:
                return {
                    "client": sum(s for _, s in threads_cpu_s(me).values()),
                    "pilot": cpu_s(boot)["own"] + sum(cpu_s(a)["own"] for a in agents),
                    "dashboard": cpu_s(served.server.pid)["own"] if served else 0.0,
                }

            try:
                before = sample()
                t0 = time.perf_counter()
                units = umgr.submit_units(descs)
                umgr.wait_units(timeout=900)
                session.writer.flush(timeout=900)
                wall = time.perf_counter() - t0
                after = sample()
                rss = status_mb(served.server.pid, "VmHWM") if served else 0.0
            finally:
                if served is not None:
                    served.stop()
            done = sum(1 for u in units if u.state == rp.DONE)
    us = 1e6 / n
    return {
        "rate": n / wall,
        "done": done,
        "client_us": (after["client"] - before["client"]) * us,
        "pilot_us": (after["pilot"] - before["pilot"]) * us,
        "dashboard_s": after["dashboard"] - before["dashboard"],
        "dashboard_mb": rss,
    }


def big_session(n: int) -> dict:
    """The server's peak RSS and first look on a synthetic session of `n` units."""
    from bench.views import SESSION, build
    from pilot.pmgr.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, SESSION))
        store = open_store(f"sqlite:///{os.path.join(tmp, SESSION, 'state.db')}")
        t = time.perf_counter()
        build(store, n)
        store.close()
        built = time.perf_counter() - t
        size = os.path.getsize(os.path.join(tmp, SESSION, "state.db"))
        env = dict(os.environ, PILOT_SESSIONS_DIR=tmp, PYTHONPATH=ROOT)
        t = time.perf_counter()
        served = Served(SESSION, "events", env)
        try:
            with urllib.request.urlopen(f"{served.base}/api/state?token={served.token}") as r:
                state = json.loads(r.read())
            first = time.perf_counter() - t
            served.looks(LOOKS, 120)
            rss = status_mb(served.server.pid, "VmHWM")
            cpu = cpu_s(served.server.pid)["own"]
        finally:
            served.stop()
    return {
        "units": sum(state["units"].values()),
        "build_s": built,
        "db_mb": size / 2**20,
        "first_s": first,
        "rss_mb": rss,
        "cpu_s": cpu,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=2)
    have = os.access(CHROMIUM, os.X_OK)
    ap.add_argument(
        "--viewer", choices=("browser", "events"), default="browser" if have else "events"
    )
    ap.add_argument("--big", type=int, default=1_000_000, help="units of the big session (0: none)")
    ap.add_argument("--mode", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.n, args.mode)))
        return 0
    modes = ["none", args.viewer]
    runs: dict[str, list] = {m: [] for m in modes}
    for rep in range(args.reps):
        for mode in modes:
            run = in_fresh_process(__file__, ["--n", str(args.n), "--mode", mode], timeout=1800)
            if run is None:
                return 1
            if run["done"] != args.n:
                print(f"only {run['done']} of {args.n} units DONE", file=sys.stderr)
                return 1
            runs[mode].append(run)
            print(f"rep {rep + 1}, {mode}: {run['rate']:,.0f} units/s", file=sys.stderr)
    if args.reps > 0:
        table(args, runs)
    if args.big:
        big = big_session(args.big)
        print(
            f"\nbig session: {big['units']:,} units (built in {big['build_s']:.0f} s, "
            f"{big['db_mb']:.0f} MB of sqlite); server: first look {big['first_s']:.2f} s "
            f"after its start, peak RSS {big['rss_mb']:.0f} MB over {LOOKS} looks, "
            f"CPU {big['cpu_s']:.2f} s (target: RSS < 150 MB)"
        )
    return 0


def table(args, runs: dict) -> None:
    med = statistics.median
    base = med(r["rate"] for r in runs["none"])
    watching = {
        "none": "no dashboard (baseline)",
        "browser": "dashboard + Chromium page",
        "events": "dashboard + event-stream reader",
    }
    print(
        f"\nN={args.n} zero-launch units, local.zero ({CORES} logical cores, {PARTS} partitions), "
        f"sqlite, {os.cpu_count()} cores; medians of {args.reps}; the dashboard polls every 1 s\n"
    )
    print(
        "| run | units/s | ratio | pilot (bootstrap + agents) us/unit | client us/unit "
        "| dashboard CPU s | dashboard peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode, rs in runs.items():
        rate = med(r["rate"] for r in rs)
        print(
            f"| {watching[mode]} | {rate:,.0f} | {rate / base:.3f} | "
            f"{med(r['pilot_us'] for r in rs):.1f} | {med(r['client_us'] for r in rs):.1f} | "
            f"{med(r['dashboard_s'] for r in rs):.2f} | "
            f"{med(r['dashboard_mb'] for r in rs):.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
