"""One call at a time: a round trip's latency and a large argument's cost, beside
ProcessPoolExecutor, in one run.

    python bench/latency.py                     # ~1 min on 2 cores: the table below
    python bench/latency.py --calls 50 --rounds 3 --sizes 1024,102400,2000000

Rows (each the median of --calls round trips, one after another, on a warm pilot / pool):
  - call      rp.Executor().submit(pow, 2, 10).result()          vs ProcessPoolExecutor(2)
  - unit      one /bin/true unit, submit_units -> wait_units DONE (no peer: the pool row is
              pool.submit(os.system, "/bin/true"), a process started by a worker)
  - data N    rp.Executor().submit(identity, b"x" * N).result(): N bytes there and back,
              against the pool's same call
  - dask      one Dask graph of 454 small tasks (a 1000 x 1000 array in 100 x 100 chunks:
              (x + x.T).sum(axis=0).mean()) computed with scheduler=rp.Executor, against Dask's
              own processes scheduler with 2 workers (median of 5 computes, warm); only when
              dask is installed
Every round is a fresh process for each side, ours and the pool's alternating (a noisy minute
on the shared machine hits both); the table shows the median over rounds, ms, and
ratio = ours / pool.  Targets: call <= 1 ms, unit <= 2 ms, data 2 MB <= 2 x pool, dask <= 1 x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def identity(x):
    return x


def _graph():
    try:
        import dask.array as da
    except ImportError:
        return None
    x = da.ones((1000, 1000), chunks=(100, 100))
    return (x + x.T).sum(axis=0).mean()


def _dask_ms(graph, **how) -> float:
    import dask

    assert dask.compute(graph, **how)[0] == 2000.0
    return _median_ms(lambda: dask.compute(graph, **how), 5)


def _median_ms(f, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def ours(calls: int, sizes: list[int]) -> dict:
    import tempfile

    import pilot as rp

    out = {}
    with tempfile.TemporaryDirectory() as tmp, rp.Session(dir=tmp) as session:
        pd = rp.ComputePilotDescription(
            resource="local.localhost", cores=2, runtime=10,
            parts=[rp.ComputePartitionDescription(cores=2)],
        )  # fmt: skip
        pilot = rp.PilotManager(session).submit_pilots(pd)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        pilot.partitions[0].wait(rp.ACTIVE, timeout=60)
        true = rp.ComputeUnitDescription(executable="/bin/true")

        def unit():
            u = umgr.submit_units(true)
            umgr.wait_units(u.uid, timeout=60)

        for _ in range(10):
            unit()
        out["unit"] = _median_ms(unit, calls)
        with rp.Executor(session=session, pilot=pilot) as ex:
            for _ in range(20):
                ex.submit(pow, 2, 10).result()
            out["call"] = _median_ms(lambda: ex.submit(pow, 2, 10).result(), calls)
            for n in sizes:
                x = b"x" * n
                ex.submit(identity, x).result()
                out[f"data {n}"] = _median_ms(lambda x=x: ex.submit(identity, x).result(), calls)
            if (graph := _graph()) is not None:
                out["dask"] = _dask_ms(graph, scheduler=ex)
        pilot.cancel()
    return out


def pool(calls: int, sizes: list[int]) -> dict:
    import concurrent.futures as cf

    out = {}
    with cf.ProcessPoolExecutor(2) as pp:
        for _ in range(20):
            pp.submit(pow, 2, 10).result()
        out["unit"] = _median_ms(lambda: pp.submit(os.system, "/bin/true").result(), calls)
        out["call"] = _median_ms(lambda: pp.submit(pow, 2, 10).result(), calls)
        for n in sizes:
            x = b"x" * n
            pp.submit(identity, x).result()
            out[f"data {n}"] = _median_ms(lambda x=x: pp.submit(identity, x).result(), calls)
    if (graph := _graph()) is not None:
        out["dask"] = _dask_ms(graph, scheduler="processes", num_workers=2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1024,102400,2000000", help="bytes of the data rows")
    ap.add_argument("--one", choices=("ours", "pool"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.one:
        print(json.dumps((ours if args.one == "ours" else pool)(args.calls, sizes)))
        return 0
    runs: dict = {"ours": [], "pool": []}
    for _ in range(args.rounds):
        for side in ("ours", "pool"):
            done = subprocess.run(
                [sys.executable, __file__, "--one", side, "--calls", str(args.calls)]
                + ["--sizes", args.sizes],
                capture_output=True, text=True, timeout=600, cwd=ROOT,
            )  # fmt: skip
            if done.returncode:
                sys.stderr.write(done.stderr)
                return 1
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"\none call at a time, median of {args.calls} a round, median of {args.rounds} rounds")
    print("\n| row | ours ms | ProcessPoolExecutor(2) ms | ratio |")
    print("|---|---|---|---|")
    for row in runs["ours"][0]:
        a = statistics.median(r[row] for r in runs["ours"])
        b = statistics.median(r[row] for r in runs["pool"])
        print(f"| {row} | {a:.2f} | {b:.2f} | {a / b:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
