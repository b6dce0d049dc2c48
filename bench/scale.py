"""A million units through one client: memory per process, throughput first to last, the store.

    python bench/scale.py [--n 1000000] [--kind func|exec|zero] [--api lazy|list]
                          [--window 20000] [--bringup 64,128,256] [--views] [--dir D]

One fresh process: Session + 2-core local.localhost pilot (sqlite store, the default); N units
of a no-op function (func) or of /bin/true (exec), or zero-launch units on a 64-core local.zero
partition (zero: the stack alone, no process started), submitted from a generator and waited
for: with --api lazy (the default) by `submit_units(gen, lazy=True)` and the stream's wait
(nothing of the workload is in memory at once), with --api list by the plain call
`units = submit_units(gen)` and `wait_units()`, the returned list held to the end (a sequence
backed by the unit table: what it costs once the units are released is the point).  Sampled every
0.25 s: units ended, the RSS of the client, the bootstrap, the agent and the largest of the
agent's function workers ("workers"; their CPU is summed).  Printed:

  - RSS of each process when 10 %, 20 %, 50 % and 100 % of the units had ended (at N = 1 M:
    100 k, 200 k, 500 k, 1 M), the peak (VmHWM), and the slope between 20 % and 100 % in KB a
    unit (the baseline is the process's own RSS at 20 %, measured in the same run: what grows
    with finished work shows as a slope);
  - units/s over the first and over the last 10 % of the units (last / first: flat is 1.00);
  - the store's bytes per unit (the sqlite file, its history rows included, after the writer
    flushed);
  - with --bringup: bench/bringup.py's table at those node counts (a node daemon per logical
    node, forked on this machine);
  - with --views: bench/views.py's table (pilot status / export / top / plot / trace on a
    synthetic session of N units) when that bench is there.

Targets (issue: ten million units): client peak < 300 MB and each pilot process < 100 MB at
1 M; slope < 0.05 KB a unit; last 10 % within 5 % of the first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.local_pilot import cpu_s, in_fresh_process, status_mb, two_core_pilot  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MARKS = (0.1, 0.2, 0.5, 1.0)
NAMES = ("client", "bootstrap", "agent", "workers")  # workers: the agent's function workers


def _workers(agent: int) -> list[int]:
    """The agent's children (its function workers)."""
    pids = []
    for tid in os.listdir(f"/proc/{agent}/task"):
        try:
            with open(f"/proc/{agent}/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            pass
    return pids


def _mem(procs: dict, key: str) -> dict:
    """VmRSS or VmHWM (MB) of each process; for the workers, the largest of them."""
    out = {name: status_mb(pid, key) for name, pid in procs.items()}
    sizes = []
    for pid in _workers(procs["agent"]):
        try:
            sizes.append(status_mb(pid, key))
        except OSError:  # (gone meanwhile)
            pass
    out["workers"] = max(sizes, default=0.0)
    return out


def _cpu(procs: dict) -> dict:
    """CPU seconds of each process; for the workers, all of them together."""
    out = {name: cpu_s(pid)["own"] for name, pid in procs.items()}
    out["workers"] = 0.0
    for pid in _workers(procs["agent"]):
        try:
            out["workers"] += cpu_s(pid)["own"]
        except OSError:
            pass
    return out


def one_run(n: int, kind: str, window: int, keep: str | None = None, api: str = "lazy") -> dict:
    import pilot as rp

    where = {"resource": "local.zero", "cores": 64} if kind == "zero" else {}
    with two_core_pilot(runtime=24 * 60, warm=0, keep=keep, **where) as run:
        umgr, table = run.umgr, run.umgr.units
        procs = {"client": os.getpid(), "bootstrap": run.bootstrap, "agent": run.agents()[0]}

        def descriptions():
            for _ in range(n):
                if kind == "func":
                    yield rp.ComputeUnitDescription(function=os.getpid)
                else:
                    yield rp.ComputeUnitDescription(executable="/bin/true")

        marks, at = [round(m * n) for m in MARKS], {}
        tenths = {}  # k -> seconds when k x 10 % of the units had ended
        cpu = {}  # k -> CPU seconds of each process then
        stop = threading.Event()
        start_cpu = _cpu(procs)
        t0 = time.perf_counter()

        def sample() -> None:
            while not stop.wait(0.25):
                ended = len(table) - table.open
                t = time.perf_counter() - t0
                for k in range(1, 11):
                    if ended >= k * n // 10 and k not in tenths:
                        tenths[k] = t
                        cpu[k] = _cpu(procs)
                        rss = _mem(procs, "VmRSS")
                        print(
                            json.dumps(
                                {"ended": ended, "s": round(t, 1), "rss": rss, "cpu": cpu[k]}
                            ),
                            file=sys.stderr,
                            flush=True,
                        )
                while marks and ended >= marks[0]:
                    m = marks.pop(0)
                    at[m] = _mem(procs, "VmRSS")

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        if api == "lazy":
            stream = umgr.submit_units(descriptions(), lazy=True, window=window)
        else:
            held = umgr.submit_units(descriptions())  # (held to the end: its cost is measured)
        if api == "lazy":
            counts = stream.wait(timeout=24 * 3600)
        else:  # (the plain call returned once the generator was drawn: most units ran by then)
            states = umgr.wait_units(timeout=24 * 3600)
            counts = {s: states.count(s) for s in set(states)}
            del states
        stop.set()
        sampler.join(5)
        run_s = time.perf_counter() - t0
        for m in marks:  # (ended between the last sample and the wait's return)
            at[m] = _mem(procs, "VmRSS")
        for k in range(1, 11):
            tenths.setdefault(k, run_s)
            cpu.setdefault(k, _cpu(procs))
        cpu0 = start_cpu
        run.session.writer.flush(timeout=600)
        db = run.session.url.split("://", 1)[1]
        store_bytes = sum(
            os.path.getsize(p) for p in (db, db + "-journal", db + "-wal") if os.path.exists(p)
        )
        if api != "lazy":
            assert len(held) == n, (len(held), n)
        return {
            "n": n,
            "kind": kind,
            "api": api,
            "window": window,
            "counts": counts,
            "run_s": run_s,
            "at": {str(k): v for k, v in at.items()},
            "peak": _mem(procs, "VmHWM"),
            "first_10": (n // 10) / max(tenths[1], 1e-3),
            "last_10": (n - 9 * n // 10) / max(run_s - tenths[9], 1e-3),
            "store_bytes": store_bytes,
            # CPU ms a unit of each process over the first and the last 10 % (load-proof)
            "cpu_first": {k: (cpu[1][k] - cpu0[k]) * 1000 / (n // 10) for k in NAMES},
            "cpu_last": {k: (cpu[10][k] - cpu[9][k]) * 1000 / (n - 9 * n // 10) for k in NAMES},
        }


def report(r: dict) -> None:
    n = r["n"]
    marks = sorted(int(k) for k in r["at"])
    print(
        f"\n{n:,} {r['kind']} units from a generator ("
        + (f"lazy, window {r['window']:,}" if r["api"] == "lazy" else "the plain call, list held")
        + f"), {'64-core local.zero' if r['kind'] == 'zero' else '2-core local'} pilot, "
        f"sqlite: {r['run_s']:.0f} s, {r['counts']}\n"
    )
    print(
        "| process | " + " | ".join(f"RSS MB at {m:,}" for m in marks) + " | peak MB | "
        "slope KB/unit (20 % -> 100 %) |"
    )
    print("|---|" + "---|" * (len(marks) + 2))
    lo, hi = marks[1] if len(marks) > 1 else marks[0], marks[-1]
    for name in NAMES:
        rss = [r["at"][str(m)][name] for m in marks]
        slope = (r["at"][str(hi)][name] - r["at"][str(lo)][name]) * 1024 / max(1, hi - lo)
        print(
            f"| {name} | "
            + " | ".join(f"{x:.0f}" for x in rss)
            + f" | {r['peak'][name]:.0f} | {slope:.4f} |"
        )
    first, last = r["first_10"], r["last_10"]
    print("\n| units/s, first 10 % | units/s, last 10 % | last / first |")
    print("|---|---|---|")
    print(f"| {first:.0f} | {last:.0f} | {last / first:.2f} |")
    print("\n| CPU ms a unit | first 10 % | last 10 % | last / first |")
    print("|---|---|---|---|")
    for name in NAMES:
        a, b = r["cpu_first"][name], r["cpu_last"][name]
        print(f"| {name} | {a:.3f} | {b:.3f} | {b / a if a else float('nan'):.2f} |")
    print(f"\nstore: {r['store_bytes'] / n:.0f} bytes a unit (sqlite file, history rows in)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--kind", choices=("func", "exec", "zero"), default="func")
    ap.add_argument("--api", choices=("lazy", "list"), default="lazy")
    ap.add_argument("--window", type=int, default=20_000)
    ap.add_argument("--bringup", default="", help="node counts, e.g. 64,128,256")
    ap.add_argument("--views", action="store_true")
    ap.add_argument("--dir", default=None, help="make the session here and keep it")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.n, args.kind, args.window, args.dir, args.api)))
        return 0
    r = in_fresh_process(
        __file__,
        ["--n", str(args.n), "--kind", args.kind, "--window", str(args.window)]
        + ["--api", args.api]
        + (["--dir", os.path.abspath(args.dir)] if args.dir else []),
        timeout=24 * 3600,
        stream_stderr=args.dir is not None,
    )
    if r is None:
        return 1
    report(r)
    extra = []
    if args.bringup:
        extra.append(
            [
                os.path.join(HERE, "bringup.py"),
                "--nodes",
                args.bringup,
                "--reps",
                "1",
                "--units",
                "200",
            ]
        )
    if args.views and os.path.exists(os.path.join(HERE, "views.py")):
        extra.append([os.path.join(HERE, "views.py"), "--n", str(args.n)])
    for cmd in extra:
        print(
            f"\n$ python {' '.join(os.path.relpath(c) if c.startswith('/') else c for c in cmd)}",
            flush=True,
        )
        subprocess.run([sys.executable, *cmd], timeout=4 * 3600, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
