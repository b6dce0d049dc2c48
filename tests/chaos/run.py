"""Run seeds of the fault campaign one after another; one line each, a table at the end.

    python -m tests.chaos.run --seeds N [--first K] [--resource local.nodes4|slurm-netns|mix]
    python -m tests.chaos.run --seed S [--resource R]      # replay one seed
    python -m tests.chaos.run --seed S --plan              # print its plan, run nothing

Seeds K..K+N-1 (K: 1 by default), each planned by Schedule.from_seed(seed, resource, profile)
and run by SeedRun (tests/chaos/seed.py: every wait bounded, a hang is a violation).  A seed
with violations prints them, one line each (unit, rule, evidence), its plan and the command
that replays it, and keeps its work directory (the store, the pilot sandboxes, the truth log,
chaos.log: what was done when); a seed without is removed unless --keep.  The exit code is 1
when any seed has a violation.  Results go to bench/results/chaos/<time>.json too.
MongoDB seeds use one SecantusDB (tests/mongo_server.py) for the run; slurm-netns seeds one
namespace SLURM (tests/chaos/cluster.py), brought up before the first and down after the last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from collections import Counter

from tests.chaos.schedule import KINDS, PROFILES, RESOURCES, Schedule
from tests.chaos.seed import ROOT, SeedRun

RESULTS = os.path.join(ROOT, "bench", "results", "chaos")
BASE = "/tmp/pilot-chaos"


def one_line(r: dict) -> str:
    kinds = ", ".join(f"{k}" + (f" x{n}" if n > 1 else "") for k, n in r["injected"].items() if n)
    states = ", ".join(f"{s} {n}" for s, n in sorted(r["states"].items()))
    return (
        f"seed {r['seed']:>4} {r['resource']}/{r['store']}: faults [{kinds}], "
        f"{r['units']} units ({states}), {len(r['violations'])} violation(s), {r['seconds']} s"
    )


def table(results: list[dict], took: float) -> str:
    injected: Counter = Counter()
    planned: Counter = Counter()
    for r in results:
        injected.update(r["injected"])
        planned.update(r["planned"])
    units = sum(r["units"] for r in results)
    states: Counter = Counter()
    for r in results:
        states.update(r["states"])
    rules: Counter = Counter(v["rule"] for r in results for v in r["violations"])
    bad = [r["seed"] for r in results if r["violations"]]
    by_res = Counter(r["resource"] for r in results)
    lines = [
        "",
        f"seeds            {len(results)} ({', '.join(f'{k}: {n}' for k, n in by_res.items())}), "
        f"{len(bad)} with violations{': ' + str(bad) if bad else ''}",
        "faults injected by kind (planned):",
    ]
    for kind in KINDS:
        if planned[kind] or injected[kind]:
            lines.append(f"  {kind:<20} {injected[kind]:>4} ({planned[kind]})")
    lines.append(f"  {'all':<20} {sum(injected.values()):>4} ({sum(planned.values())})")
    lines.append(
        f"units checked    {units} ({', '.join(f'{s} {n}' for s, n in sorted(states.items()))})"
    )
    lines.append(
        f"violations       {sum(rules.values())}"
        + (f" ({', '.join(f'{k} {n}' for k, n in rules.most_common())})" if rules else "")
    )
    lines.append(
        f"time             {took:.0f} s ({took / max(1, len(results)):.1f} s a seed on average)"
    )
    return "\n".join(lines)


def report_failure(r: dict) -> str:
    out = [f"--- seed {r['seed']}: {len(r['violations'])} violation(s)"]
    out += [f"  {v['what']}: {v['rule']}: {v['evidence']}" for v in r["violations"][:40]]
    if len(r["violations"]) > 40:
        out.append(f"  ... {len(r['violations']) - 40} more (in the JSON results)")
    out.append(r["plan"])
    out.append(f"  not injected: {r['skipped']}" if r["skipped"] else "  every fault injected")
    out.append(f"  work directory (kept): {r['work']}")
    out.append(f"  replay: {r['replay']}")
    return "\n".join(out)


def say(text: str) -> None:
    print(text, flush=True)


def run_seeds(seeds: list[int], resource: str, profile: str, keep: bool, out=say) -> list:
    plans = [Schedule.from_seed(s, resource, profile) for s in seeds]
    stamp = datetime.datetime.now().strftime("%Y%m%d.%H%M%S")
    base = os.path.join(BASE, f"{stamp}.{os.getpid()}")
    os.makedirs(base, exist_ok=True)
    mongo = cluster = None
    results: list[dict] = []
    try:
        if any(p.store == "mongodb" for p in plans):
            from tests.mongo_server import MongoServer

            storage = os.path.join(base, "mongo")
            os.makedirs(storage)
            mongo = MongoServer(storage)
            mongo.start()
        if any(p.resource == "slurm-netns" for p in plans):
            from tests.chaos.cluster import Cluster, unavailable

            why = unavailable()
            if why:
                raise SystemExit(f"slurm-netns: {why}")
            cluster = Cluster()
            cluster.up()
        for plan in plans:
            c = cluster if plan.resource == "slurm-netns" else None
            r = SeedRun(plan, base, mongo_url=mongo.url if mongo else None, cluster=c).run()
            results.append(r)
            out(one_line(r))
            if r["violations"]:
                out(report_failure(r))
            elif not keep:
                shutil.rmtree(r["work"], ignore_errors=True)
    finally:
        if cluster is not None:
            why = cluster.down()
            if why:
                out(f"*** {why}")
        if mongo is not None:
            mongo.stop()
        if not keep and not any(r["violations"] for r in results):
            shutil.rmtree(base, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__.split(".")[0])
    a.add_argument("--seeds", type=int, default=None, help="how many seeds")
    a.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    a.add_argument("--seed", type=int, action="append", help="this seed (may be repeated)")
    a.add_argument("--resource", default="local.nodes4", choices=[*RESOURCES, "mix"])
    a.add_argument("--profile", default="full", choices=sorted(PROFILES))
    a.add_argument("--plan", action="store_true", help="print the plans, run nothing")
    a.add_argument("--keep", action="store_true", help="keep every seed's work directory")
    args = a.parse_args(argv)
    if args.seed:
        seeds = args.seed
    else:
        seeds = list(range(args.first, args.first + (args.seeds or 3)))
    if args.plan:
        for s in seeds:
            print(Schedule.from_seed(s, args.resource, args.profile))
        return 0
    t0 = time.monotonic()
    results = run_seeds(seeds, args.resource, args.profile, args.keep)
    took = time.monotonic() - t0
    summary = table(results, took)
    print(summary)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, datetime.datetime.now().strftime("%Y%m%d.%H%M%S") + ".json")
    with open(path, "w") as f:
        json.dump({"argv": sys.argv, "seconds": round(took, 1), "seeds": results}, f, indent=1)
    print(f"results: {os.path.relpath(path, ROOT)}")
    return 1 if any(r["violations"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
