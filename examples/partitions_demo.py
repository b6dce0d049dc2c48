"""The partitions RFC flow on this machine, with the embedded state store.

A pilot on `local.simulated` (three logical nodes of 4 cores and 2 GPUs; every process runs on
this machine) starts with two partitions of different sizes.  100 units are spread over them;
half-way through, the first partition is stopped and a "50%" partition started in its place
(its queued units move on, its running ones end CANCELED), and a second wave of units follows.
At the end a summary per partition.

    python examples/partitions_demo.py [--units 100] [--resource local.simulated]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=100)
    ap.add_argument("--resource", default="local.simulated")
    args = ap.parse_args()

    pd1 = rp.ComputePartitionDescription(cores=8, gpus=4, config="fork")
    pd2 = rp.ComputePartitionDescription(cores=4, gpus=2)
    pd = rp.ComputePilotDescription(resource=args.resource, parts=[pd1, pd2], runtime=10)

    t0 = time.monotonic()
    with rp.Session() as session:
        print(f"session {session.uid}  (state store and sandboxes in {session.dir})")
        pmgr = rp.PilotManager(session)
        pilot = pmgr.submit_pilots(pd)
        print(
            f"{pilot.uid}: {pilot.size['nodes']} node(s), {pilot.size['cores']} cores, "
            f"{pilot.size['gpus']} GPUs on {args.resource}"
        )
        for part in pilot.partitions:
            part.wait(rp.ACTIVE, timeout=60)
        print(f"partitions ACTIVE after {time.monotonic() - t0:.2f} s:")
        for p in pilot.partitions:
            print(f"  {p.uid}  {p.cores:3d} cores {p.gpus:2d} GPUs  {p.state}")

        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        done = Counter()
        umgr.register_callback(lambda unit, state: done.update([state]))
        work = rp.ComputeUnitDescription(
            executable="/bin/sh",
            arguments=["-c", "sleep 0.2; echo node=$PILOT_NODE_NAME cpus=$PILOT_CPU_IDS"],
        )
        units = umgr.submit_units([work] * args.units)

        deadline = time.monotonic() + 60
        while done[rp.DONE] < args.units // 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = pilot.partitions[0]
        new = pilot.reconfig(stop=first.uid, start=[rp.ComputePartitionDescription("50%")])
        print(f"reconfig after {done[rp.DONE]} units: stop {first.uid}, start {new[0].uid} (50%)")
        new[0].wait(rp.ACTIVE, timeout=60)
        first.wait(timeout=60)
        print(
            f"  {first.uid} {first.state}; {new[0].uid} {new[0].state} with "
            f"{new[0].cores} cores, {new[0].gpus} GPUs"
        )

        units += umgr.submit_units([work] * (args.units // 2))
        print(f"second wave: {args.units // 2} more units")
        umgr.wait_units(timeout=300)
        print(f"\n{len(units)} units: {dict(Counter(u.state for u in units))}")
        print(f"sample output: {units[0].uid} on {units[0].part}: {units[0].stdout.strip()}")
        summary(pilot, units)
    print(f"\nwall time {time.monotonic() - t0:.2f} s")
    return 0


def summary(pilot, units) -> None:
    by_part = defaultdict(list)
    for u in units:
        by_part[u.part].append(u)
    print(
        f"\n{'partition':22} {'size':>13} {'state':9} {'units':>5}  {'unit states':28} "
        f"{'wall s':>6}"
    )
    for p in pilot.partitions:
        mine = by_part.get(p.uid, [])
        starts = [t for u in mine for s, t in u.history if s == rp.EXECUTING]
        ends = [u.history[-1][1] for u in mine if u.final]
        wall = f"{max(ends) - min(starts):6.2f}" if starts and ends else "     -"
        states = ", ".join(f"{k} {v}" for k, v in sorted(Counter(u.state for u in mine).items()))
        size = f"{p.cores}c/{p.gpus}g"
        print(f"{p.uid:22} {size:>13} {p.state:9} {len(mine):>5}  {states:28} {wall}")
    reasons = Counter(f"{u.state}: {u.reason}" for u in units if u.state != rp.DONE)
    for reason, n in reasons.items():
        print(f"  {n} unit(s) {reason}")


if __name__ == "__main__":
    sys.exit(main())
