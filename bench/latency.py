"""One call at a time: a round trip's latency and a large argument's cost; then calls in a
batch, from a fresh executor after one warm-up call; beside ProcessPoolExecutor (and Parsl's
own ceiling), in one run.

    python bench/latency.py                     # ~4 min on 2 cores: the two tables below
    python bench/latency.py --calls 50 --rounds 3 --sizes 1024,102400,2000000
    python bench/latency.py --batches 5000 --unbundled 5000 --parsl ""   # no parsl-perf row
    python bench/latency.py --one batch --kind unbundled --n 20000 [--fn script]   # one side

Rows (each the median of --calls round trips, one after another, on a warm pilot / pool):
  - call      rp.Executor().submit(pow, i, 2).result(), i = 0, 1, 2 ... (every call's
              arguments its own, as a program's are)   vs ProcessPoolExecutor(2)
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

Second table, calls per second (ratio = ours / peer: higher is better), each a fresh process:
  - N calls   rp.Executor() with its defaults (a local pilot of all cores), one warm-up call,
              then submit(pow, i, 2) for i in range(N) and every result, timed from the first
              submit (the ramp before results flow counts: small batches are what interactive,
              asyncio and Dask users submit), against ProcessPoolExecutor() the same way
              (--batches)
  - N calls, bundle=False   a unit per call (--unbundled), against the same pool
  - parsl-perf N   Parsl's own benchmark with pilot.parsl's PilotExecutor against Parsl's
              ceiling, its DataFlowKernel with an in-process ThreadPoolExecutor (--parsl;
              bench/executors.py has the HighThroughputExecutor row too); when parsl is installed
Targets (issue 58): >= 1.0 x the pool for 5,000 calls and bundle=False, >= 0.95 x Parsl's
ceiling at 20,000 tasks.
"""

from __future__ import annotations

import argparse
import itertools
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


def square(x, y):
    """A function of the script, as a user's are: pickled by value (~1 KB), not by name."""
    total = 0
    for _ in range(y):
        total += x * x
    return total // y


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
            for i in range(20):
                ex.submit(pow, i, 2).result()
            i = itertools.count()
            out["call"] = _median_ms(lambda: ex.submit(pow, next(i), 2).result(), calls)
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
        for i in range(20):
            pp.submit(pow, i, 2).result()
        out["unit"] = _median_ms(lambda: pp.submit(os.system, "/bin/true").result(), calls)
        i = itertools.count()
        out["call"] = _median_ms(lambda: pp.submit(pow, next(i), 2).result(), calls)
        for n in sizes:
            x = b"x" * n
            pp.submit(identity, x).result()
            out[f"data {n}"] = _median_ms(lambda x=x: pp.submit(identity, x).result(), calls)
    if (graph := _graph()) is not None:
        out["dask"] = _dask_ms(graph, scheduler="processes", num_workers=2)
    return out


def batch(kind: str, n: int, fn=pow) -> float:
    """(in the fresh process) Calls per second of submit(fn, i, 2) for i in range(n) after
    one warm-up call, from the first submit to the last result."""
    if kind == "pool":
        import concurrent.futures as cf

        ex = cf.ProcessPoolExecutor()
    else:
        import pilot as rp

        ex = rp.Executor(bundle=kind == "ours")
    with ex:
        assert ex.submit(pow, 2, 10).result() == 1024
        t0 = time.perf_counter()
        fs = [ex.submit(fn, i, 2) for i in range(n)]
        assert all(f.result() == i * i for i, f in enumerate(fs))
        return n / (time.perf_counter() - t0)


def _fresh(args: list[str]) -> str:
    """The last line a fresh process of this script prints."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, __file__, *args], capture_output=True, text=True, timeout=900,
            cwd=ROOT, env={**os.environ, "PILOT_SESSIONS_DIR": tmp},
        )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{args} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def rates(batches: list[int], unbundled: list[int], parsl: str, rounds: int) -> list[tuple]:
    """The second table's rows: (label, ours /s, peer /s), medians over `rounds`."""
    runs: dict = {}
    for _ in range(rounds):
        for label, kind, n in [
            *((f"{n:,} calls", "ours", n) for n in batches),
            *((f"{n:,} calls, bundle=False", "unbundled", n) for n in unbundled),
        ]:
            ours = float(_fresh(["--one", "batch", "--kind", kind, "--n", str(n)]))
            pool = float(_fresh(["--one", "batch", "--kind", "pool", "--n", str(n)]))
            runs.setdefault(label, ([], [], "ProcessPoolExecutor()"))
            runs[label][0].append(ours)
            runs[label][1].append(pool)
        if parsl:
            import tempfile

            from bench.executors import OURS_CONFIG, parsl_perf, threads_config

            with tempfile.TemporaryDirectory() as tmp:
                label = f"parsl-perf --iterate {parsl}"
                runs.setdefault(label, ([], [], "Parsl's ceiling (DFK + threads)"))
                runs[label][0].append(parsl_perf(OURS_CONFIG, parsl))
                runs[label][1].append(parsl_perf(threads_config(tmp), parsl))
    return [
        (label, statistics.median(a), statistics.median(b), peer)
        for label, (a, b, peer) in runs.items()
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1024,102400,2000000", help="bytes of the data rows")
    ap.add_argument("--batches", default="5000,50000", help="calls of the batch rows")
    ap.add_argument("--unbundled", default="5000", help="calls of the bundle=False rows")
    ap.add_argument("--parsl", default="20000", help='parsl-perf --iterate sizes ("": none)')
    ap.add_argument("--one", choices=("ours", "pool", "batch"), help=argparse.SUPPRESS)
    ap.add_argument("--kind", choices=("ours", "unbundled", "pool"), help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument(
        "--fn", choices=("pow", "script"), default="pow",
        help="with --one batch: pow, or a function of this script (pickled by value)",
    )  # fmt: skip
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.one == "batch":
        print(batch(args.kind, args.n, square if args.fn == "script" else pow))
        return 0
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
    parsl = args.parsl
    if parsl:
        try:
            import parsl as _  # noqa: F401
        except ImportError:
            print("\n(parsl is not installed: no parsl-perf row)")
            parsl = ""
    table = rates(
        [int(n) for n in args.batches.split(",") if n],
        [int(n) for n in args.unbundled.split(",") if n],
        parsl,
        args.rounds,
    )
    print(f"\ncalls in a batch, a fresh executor each, median of {args.rounds} rounds")
    print("\n| row | ours /s | peer | peer /s | ours / peer |")
    print("|---|---|---|---|---|")
    for label, a, b, peer in table:
        print(f"| {label} | {a:,.0f} | {peer} | {b:,.0f} | {a / b:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
