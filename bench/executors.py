"""The front doors against their peers, on this machine, in one run (issue 35, item 4):

    python bench/executors.py                  # ~2 min on 2 cores: the table below
    python bench/executors.py --rounds 1 --calls 2000 --parsl 1000,3000
    python bench/executors.py --peers-row      # RESULT lines for ../shared/bench/peers

1. parsl-perf (`python -m parsl.benchmark.perf`, Parsl's own benchmark: submit n no-op python
   apps, wait for all) with tests/parsl_pilot_config.py (PilotExecutor, a local pilot of all
   cores) against Parsl's htex_local test config (HighThroughputExecutor, LocalProvider, one
   block) and against Parsl's own ceiling, its DataFlowKernel with an in-process
   ThreadPoolExecutor(<cores>) (no process boundary at all), the same explicit iteration sizes
   for all; the rate of the last iteration counts.
2. `--calls` x submit(pow, i, 2) through rp.Executor() (a local pilot of all cores; bundled
   calls, and bundle=False: a unit a call) against concurrent.futures.ProcessPoolExecutor(
   max_workers=<cores>): submit all, then every result; one warm-up round of 200 first (the
   pilot and the pool are up), startup not counted.
Every measurement is a fresh process; rounds alternate ours and theirs, so a noisy minute on
the shared machine hits both; the table shows medians over rounds and ratio = ours / theirs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS_CONFIG = os.path.join(ROOT, "tests", "parsl_pilot_config.py")


def htex_config() -> str:
    import parsl.tests.configs

    return os.path.join(parsl.tests.configs.__path__[0], "htex_local.py")


def env() -> dict:
    """HTEX starts interchange.py and process_worker_pool.py by name: this interpreter's bin."""
    bindir = os.path.dirname(sys.executable)
    return {
        **os.environ,
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


THREADS_CONFIG = """
import os
from parsl.config import Config
from parsl.executors import ThreadPoolExecutor
config = Config(executors=[ThreadPoolExecutor(max_threads=os.cpu_count())])
"""


def threads_config(tmp: str) -> str:
    path = os.path.join(tmp, "threads_config.py")
    with open(path, "w") as f:
        f.write(THREADS_CONFIG)
    return path


def parsl_perf(config: str, sizes: str) -> float:
    """Tasks per second of parsl-perf's last iteration."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-m", "parsl.benchmark.perf", "--config", config]
            + ["--iterate", sizes],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp,
            env={**env(), "PILOT_SESSIONS_DIR": os.path.join(tmp, "sessions")},
        )
    rates = re.findall(r"Tasks per second: ([0-9.]+)", out.stdout)
    if out.returncode != 0 or not rates:
        raise RuntimeError(f"parsl-perf {config} failed: {out.stdout[-1500:]}{out.stderr[-1500:]}")
    return float(rates[-1])


def calls(kind: str, n: int) -> float:
    """Calls per second of n x submit(pow, i, 2), in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, __file__, "--one", kind, "--calls", str(n)],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp,
            env={**env(), "PILOT_SESSIONS_DIR": os.path.join(tmp, "sessions")},
        )
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed: {out.stdout[-1500:]}{out.stderr[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["rate"]


def one(kind: str, n: int) -> None:
    """(in the fresh process) Measure and print {"rate": calls/s}."""
    cores = os.cpu_count() or 1
    if kind in ("ours", "unbundled"):
        import pilot as rp

        ex = rp.Executor(bundle=kind == "ours")
    else:
        from concurrent.futures import ProcessPoolExecutor

        ex = ProcessPoolExecutor(max_workers=cores)
    with ex:
        [f.result() for f in [ex.submit(pow, i, 2) for i in range(200)]]
        t0 = time.perf_counter()
        fs = [ex.submit(pow, i, 2) for i in range(n)]  # (each call's arguments its own)
        assert all(f.result() == i * i for i, f in enumerate(fs))
        rate = n / (time.perf_counter() - t0)
    print(json.dumps({"rate": rate}))


def peers_row() -> int:
    """Our executor as rows of the shared peer harness (its ours.sh runs this with BENCH_*):
    ours.executor: rp.Executor(max_workers=BENCH_WORKERS); func = common.noop, exec =
    common.run_true (a call that runs /bin/true, as its cf row does)."""
    sys.path.insert(0, os.environ.get("BENCH_HOME", "."))
    from common import WORKERS, N, emit, noop, now, run_true

    t_import = time.perf_counter()
    import pilot as rp

    import_s = time.perf_counter() - t_import
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PILOT_SESSIONS_DIR"] = tmp
        t0 = now()
        ex = rp.Executor(max_workers=WORKERS)
        with ex:
            [f.result() for f in [ex.submit(noop) for _ in range(2 * WORKERS)]]
            emit("ours.executor", "startup", startup_s=now() - t0, import_s=import_s)
            for variant, fn in (("exec", run_true), ("func", noop)):
                t1 = now()
                if any(f.result() != 0 for f in [ex.submit(fn, i) for i in range(N)]):
                    print(f"{variant}: a call did not return 0", file=sys.stderr)
                    return 1
                emit("ours.executor", variant, n=N, run_s=now() - t1)
            t2 = now()
        emit("ours.executor", "shutdown", shutdown_s=now() - t2)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--parsl", default="1000,4000", help="parsl-perf --iterate sizes")
    ap.add_argument("--one", choices=("ours", "unbundled", "pool"), help=argparse.SUPPRESS)
    ap.add_argument("--peers-row", action="store_true")
    args = ap.parse_args()
    if args.one:
        one(args.one, args.calls)
        return 0
    if args.peers_row:
        return peers_row()
    names = ("pp", "htex", "threads", "ours", "unbundled", "pool")
    rows: dict[str, list[float]] = {k: [] for k in names}
    with tempfile.TemporaryDirectory() as tmp:
        threads = threads_config(tmp)
        for r in range(args.rounds):
            rows["pp"].append(parsl_perf(OURS_CONFIG, args.parsl))
            rows["htex"].append(parsl_perf(htex_config(), args.parsl))
            rows["threads"].append(parsl_perf(threads, args.parsl))
            for kind in ("ours", "unbundled", "pool"):
                rows[kind].append(calls(kind, args.calls))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in rows.items()))
    med = {k: statistics.median(v) for k, v in rows.items()}
    cores = os.cpu_count()
    print()
    print(f"| workload ({cores} cores, medians of {args.rounds}) | ours /s | peer /s | ratio |")
    print("|---|---|---|---|")
    print(
        f"| parsl-perf --iterate {args.parsl}: PilotExecutor vs HighThroughputExecutor "
        f"(htex_local) | {med['pp']:.0f} | {med['htex']:.0f} | {med['pp'] / med['htex']:.2f} |"
    )
    print(
        f"| parsl-perf --iterate {args.parsl}: PilotExecutor vs Parsl's ceiling (DataFlowKernel "
        f"+ ThreadPoolExecutor({cores}), in process) | {med['pp']:.0f} | {med['threads']:.0f} | "
        f"{med['pp'] / med['threads']:.2f} |"
    )
    print(
        f"| {args.calls} x submit(pow, i, 2): rp.Executor() vs "
        f"ProcessPoolExecutor({cores}) | {med['ours']:.0f} | {med['pool']:.0f} | "
        f"{med['ours'] / med['pool']:.2f} |"
    )
    print(
        f"| {args.calls} x submit(pow, i, 2): rp.Executor(bundle=False), a unit a call, vs "
        f"ProcessPoolExecutor({cores}) | {med['unbundled']:.0f} | {med['pool']:.0f} | "
        f"{med['unbundled'] / med['pool']:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
