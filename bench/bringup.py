"""Multi-node bring-up time against node count, and unit throughput across four logical nodes.

    python bench/bringup.py [--nodes 4,16,64] [--reps 2] [--units 2000]

Bring-up: a pilot of N nodes (node daemons started by fork on this machine, one per logical
node, fan-out width 8), four partitions of N/4 nodes each.  Measured from submit_pilots() to
every partition ACTIVE; the bootstrap's own figures (daemons up, table broadcast, bytes of the
compressed channel table, tree depth, copies the bootstrap sends) come from its log.
Baseline in the same run: starting N `python -c "import zmq"` processes at once and waiting
for them, i.e. the interpreter start-up that any daemon-per-node design pays on this machine.
Target: grows no worse than linearly in N; broadcast depth log_8(N), the bootstrap sending at
most 8 copies of the table whatever N is.

Throughput: --units /bin/true units on a single-node pilot (local.localhost, the agent spawns
them itself) and on four logical nodes (local.nodes4, every unit through a node daemon, its
output captured and forwarded), same run.
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402

CPD = rp.ComputePartitionDescription


def resource_file(tmp: str, n: int) -> str:
    path = os.path.join(tmp, f"fork{n}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                "description": f"{n} logical nodes, a daemon each",
                "batch_system": "local",
                "launch_method": "fork",
                "node_daemons": True,
                "nodes": n,
                "cores_per_node": 1,
                "bringup_timeout": 300,
                "node_timeout": 120,
            },
            f,
        )
    return path


def bring_up(session, res: str, n: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(
            resource=res, parts=[CPD(nodes=n // 4) for _ in range(4)], runtime=10
        )
    )
    for part in pilot.partitions:
        assert part.wait(rp.ACTIVE, timeout=600) == rp.ACTIVE, part.reason
    took = time.perf_counter() - t0
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        line = next(x for x in f if "boot.nodes.table:" in x)
    stats = ast.literal_eval(line.split("boot.nodes.table: ", 1)[1])
    pilot.cancel(timeout=120)
    return took, stats


def baseline(n: int) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", "import zmq"]) for _ in range(n)]
    for p in procs:
        p.wait(timeout=300)
    return time.perf_counter() - t0


def throughput(session, resource: str, parts, units: int) -> float:
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(resource=resource, parts=parts, runtime=30)
    )
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    for part in pilot.partitions:
        part.wait(rp.ACTIVE, timeout=60)
    t0 = time.perf_counter()
    done = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * units)
    umgr.wait_units(timeout=600)
    took = time.perf_counter() - t0
    bad = [u for u in done if u.state != rp.DONE]
    assert not bad, bad[0].reason
    pilot.cancel(timeout=60)
    return units / took


def med(xs):
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="4,16,64")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--units", type=int, default=2000)
    args = ap.parse_args()
    counts = [int(x) for x in args.nodes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        with rp.Session(dir=tmp, database_url="null://") as session:
            for n in counts:
                res = resource_file(tmp, n)
                took, base, stats = [], [], None
                for _ in range(args.reps):
                    t, stats = bring_up(session, res, n)
                    took.append(t)
                    base.append(baseline(n))
                rows.append((n, med(took), med(base), stats))
            single = [
                throughput(session, "local.localhost", [CPD(cores=2)], args.units)
                for _ in range(args.reps)
            ]
            multi = [
                throughput(session, "local.nodes4", [CPD(nodes=2), CPD(nodes=2)], args.units)
                for _ in range(args.reps)
            ]
    print(f"\nbring-up (median of {args.reps}; fan-out width {rows[0][3]['fanout']})\n")
    print(
        "| nodes | submit -> all partitions ACTIVE s | daemons up s | table s | baseline "
        "N x python s | ours / baseline | s per node | table bytes (json) | tree depth | "
        "bootstrap sends |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, t, b, st in rows:
        print(
            f"| {n} | {t:.2f} | {st['up_s']:.2f} | {st['table_s']:.3f} | {b:.2f} | {t / b:.2f} | "
            f"{t / n:.3f} | {st['table_bytes']} ({st['table_json_bytes']}) | "
            f"{st['tree_depth']} | {st['bootstrap_sends']} |"
        )
    if len(rows) > 1:
        (n0, t0, _, _), (n1, t1, _, _) = rows[0], rows[-1]
        print(
            f"\ngrowth {n0} -> {n1} nodes: x{t1 / t0:.2f} in time for x{n1 / n0:.0f} nodes "
            f"(linear would be x{n1 / n0:.0f})"
        )
    print(f"\nthroughput, {args.units} /bin/true units (median of {args.reps})\n")
    print("| pilot | units/s | vs single node |")
    print("|---|---|---|")
    print(f"| single node, 2 cores (agent spawns) | {med(single):.0f} | 1.00 |")
    print(
        f"| 4 logical nodes x 2 cores (node daemons, output forwarded) | {med(multi):.0f} | "
        f"{med(multi) / med(single):.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
