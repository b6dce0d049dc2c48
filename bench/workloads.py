"""Makespan of the workloads people run, against the greedy list-schedule bound.

    python bench/workloads.py [--scale 1.0] [--only NAME,...] [--json FILE]

Each workload runs through the public API on a fresh local pilot (one partition), as a user
would submit it: all units at once, in one order.  Units are `/bin/sleep` (and, for one row,
function units that sleep): they use no CPU, so a busy machine does not move the numbers, and a
partition may have more logical cores than the machine.

    bound        the greedy list schedule in submit order on the partition's cores and GPUs:
                 whenever a unit ends, every waiting unit that fits starts, oldest first.  Its
                 durations are the ones measured (each unit's EXECUTING -> DONE, as its agent
                 stamped them), so the cost of starting a process counts once, in `start`,
                 and not as a scheduling loss
    makespan     submit_units called -> the last unit's end
    start        submit_units called -> the first unit EXECUTING (the fixed start cost)
    x bound      (makespan - start) / bound: 1.00 is the greedy schedule; target <= 1.02
    busy         core-seconds of the units / (cores x makespan)
    idle max     the longest time a core idled while a unit that fits one free core waited
                 (single-core workloads; "-" where widths differ)

Workloads (durations seeded, so every run has the same ones; --scale multiplies them):
    uniform      600 units of 10 ms on 4 cores
    lognormal    300 units, median 0.1 s, sigma 1 (heavy-tailed) on 8 cores
    bimodal      4 units of 3 s among 200 of 0.05-0.2 s on 8 cores
    widths       160 units of 1, 2 and 4 cores and 2 ranks of 1, 0.05-0.6 s, on 8 cores
    gpus         120 units of 1 core, 1 core + 1 GPU and 2 cores + 1 GPU on a simulated node of
                 4 cores and 2 GPUs (local.simulated), 0.05-0.5 s
    functions    200 function units (time.sleep, 0.01-0.3 s) on 4 cores
    cancelation  RADICAL-Pilot's task_cancelation example, shrunk: 32 units of 1 s on 8 cores;
                 when the first 8 have ended, the first 12 of the others (the 8 running, 4
                 waiting) are canceled: the 12 left run in two rounds.  The bound schedules
                 every unit that ran, for as long as it ran
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def workloads(scale: float) -> dict:
    """name -> (partition kwargs, resource, [(description kwargs, width cores, gpus)], cancel)."""
    rng = random.Random(30)

    def sl(d, **kw):
        return {"executable": "/bin/sleep", "arguments": [f"{d * scale:.3f}"], **kw}

    out = {}
    out["uniform"] = ({"cores": 4}, "local.localhost", [(sl(0.01), 1, 0)] * 600, None)
    out["lognormal"] = (
        {"cores": 8},
        "local.localhost",
        [(sl(min(20.0, rng.lognormvariate(-2.3, 1.0))), 1, 0) for _ in range(300)],
        None,
    )
    bim = [(sl(rng.uniform(0.05, 0.2)), 1, 0) for _ in range(200)]
    for i in (0, 50, 100, 150):
        bim.insert(i, (sl(3.0), 1, 0))
    out["bimodal"] = ({"cores": 8}, "local.localhost", bim, None)
    widths = []
    for _ in range(160):
        d = rng.uniform(0.05, 0.6)
        kind = rng.choice(["c1", "c1", "c1", "c2", "c4", "r2"])
        if kind == "r2":
            widths.append((sl(d, ranks=2), 2, 0))
        else:
            n = int(kind[1])
            widths.append((sl(d, cores=n), n, 0))
    out["widths"] = ({"cores": 8}, "local.localhost", widths, None)
    gpus = []
    for _ in range(120):
        d = rng.uniform(0.05, 0.5)
        c, g = rng.choice([(1, 0), (1, 0), (1, 1), (2, 1)])
        gpus.append((sl(d, cores=c, gpus=g), c, g))
    out["gpus"] = ({"cores": 4, "gpus": 2}, "local.simulated", gpus, None)
    funcs = [
        ({"function": _sleep, "args": [round(rng.uniform(0.01, 0.3) * scale, 3)]}, 1, 0)
        for _ in range(200)
    ]
    out["functions"] = ({"cores": 4}, "local.localhost", funcs, None)
    out["cancelation"] = ({"cores": 8}, "local.localhost", [(sl(1.0), 1, 0)] * 32, (8, 12))
    return out


def greedy(durations: list[float], shapes: list[tuple[int, int]], cores: int, gpus: int) -> float:
    """Makespan of the greedy list schedule in submit order (see the header)."""
    waiting = list(range(len(durations)))
    running: list[tuple[float, int]] = []
    free_c, free_g, t, end = cores, gpus, 0.0, 0.0
    while waiting or running:
        keep = []
        for i in waiting:
            c, g = shapes[i]
            if c <= free_c and g <= free_g:
                free_c, free_g = free_c - c, free_g - g
                heapq.heappush(running, (t + durations[i], i))
                end = max(end, t + durations[i])
            else:
                keep.append(i)
        waiting = keep
        if not running:
            break
        t, i = heapq.heappop(running)
        free_c, free_g = free_c + shapes[i][0], free_g + shapes[i][1]
        while running and running[0][0] == t:
            _, j = heapq.heappop(running)
            free_c, free_g = free_c + shapes[j][0], free_g + shapes[j][1]
    return end


def idle_max(units, cores: int) -> float:
    """The longest stretch with fewer than `cores` units running while a unit waited (units of
    one core each)."""
    import pilot as rp

    busy, waits = [], []
    for u in units:
        h = dict(u.history)
        if rp.EXECUTING in h:
            busy.append((h[rp.EXECUTING], h.get(u.state, float("inf"))))
            waits.append((h[rp.QUEUED], h[rp.EXECUTING]))
    edges = sorted({t for r in busy for t in r} | {t for w in waits for t in w})
    worst, run, since = 0.0, 0.0, None
    for a, b in zip(edges, edges[1:]):
        mid = (a + b) / 2
        if any(q <= mid < s for q, s in waits) and sum(s <= mid < e for s, e in busy) < cores:
            run = run + (b - a) if since == a else b - a
            since, worst = b, max(worst, run)
        else:
            since = None
    return worst


def run_one(name: str, scale: float) -> dict:
    import pilot as rp

    part, resource, units_kw, cancel = workloads(scale)[name]
    cores, gpus = part["cores"], part.get("gpus", 0)
    pd = rp.ComputePilotDescription(
        resource=resource,
        runtime=30,
        cores=cores,
        gpus=gpus or None,
        parts=[rp.ComputePartitionDescription(**part)],
    )
    with rp.Session() as session:
        pilot = rp.PilotManager(session).submit_pilots(pd)
        pilot.partitions[0].wait(rp.ACTIVE, timeout=60)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        descs = [rp.ComputeUnitDescription(**kw) for kw, _, _ in units_kw]
        t0 = time.time()
        units = umgr.submit_units(descs)
        if cancel is not None:
            first, n = cancel
            deadline = time.monotonic() + 600
            while sum(u.state == rp.DONE for u in units) < first:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: the first {first} units did not end")
                time.sleep(0.01)
            others = [u.uid for u in units if u.state != rp.DONE]
            umgr.cancel_units(others[:n])
        umgr.wait_units(timeout=600)
        pilot.cancel()
        bad = [u.state for u in units if u.state not in (rp.DONE, rp.CANCELED)]
        if bad:
            raise RuntimeError(f"{name}: units ended {set(bad)}")
        ran = [(u, shape) for u, shape in zip(units, units_kw) if rp.EXECUTING in dict(u.history)]
        hist = [dict(u.history) for u, _ in ran]
        ends = [h[u.state] for h, (u, _) in zip(hist, ran)]
        durations = [e - h[rp.EXECUTING] for e, h in zip(ends, hist)]
        shapes = [(c, g) for _, (_, c, g) in ran]
        bound = greedy(durations, shapes, cores, gpus)
        makespan = max(ends) - t0
        start = min(h[rp.EXECUTING] for h in hist) - t0
        single = all(c == 1 and g == 0 for c, g in shapes)
        return {
            "name": name,
            "units": len(units),
            "cores": cores,
            "gpus": gpus,
            "bound": bound,
            "makespan": makespan,
            "start": start,
            "ratio": (makespan - start) / bound,
            "busy": sum(d * c for d, (c, _) in zip(durations, shapes)) / (cores * makespan),
            "idle_max": idle_max([u for u, _ in ran], cores) if single else None,
        }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:  # (a workload in a fresh process)
        print(json.dumps(run_one(args.one, args.scale)))
        return 0
    import subprocess

    names = [n for n in workloads(args.scale) if not args.only or n in args.only.split(",")]
    rows = []
    for name in names:
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--scale", str(args.scale)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{name}: done", file=sys.stderr)
    lanes = "off" if os.environ.get("PILOT_AGENT_LANES") == "0" else "on"
    print(f"\nworkloads through a local pilot (lanes {lanes}), scale {args.scale}\n")
    print(
        "| workload | units | cores/GPUs | bound s | makespan s | start s | x bound | busy | "
        "idle max s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        idle = "-" if r["idle_max"] is None else f"{r['idle_max']:.2f}"
        print(
            f"| {r['name']} | {r['units']} | {r['cores']}/{r['gpus']} | {r['bound']:.2f} | "
            f"{r['makespan']:.2f} | {r['start']:.2f} | {r['ratio']:.3f} | {r['busy']:.2f} | "
            f"{idle} |"
        )
    print("\ntarget: x bound <= 1.02 on every row")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
