"""Where each null unit's CPU goes, beside what 0.75 x the spawn limit would leave for it.

    python bench/cpu_budget.py [--n 5000] [--reps 3]

Each repetition measures the spawn limit (bench/throughput.py's, in this process) and then, in a
fresh process, N units of /bin/true on a 2-core local.localhost pilot (disk, sqlite), reading
/proc before and after: the CPU of the units (the agent's reaped children), of each thread of
the agent, the client and the bootstrap, and the machine's idle time, all in microseconds per
unit.  Both cores' time per unit is 2 x run time / N; what the rows do not cover is the rest of
the machine (other processes, interrupts).

The budget line: at 0.75 x the limit, a unit may take 2 / (0.75 x limit) of both cores' time;
what is left after the units' own CPU is what the agent, client, bootstrap and idle time may
share.  The units cost the same under the limit as under the pilot (the same /bin/true).
Thread names: the agent's main thread is its pid, its lane threads (one per core, summed
in one row) are agent-lane (agent/runners/lanes.py), ZeroMQ names its own (ZMQbg/...), its
other Python thread is "python" (the sandbox stager); the client's are named by Python's
threading module.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.local_pilot import (  # noqa: E402
    TRUE,
    cpu_s,
    in_fresh_process,
    machine_idle_s,
    threads_cpu_s,
    two_core_pilot,
)
from bench.throughput import limit_rate  # noqa: E402


def _client_threads() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate()}


def one_run(n: int) -> dict:
    import pilot as rp

    with two_core_pilot(runtime=60) as run:
        agent = run.agents()[0]
        me = os.getpid()
        names = _client_threads()
        before = {
            "agent": cpu_s(agent),
            "bootstrap": cpu_s(run.bootstrap),
            "agent_threads": threads_cpu_s(agent),
            "client_threads": threads_cpu_s(me),
            "idle": machine_idle_s(),
        }
        t0 = time.perf_counter()
        units = run.umgr.submit_units([rp.ComputeUnitDescription(executable=TRUE)] * n)
        states = run.umgr.wait_units([u.uid for u in units], timeout=600)
        run.session.writer.flush(timeout=120)
        wall = time.perf_counter() - t0
        after = {
            "agent": cpu_s(agent),
            "bootstrap": cpu_s(run.bootstrap),
            "agent_threads": threads_cpu_s(agent),
            "client_threads": threads_cpu_s(me),
            "idle": machine_idle_s(),
        }
        names.update(_client_threads())
    assert states == [rp.DONE] * n, "not every unit is DONE"
    us = 1e6 / n
    units_s = after["agent"]["children"] - before["agent"]["children"]
    rows = {"units (the agent's children)": units_s}
    for tid, (comm, s) in after["agent_threads"].items():
        label = "main" if tid == agent else comm
        key = f"agent: {label}"
        rows[key] = rows.get(key, 0.0) + s - before["agent_threads"].get(tid, ("", 0.0))[1]
    for tid, (_, s) in after["client_threads"].items():
        key = f"client: {names.get(tid, 'other')}"
        rows[key] = rows.get(key, 0.0) + s - before["client_threads"].get(tid, ("", 0.0))[1]
    rows["bootstrap"] = after["bootstrap"]["own"] - before["bootstrap"]["own"]
    rows["idle (both cores)"] = after["idle"] - before["idle"]
    return {
        "rate": n / wall,
        "both_cores_us": 2 * wall * us,
        "rows": {k: v * us for k, v in rows.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.n)))
        return 0
    limits, runs = [], []
    for rep in range(args.reps):
        limit_rate(50)
        limits.append(limit_rate(args.n))
        run = in_fresh_process(__file__, ["--n", str(args.n)], timeout=900)
        if run is None:
            return 1
        runs.append(run)
        said = f"rep {rep + 1}: limit {limits[-1]:.0f}/s, ours {runs[-1]['rate']:.0f}/s"
        print(said, file=sys.stderr)
    med = statistics.median
    lim = med(limits)
    keys = sorted(
        {k for r in runs for k in r["rows"]},
        key=lambda k: -med(r["rows"].get(k, 0) for r in runs),
    )
    print(
        f"\nN={args.n} /bin/true units, 2-core local.localhost pilot, disk, sqlite; "
        f"medians of {args.reps}\n"
    )
    print("| where | us per unit |")
    print("|---|---|")
    for k in keys:
        values = [r["rows"].get(k, 0.0) for r in runs]
        if med(values) >= 0.5:
            print(f"| {k} | {med(values):.0f} |")
    both = med(r["both_cores_us"] for r in runs)
    rate = med(r["rate"] for r in runs)
    print(f"| **both cores' time per unit** ({rate:.0f} units/s) | {both:.0f} |")
    units = med(r["rows"]["units (the agent's children)"] for r in runs)
    at = 2e6 / (0.75 * lim)
    overhead = med(
        sum(v for k, v in r["rows"].items() if not k.startswith(("units", "idle"))) for r in runs
    )
    print(
        f"\nbudget: at 0.75 x the limit ({lim:.0f}/s) a unit may take {at:.0f} us of both cores; "
        f"after its own {units:.0f} us, {at - units:.0f} us are left for the agent, client, "
        f"bootstrap and idle time (now {overhead:.0f} us of CPU, idle aside)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
