"""Multi-node bring-up time against node count, and unit throughput across four logical nodes.

    python bench/bringup.py [--nodes 4,16,64] [--reps 2] [--units 2000] [--methods exec,fork]

Bring-up: a pilot of N logical nodes on this machine, a real node daemon each (no stand-in:
agent/node/daemon.py with its CURVE keys, pulse channel and log), fan-out width 8, four
partitions of N/4 nodes each.  Measured from submit_pilots() to every partition ACTIVE, for
each launch method named in --methods, same run:
    exec   every daemon a fresh `python -m pilot.agent.node.daemon` (an interpreter start and
           its imports per node, all on this host's cores): the baseline
    fork   one node zygote (agent/node/zygote.py) imports the daemon's code once and forks
           every daemon (partition/launch/fork.py): what resources with launch_method fork use
Where the time goes, from the bootstrap's log (its timestamps against the client's clock):
    job     submit -> the bootstrap's channels bound (boot.connect: the pilot job's start)
    launch  -> every daemon process started (exec: N Popen; fork: the zygote's start and N forks)
    up      -> every daemon reported `up` (boot.nodes.up)
    table   -> the channel table confirmed by every node (boot.nodes.table)
    agents  -> every partition ACTIVE (four agents forked, each connected to its nodes)
On a real cluster each node's daemon starts on its own host in parallel; here every start is
paid on the same cores, so `launch` + `up` is what a daemon costs this host, times N.
Target (issue 36): Flux boots 256 brokers in 0.3-0.8 s on a desktop.

Throughput (--units > 0): /bin/true units on a single-node pilot (local.localhost, the agent
spawns them itself) and on four logical nodes (local.nodes4, launch method fork, every unit
through a node daemon, its output captured and forwarded), same run.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import os
import statistics
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402

CPD = rp.ComputePartitionDescription


PHASES = ["job", "launch", "up", "table", "agents"]
MARKS = [  # the bootstrap log line that ends each phase but the last (see the docstring)
    "boot.connect:",
    "daemon(s) by",  # boot.nodes.launch: N daemon(s) by METHOD
    "boot.nodes.up:",
    "boot.nodes.table:",
]


def resource_file(tmp: str, n: int, method: str) -> str:
    path = os.path.join(tmp, f"{method}{n}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                "description": f"{n} logical nodes, a daemon each",
                "batch_system": "local",
                "launch_method": method,
                "node_daemons": True,
                "nodes": n,
                "cores_per_node": 1,
                "bringup_timeout": 300,
                "node_timeout": 120,
            },
            f,
        )
    return path


def stamp(line: str) -> float:
    """The wall-clock time of a log line ("2026-01-01 12:00:00,123 ...")."""
    when = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return when.timestamp()


def bring_up(session, res: str, n: int) -> tuple[float, dict, dict]:
    """(submit -> all ACTIVE s, the bootstrap's table stats, seconds per phase)."""
    t0 = time.time()
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(
            resource=res, parts=[CPD(nodes=n // 4) for _ in range(4)], runtime=10
        )
    )
    for part in pilot.partitions:
        assert part.wait(rp.ACTIVE, timeout=600) == rp.ACTIVE, part.reason
    t1 = time.time()
    marks = {}
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        for line in f:
            for mark in MARKS:
                if mark in line and mark not in marks:
                    marks[mark] = line
    stats = ast.literal_eval(marks["boot.nodes.table:"].split("boot.nodes.table: ", 1)[1])
    ends = [stamp(marks[m]) for m in MARKS] + [t1]
    phases = dict(zip(PHASES, [b - a for a, b in zip([t0, *ends], ends)]))
    pilot.cancel(timeout=120)
    return t1 - t0, stats, phases


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
    ap.add_argument("--units", type=int, default=2000, help="0: no throughput runs")
    ap.add_argument("--methods", default="exec,fork", help="launch methods, baseline first")
    args = ap.parse_args()
    counts = [int(x) for x in args.nodes.split(",")]
    methods = args.methods.split(",")
    rows = {}  # (n, method) -> (median s, stats, median phases)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        with rp.Session(dir=tmp, database_url="null://") as session:
            for n in counts:
                for method in methods:
                    res = resource_file(tmp, n, method)
                    runs = [bring_up(session, res, n) for _ in range(args.reps)]
                    phases = {p: med([r[2][p] for r in runs]) for p in PHASES}
                    rows[n, method] = (med([r[0] for r in runs]), runs[-1][1], phases)
            if args.units:
                single = [
                    throughput(session, "local.localhost", [CPD(cores=2)], args.units)
                    for _ in range(args.reps)
                ]
                multi = [
                    throughput(session, "local.nodes4", [CPD(nodes=2), CPD(nodes=2)], args.units)
                    for _ in range(args.reps)
                ]
    load.append(os.getloadavg()[0])
    width = next(iter(rows.values()))[1]["fanout"]
    print(
        f"\nbring-up, N logical nodes, a real node daemon each (median of {args.reps}; "
        f"fan-out width {width}; load average {load[0]:.1f} before, {load[1]:.1f} after, on "
        f"{os.cpu_count()} cores)\n"
    )
    print(
        "| nodes | daemons started by | submit -> all partitions ACTIVE s | "
        + " | ".join(f"{p} s" for p in PHASES)
        + f" | vs {methods[0]} | s per node | table bytes (json) | tree depth | bootstrap sends |"
    )
    print("|---" * (8 + len(PHASES)) + "|")
    for (n, method), (t, st, ph) in rows.items():
        base = rows[n, methods[0]][0]
        print(
            f"| {n} | {method} | {t:.2f} | "
            + " | ".join(f"{ph[p]:.2f}" for p in PHASES)
            + f" | {t / base:.2f} | {t / n:.3f} | {st['table_bytes']} "
            f"({st['table_json_bytes']}) | {st['tree_depth']} | {st['bootstrap_sends']} |"
        )
    for method in methods:
        if len(counts) > 1:
            t0, t1 = rows[counts[0], method][0], rows[counts[-1], method][0]
            n0, n1 = counts[0], counts[-1]
            print(f"\n{method}: {n0} -> {n1} nodes x{t1 / t0:.2f} in time for x{n1 / n0:.0f} nodes")
    if not args.units:
        return 0
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
