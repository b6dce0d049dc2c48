"""Scheduler alone: placement + release decisions per second, no processes.

    python bench/scheduler.py [--nodes 1000 10000] [--seconds 3]

A partition of N nodes x 64 cores x 8 GPUs is filled to about 80% with mixed unit shapes, then
each step releases a random running unit and places a new one (both count as decisions).
Shapes: 1 core; 4 cores; 8 cores + 1 GPU; 16 cores + 2 GPUs; 1 core + 0.5 GPU; 2 ranks x 32
cores; half of them ROUNDROBIN, half BLOCK.  Baseline in the same run: a first-fit placer that
walks the node list for every unit (how a node-list scheduler works), on the same workload.
Target: >= 20,000 decisions/s at 10,000 nodes, cost per decision growing no faster than
log(nodes).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pilot.agent.pool import PartitionPool  # noqa: E402

SHAPES = [(1, 0, 1), (4, 0, 1), (8, 1, 1), (16, 2, 1), (1, 0.5, 1), (32, 0, 2)]


def request(rng: random.Random) -> dict:
    cpus, gpus, ranks = rng.choice(SHAPES)
    return {
        "cpus": cpus,
        "gpus": gpus,
        "ranks": ranks,
        "resources": {},
        "policy": {"placement": "ANYWHERE", "distribution": rng.choice(("ROUNDROBIN", "BLOCK"))},
    }


def nodes(n: int) -> list[dict]:
    return [
        {"index": i, "name": f"n{i}", "cores": list(range(64)), "gpus": list(range(8))}
        for i in range(n)
    ]


class FirstFit:
    """Baseline: walk the node list for every unit, free counts per node."""

    def __init__(self, n: int) -> None:
        self.free = [[64, 8 * 1000] for _ in range(n)]
        self.active: dict[int, list] = {}
        self.next = 0

    def allocate(self, req: dict):
        taken = []
        for _ in range(req["ranks"]):
            need_c, need_g = req["cpus"], round(req["gpus"] * 1000)
            for i, (c, g) in enumerate(self.free):
                if c >= need_c and g >= need_g:
                    self.free[i][0] -= need_c
                    self.free[i][1] -= need_g
                    taken.append((i, need_c, need_g))
                    break
            else:
                for i, c, g in taken:
                    self.free[i][0] += c
                    self.free[i][1] += g
                return None
        self.next += 1
        self.active[self.next] = taken
        return self.next

    def release(self, aid: int) -> None:
        for i, c, g in self.active.pop(aid):
            self.free[i][0] += c
            self.free[i][1] += g


def run(placer, allocate, release, n_nodes: int, seconds: float) -> tuple[float, float]:
    rng = random.Random(42)
    held = []
    target = int(0.8 * n_nodes * 64)
    used = 0
    while used < target:  # fill to ~80%
        req = request(rng)
        aid = allocate(req)
        if aid is None:
            break
        held.append(aid)
        used += req["cpus"] * req["ranks"]
    decisions, placed = 0, 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            release(held.pop(rng.randrange(len(held))))
            aid = allocate(request(rng))
            decisions += 2
            if aid is not None:
                held.append(aid)
                placed += 1
    dt = time.perf_counter() - t0
    return decisions / dt, placed / (decisions / 2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    rows = []
    for n in args.nodes:
        pool = PartitionPool(nodes(n))
        ours, ours_ok = run(
            pool, lambda r, p=pool: (a := p.allocate(r)) and a.aid, pool.release, n, args.seconds
        )
        base = FirstFit(n)
        ff, ff_ok = run(base, base.allocate, base.release, n, args.seconds)
        rows.append((n, ours, ours_ok, ff, ff_ok))
    print(
        f"\nscheduler alone: 64 cores x 8 GPUs per node, ~80% full, mixed shapes, "
        f"{args.seconds:g} s per row\n"
    )
    print(
        "| nodes | ours decisions/s | placed | first-fit baseline decisions/s | placed "
        "| ours / baseline |"
    )
    print("|---|---|---|---|---|---|")
    for n, ours, ok, ff, ff_ok in rows:
        print(f"| {n} | {ours:,.0f} | {ok:.0%} | {ff:,.0f} | {ff_ok:.0%} | {ours / ff:.1f} |")
    if len(rows) > 1:
        (n0, r0, *_), (n1, r1, *_) = rows[0], rows[-1]
        print(
            f"\ncost per decision grows x{r0 / r1:.2f} from {n0} to {n1} nodes "
            f"(linear would be x{n1 / n0:.0f})"
        )
    print("target: >= 20,000 decisions/s at 10,000 nodes; growth no faster than log(nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
