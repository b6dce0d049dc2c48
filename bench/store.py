"""State store: write throughput per backend, and what persistence costs unit throughput.

    python bench/store.py [--n 5000] [--reps 3]

  writes   updates/s persisted by each backend: one batch of N unit docs + 4N history rows,
           the shape of N units' lifetimes (sqlite file; MongoDB through SecantusDB started
           here, or MONGODB_URI)
  units    N null units through the whole path on a 2-core localhost pilot (sandboxes on
           tmpfs), with persistence off (null://, the baseline, same run), the embedded sqlite
           store, and MongoDB; the write lag is the largest age of a record when written
Target: the embedded store lowers unit throughput by no more than 10% against persistence off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pilot as rp  # noqa: E402
from pmgr.store import open_store  # noqa: E402
from pmgr.store.base import Batch  # noqa: E402


def write_rate(url: str, n: int) -> float:
    store = open_store(url)
    b = Batch()
    now = time.time()
    for i in range(n):
        uid = f"unit.{i:06d}"
        b.docs["units"][uid] = {
            "uid": uid,
            "session": "bench",
            "state": "DONE",
            "exit_code": 0,
            "description": {"executable": "/bin/true"},
        }
        for seq, s in enumerate(("SCHEDULING", "QUEUED", "EXECUTING", "DONE"), 1):
            b.history.append(("bench", "units", uid, s, now, None, seq))
    t0 = time.perf_counter()
    store.write_batch(b)
    dt = time.perf_counter() - t0
    store.close()
    return len(b) / dt


def unit_run(url: str, n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        pd = rp.ComputePilotDescription(
            resource="local.localhost",
            parts=[rp.ComputePartitionDescription(cores=2)],
            cores=2,
            runtime=30,
        )
        with rp.Session(dir=tmp, database_url=url) as s:
            pilot = rp.PilotManager(s).submit_pilots(pd)
            umgr = rp.UnitManager(s)
            umgr.add_pilots(pilot)
            umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 4)
            umgr.wait_units(timeout=60)
            t0 = time.perf_counter()
            units = umgr.submit_units(
                [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(n)]
            )
            umgr.wait_units([u.uid for u in units], timeout=600)
            rate = n / (time.perf_counter() - t0)
            s.writer.flush(timeout=600)
            return rate, s.writer.max_lag


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    server = None
    mongo = os.environ.get("MONGODB_URI")
    tmp = tempfile.mkdtemp()
    if not mongo:
        from tests.mongo_server import MongoServer

        os.makedirs(f"{tmp}/db")
        server = MongoServer(f"{tmp}/db")
        server.start()
        mongo = server.url
    from tests.mongo_server import with_database

    try:
        backends = {
            "sqlite": lambda i: f"sqlite:///{tmp}/bench{i}.db",
            "mongodb": lambda i: with_database(mongo, f"pilot_bench_{os.getpid()}_{i}"),
        }
        writes = {
            k: [write_rate(f(i), args.n) for i in range(args.reps)] for k, f in backends.items()
        }
        rows = {"off (null://)": lambda i: "null://", **backends}
        runs = {k: [] for k in rows}
        for i in range(args.reps):  # interleaved
            for k, f in rows.items():
                runs[k].append(unit_run(f(100 + i), args.n))
    finally:
        if server:
            server.stop()
    base = statistics.median(r for r, _ in runs["off (null://)"])
    print(f"\nstate store, N={args.n}, {args.reps} reps\n")
    print("| backend | batch write, records/s | units/s | vs persistence off | write lag s |")
    print("|---|---|---|---|---|")
    for k, rs in runs.items():
        w = writes.get(k.split()[0])
        rate = statistics.median(r for r, _ in rs)
        lag = max(lag for _, lag in rs)
        print(f"| {k} | {statistics.median(w):,.0f} |" if w else f"| {k} | - |", end="")
        print(f" {rate:,.0f} | {rate / base - 1:+.0%} | {lag:.2f} |")
    print("\ntarget: sqlite within -10% of persistence off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
