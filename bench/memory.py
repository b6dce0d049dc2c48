"""Client memory with many units: RSS of the client process with N units submitted and done.

    python bench/memory.py [--n 100000] [--kind exec|func]

One fresh process: Session + 2-core local.localhost pilot (sqlite store, the default); N units
of /bin/true (exec) or of a no-op function (func, quicker) submitted at once and waited for.
Printed: the client's RSS before the submit, its peak (VmHWM) and its RSS at the end, what that
is per unit, and the same for the bootstrap and agent.  Target: client peak < 500 MB at 100,000.
Every unit stays in memory as a Unit object (its description, wire dict and state history), as
a RADICAL-Pilot client keeps each unit's dict; nothing per unit is kept twice.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.local_pilot import in_fresh_process, status_mb, two_core_pilot  # noqa: E402


def one_run(n: int, kind: str) -> dict:
    import pilot as rp

    with two_core_pilot(runtime=60, warm=0) as run:
        before = status_mb(os.getpid(), "VmRSS")
        t0 = time.perf_counter()
        if kind == "exec":
            descs = [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(n)]
        else:
            descs = [rp.ComputeUnitDescription(function=os.getpid) for _ in range(n)]
        units = run.umgr.submit_units(descs)
        del descs
        states = run.umgr.wait_units([u.uid for u in units], timeout=3600)
        run.session.writer.flush(timeout=300)
        run_s = time.perf_counter() - t0
        assert set(states) == {rp.DONE}, set(states)
        return {
            "n": n,
            "kind": kind,
            "run_s": run_s,
            "client_before": before,
            "client_peak": status_mb(os.getpid(), "VmHWM"),
            "client_end": status_mb(os.getpid(), "VmRSS"),
            "bootstrap_peak": status_mb(run.bootstrap, "VmHWM"),
            "agent_peak": max(status_mb(p, "VmHWM") for p in run.agents()),
        }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--kind", choices=("exec", "func"), default="exec")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.n, args.kind)))
        return 0
    r = in_fresh_process(__file__, ["--n", str(args.n), "--kind", args.kind], timeout=7200)
    if r is None:
        return 1
    per_unit_kb = (r["client_peak"] - r["client_before"]) * 1024 / r["n"]
    print(f"\nN={r['n']} {r['kind']} units, 2-core local pilot, sqlite; {r['run_s']:.0f} s\n")
    print("| process | RSS before MB | peak RSS MB | RSS at end MB | peak growth per unit KB |")
    print("|---|---|---|---|---|")
    print(
        f"| client | {r['client_before']:.0f} | {r['client_peak']:.0f} | {r['client_end']:.0f} "
        f"| {per_unit_kb:.2f} |"
    )
    print(f"| bootstrap | - | {r['bootstrap_peak']:.0f} | - | - |")
    print(f"| agent | - | {r['agent_peak']:.0f} | - | - |")
    print("\ntarget: client peak < 500 MB with 100,000 units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
