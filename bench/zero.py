"""The stack's own ceiling: zero-launch units through the whole path, and where its CPU goes.

    python bench/zero.py [--n 100000] [--parts 1,2,4] [--reps 1] [--kind exec|function]
                         [--descs shared,each,distinct]

Each run is a fresh process: a Session on disk (sqlite, the default store) and a pilot on
`local.zero` (this machine, 64 logical cores; units never start a process: the agent ends each
DONE, exit 0, no output, once it has placed it: agent/runners/zero.py) whose 64 cores are split
into P partitions.  N descriptions are made before the clock starts (as a script makes its
list); the clock runs from submit_units called until wait_units has returned and the store
has every record (the writer flushed): units/s end to end.  CPU per unit is read from /proc
before and after, for every thread of the client (MainThread: submit and wait; pmgr-channel:
the pilot's messages and the callbacks; pmgr-store-writer: the store), the bootstrap and the
agents (their threads summed).

Targets (issue 42, 2 cores): >= 20,000 units/s at every P; client <= 50 us a unit (all its
threads), agent <= 25 us, bootstrap <= 5 us.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.local_pilot import cpu_s, in_fresh_process, status_mb, threads_cpu_s  # noqa: E402

CORES = 64
TARGETS = {"rate": 20_000, "client": 50, "agent": 25, "bootstrap": 5}


def _agents(pilot, session) -> list[int]:
    import re

    from pilot.pmgr.core import reaper

    live = set(reaper.session_processes(session.uid))
    out = []
    for part in pilot.partitions:
        with open(os.path.join(pilot.sandbox, f"{part.uid}.agent.log")) as f:
            found = re.search(r": up, pid (\d+)", f.read())
        if found is not None and int(found[1]) in live:
            out.append(int(found[1]))
    return out


def _noop() -> None:
    return None


def _descriptions(rp, n: int, kind: str, descs: str) -> list:
    """N descriptions as a script builds them: `shared` (one object N times), `each` (an object
    per unit, all alike) or `distinct` (an object per unit with its own arguments)."""
    if kind == "function":
        if descs == "shared":
            return [rp.ComputeUnitDescription(function=_noop)] * n
        return [rp.ComputeUnitDescription(function=_noop) for _ in range(n)]
    if descs == "shared":
        return [rp.ComputeUnitDescription(executable="/bin/true")] * n
    if descs == "each":
        return [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(n)]
    return [rp.ComputeUnitDescription(executable="/bin/true", arguments=[str(i)]) for i in range(n)]


def one_run(n: int, parts: int, kind: str, descs: str = "each") -> dict:
    import threading

    import pilot as rp

    size = CORES // parts
    pd = rp.ComputePilotDescription(
        resource="local.zero",
        runtime=600,
        parts=[rp.ComputePartitionDescription(cores=size) for _ in range(parts)],
    )
    with tempfile.TemporaryDirectory() as tmp, rp.Session(dir=tmp) as session:
        pilot = rp.PilotManager(session).submit_pilots(pd)
        for p in pilot.partitions:
            p.wait(rp.ACTIVE, timeout=60)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        made = _descriptions(rp, n, kind, descs)
        agents = _agents(pilot, session)
        boot = pilot.job.pid
        names = {t.native_id: t.name for t in threading.enumerate()}
        me = os.getpid()

        def sample() -> dict:
            return {
                "client": threads_cpu_s(me),
                "boot": cpu_s(boot)["own"],
                "agents": [cpu_s(a)["own"] for a in agents],
            }

        before = sample()
        t0 = time.perf_counter()
        units = umgr.submit_units(made)
        umgr.wait_units(timeout=600)
        session.writer.flush(timeout=600)
        wall = time.perf_counter() - t0
        after = sample()
        done = sum(1 for u in units if u.state == rp.DONE)
        rss = {
            "client": status_mb(me, "VmHWM"),
            "bootstrap": status_mb(boot, "VmHWM"),
            "agent": max(status_mb(a, "VmHWM") for a in agents),
        }
    us = 1e6 / n
    rows: dict[str, float] = {}
    for tid, (comm, s) in after["client"].items():
        name = names.get(tid, comm)
        name = "MainThread" if tid == me else name
        key = f"client: {name}"
        rows[key] = rows.get(key, 0.0) + (s - before["client"].get(tid, ("", 0.0))[1]) * us
    rows["bootstrap"] = (after["boot"] - before["boot"]) * us
    rows["agent"] = sum(a - b for a, b in zip(after["agents"], before["agents"])) * us
    return {"rate": n / wall, "done": done, "rows": rows, "rss": rss}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--parts", default="1,2,4")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--kind", choices=("exec", "function"), default="exec")
    ap.add_argument(
        "--descs",
        default="shared,each,distinct",
        help="how the N descriptions are built: shared (one object), each (an object "
        "per unit, alike), distinct (an object per unit, its own arguments)",
    )
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.n, int(args.parts), args.kind, args.descs)))
        return 0
    parts = [int(p) for p in args.parts.split(",")]
    shapes = args.descs.split(",")
    bad = [d for d in shapes if d not in ("shared", "each", "distinct")]
    if bad:
        ap.error(f"--descs: {bad[0]!r} is not one of shared, each, distinct")
    runs: dict[tuple[str, int], list] = {(d, p): [] for d in shapes for p in parts}
    for rep in range(args.reps):
        for d, p in runs:
            cmd = ["--n", str(args.n), "--parts", str(p), "--kind", args.kind, "--descs", d]
            run = in_fresh_process(__file__, cmd, timeout=1200)
            if run is None:
                return 1
            if run["done"] != args.n:
                print(f"only {run['done']} of {args.n} units DONE", file=sys.stderr)
                return 1
            runs[d, p].append(run)
            print(
                f"rep {rep + 1}, {d}, {p} partition(s): {run['rate']:.0f} units/s", file=sys.stderr
            )
    med = statistics.median
    print(
        f"\nN={args.n} zero-launch {args.kind} units, local.zero ({CORES} logical cores split "
        f"into P partitions), sqlite on disk, {os.cpu_count()} cores; medians of {args.reps}\n"
        "descriptions: shared = one object N times, each = an object per unit (alike), "
        "distinct = an object per unit with its own arguments\n"
    )
    keys = sorted({k for rs in runs.values() for r in rs for k in r["rows"]})
    client_keys = [k for k in keys if k.startswith("client:")]
    head = "| descriptions | P | units/s | client us/unit | " + " | ".join(
        k[8:] for k in client_keys
    )
    print(head + " | bootstrap | agents | peak RSS MB client / bootstrap / agent |")
    print("|---" * (7 + len(client_keys)) + "|")
    for (d, p), rs in runs.items():
        rate = med(r["rate"] for r in rs)
        client = med(sum(r["rows"][k] for k in client_keys if k in r["rows"]) for r in rs)
        cells = [f"{med(r['rows'].get(k, 0.0) for r in rs):.1f}" for k in client_keys]
        rss = " / ".join(
            f"{med(r['rss'][k] for r in rs):.0f}" for k in ("client", "bootstrap", "agent")
        )
        print(
            f"| {d} | {p} | {rate:,.0f} | {client:.1f} | {' | '.join(cells)} | "
            f"{med(r['rows']['bootstrap'] for r in rs):.1f} | "
            f"{med(r['rows']['agent'] for r in rs):.1f} | {rss} |"
        )
    t = TARGETS
    print(
        f"\ntargets: >= {t['rate']:,} units/s; client <= {t['client']} us a unit, agents <= "
        f"{t['agent']}, bootstrap <= {t['bootstrap']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
