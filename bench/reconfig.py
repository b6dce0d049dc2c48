"""Reconfig latency on localhost, beside the pilot start time.

    python bench/reconfig.py [--cycles 50] [--starts 5]

  start   from pilot.reconfig(start=[...]) to the new partition ACTIVE
  stop    from pilot.reconfig(stop=uid) to that partition CANCELED with its cores free again
          (pilot.free, as reported with the CANCELED update)
  pilot   from submit_pilots() to the first partition ACTIVE (fresh pilot each time)
Baseline in the same run: the time to start a bare `python -c pass` process, i.e. what any design
that starts an agent as a new interpreter pays at least once per partition.
Target: start and stop medians under 100 ms; pilot start under 1 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402

CPD = rp.ComputePartitionDescription


def ms(values: list[float]) -> str:
    return (
        f"{statistics.median(values) * 1000:.1f} "
        f"[{min(values) * 1000:.1f}-{max(values) * 1000:.1f}]"
    )


def python_start(n: int = 10) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--starts", type=int, default=5)
    args = ap.parse_args()
    pd = rp.ComputePilotDescription(
        resource="local.localhost", parts=[CPD(cores=1)], cores=2, runtime=10
    )
    starts, ups, downs = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        with rp.Session(dir=tmp) as session:
            pmgr = rp.PilotManager(session)
            for _ in range(args.starts):
                t0 = time.perf_counter()
                pilot = pmgr.submit_pilots(pd)
                pilot.partitions[0].wait(rp.ACTIVE, timeout=60)
                starts.append(time.perf_counter() - t0)
                pilot.cancel(timeout=60)
            pilot = pmgr.submit_pilots(pd)
            pilot.partitions[0].wait(rp.ACTIVE, timeout=60)
            for _ in range(args.cycles):
                t0 = time.perf_counter()
                new = pilot.reconfig(start=[CPD(cores=1)])[0]
                assert new.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, new.reason
                ups.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                pilot.reconfig(stop=new.uid)
                assert new.wait(timeout=30) == rp.CANCELED
                assert pilot.free["cores"] == 1
                downs.append(time.perf_counter() - t0)
    base = python_start()
    print(
        f"\n{args.cycles} reconfig cycles on a 2-core local.localhost pilot, "
        f"{args.starts} pilot starts\n"
    )
    print("| measure | median ms [min-max] |")
    print("|---|---|")
    print(f"| reconfig start -> partition ACTIVE | {ms(ups)} |")
    print(f"| reconfig stop -> partition CANCELED, cores free | {ms(downs)} |")
    print(f"| pilot start (submit -> first partition ACTIVE) | {ms(starts)} |")
    print(f"| baseline: start a bare python process | {ms(base)} |")
    print("\ntargets: start and stop < 100 ms; pilot start < 1 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
