"""Client memory with many units: RSS of each process with N units submitted and done.

    python bench/memory.py [--n 100000] [--kind exec|func]

Two fresh processes, each: Session + 2-core local.localhost pilot (sqlite store, the default);
N units of /bin/true (exec) or of a no-op function (func, quicker) submitted as one list and
waited for.  They differ in what the script holds while it waits:

  objects   the list of Unit objects submit_units returned (what the script asked to keep:
            every unit stays in memory, as a RADICAL-Pilot client keeps each unit's dict)
  uids      only their uids: the manager lets go of each unit once it is final, stored and
            its callbacks ran (pmgr/core/unit_table.py: a byte each), so what remains is the
            manager's own cost for finished work; the baseline row of the same run

Printed: each process's RSS before the submit, its peak (VmHWM) and its RSS at the end, and
the client's peak growth per unit.  bench/scale.py streams 10^6 units from a generator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.local_pilot import in_fresh_process, status_mb, two_core_pilot  # noqa: E402


def one_run(n: int, kind: str, hold: str) -> dict:
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
        uids = [u.uid for u in units]
        if hold == "uids":
            del units
        states = run.umgr.wait_units(uids, timeout=3600)
        run.session.writer.flush(timeout=300)
        run_s = time.perf_counter() - t0
        assert set(states) == {rp.DONE}, set(states)
        return {
            "n": n,
            "kind": kind,
            "hold": hold,
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
    ap.add_argument("--hold", choices=("objects", "uids"), help=argparse.SUPPRESS)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.n, args.kind, args.hold)))
        return 0
    rows = []
    for hold in ("uids", "objects"):
        r = in_fresh_process(
            __file__, ["--n", str(args.n), "--kind", args.kind, "--hold", hold], timeout=7200
        )
        if r is None:
            return 1
        rows.append(r)
    print(f"\nN={args.n} {args.kind} units, 2-core local pilot, sqlite\n")
    print(
        "| the script holds | run s | client before MB | client peak MB | client end MB | "
        "client peak growth KB/unit | bootstrap peak MB | agent peak MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        per_unit_kb = (r["client_peak"] - r["client_before"]) * 1024 / r["n"]
        print(
            f"| {r['hold']} | {r['run_s']:.0f} | {r['client_before']:.0f} | "
            f"{r['client_peak']:.0f} | {r['client_end']:.0f} | {per_unit_kb:.2f} | "
            f"{r['bootstrap_peak']:.0f} | {r['agent_peak']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
