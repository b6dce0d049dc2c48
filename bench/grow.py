"""A pilot that grows by batch jobs: what a grow costs, and what adapting saves.

    python bench/grow.py [--cycles 5] [--slurm] [--scale 1.0]

  grow      from pilot.reconfig(start=nodes=3) beyond the pilot's free nodes to the new
            partition ACTIVE, split at the bootstrap's clock: asked -> joined (the batch
            system's submission, queue and start, the joining daemons' start) and joined ->
            ACTIVE (the agent's start); then the stop, until the job is given back
  pilot     beside it, in the same run: from submit_pilots() to the first partition ACTIVE
            (a fresh pilot job of the same resource): what a new pilot would cost instead
  queue     (--slurm) the batch system's own time from submit to start of each grow job
            (`scontrol show job`: SubmitTime, StartTime, whole seconds), beside the grow
            latency; SLURM from tests/slurm.sh (four logical nodes, needs root)
  adapt     a workload with a narrow head, a wide middle and a long thin tail (all sleeps:
            2 units of 4 s; then 48 of 2 s; then 1 of 20 s, x --scale), run once on a fixed
            pilot of 4 nodes and once on an adaptive one (1 node, rp.Adapt(max_nodes=4,
            grow_after=1, idle_after=2)): makespan and node-seconds held, each job counted
            from when its nodes joined to when they were given back (or the workload ended)
Everything on local.nodes4 (four logical nodes, the `local` batch system: a grow job is a
process tree here, so `asked -> joined` is the submission and the daemons' start only).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402

CPD = rp.ComputePartitionDescription
CUD = rp.ComputeUnitDescription
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def med(values: list[float], unit: float = 1000.0) -> str:
    if not values:
        return "-"
    lo, mid, hi = min(values) * unit, statistics.median(values) * unit, max(values) * unit
    return f"{mid:.0f} [{lo:.0f}-{hi:.0f}]"


def wait_job(pilot, name: str, state: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = next((j for j in pilot.jobs if j["job"] == name), {})
        if job.get("state") == state:
            return job
        time.sleep(0.02)
    raise SystemExit(f"{name} not {state} within {timeout:g} s: {pilot.jobs}")


def grow_cycles(resource: str, cycles: int, slurm: bool) -> dict:
    """Grow and give back `cycles` times on one pilot; the timings of each."""
    out: dict = {"total": [], "asked_joined": [], "joined_active": [], "release": [], "queue": []}
    with rp.Session() as s:
        pilot = rp.PilotManager(s).submit_pilots(
            rp.ComputePilotDescription(resource=resource, nodes=1, max_nodes=4, runtime=15,
                                       parts=[CPD(nodes=1)])
        )  # fmt: skip
        if pilot.partitions[0].wait(rp.ACTIVE, timeout=120) != rp.ACTIVE:
            raise SystemExit(f"pilot: {pilot.state} {pilot.reason}")
        for i in range(cycles):
            name = f"job.{i + 1:04d}"
            t0 = time.time()
            [new] = pilot.reconfig(start=CPD(nodes=3))
            if new.wait([rp.ACTIVE, rp.FAILED], timeout=120) != rp.ACTIVE:
                raise SystemExit(f"grow {i}: {new.state} {new.reason}")
            t_active = new.history[-1][1]
            job = wait_job(pilot, name, "joined")
            out["total"].append(t_active - t0)
            out["asked_joined"].append(job["joined"] - job["asked"])
            out["joined_active"].append(t_active - job["joined"])
            if slurm:
                out["queue"].append(slurm_queue_time(job["id"]))
            t1 = time.time()
            pilot.reconfig(stop=new.uid)
            wait_job(pilot, name, "released")
            out["release"].append(time.time() - t1)
        pilot.cancel(timeout=60)
    return out


def slurm_queue_time(job_id: str) -> float:
    """SubmitTime -> StartTime of a SLURM job, as the batch system says (whole seconds)."""
    text = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=20
    ).stdout
    got = dict(re.findall(r"(SubmitTime|StartTime)=(\S+)", text))
    if len(got) < 2:
        return float("nan")
    fmt = "%Y-%m-%dT%H:%M:%S"
    return time.mktime(time.strptime(got["StartTime"], fmt)) - time.mktime(
        time.strptime(got["SubmitTime"], fmt)
    )


def pilot_starts(resource: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        with rp.Session() as s:
            t0 = time.time()
            pilot = rp.PilotManager(s).submit_pilots(
                rp.ComputePilotDescription(resource=resource, nodes=3, runtime=5,
                                           parts=[CPD(nodes=3)])
            )  # fmt: skip
            if pilot.partitions[0].wait(rp.ACTIVE, timeout=120) != rp.ACTIVE:
                raise SystemExit(f"pilot: {pilot.state} {pilot.reason}")
            out.append(pilot.partitions[0].history[-1][1] - t0)
            pilot.cancel(timeout=60)
    return out


def sleeps(n: int, seconds: float) -> list:
    return [CUD(executable="/bin/sleep", arguments=[f"{seconds:.3f}"]) for _ in range(n)]


def workload(adaptive: bool, scale: float) -> dict:
    """The head / middle / tail workload on a fixed or an adaptive pilot."""
    with rp.Session() as s:
        if adaptive:
            pd = rp.ComputePilotDescription(
                resource="local.nodes4", nodes=1, runtime=15, parts=[CPD(nodes=1)],
                adapt=rp.Adapt(max_nodes=4, grow_after=1, idle_after=2),
            )  # fmt: skip
        else:
            pd = rp.ComputePilotDescription(
                resource="local.nodes4", nodes=4, runtime=15, parts=[CPD(nodes=4)]
            )
        pilot = rp.PilotManager(s).submit_pilots(pd)
        umgr = rp.UnitManager(s)
        umgr.add_pilots(pilot)
        if pilot.partitions[0].wait(rp.ACTIVE, timeout=120) != rp.ACTIVE:
            raise SystemExit(f"pilot: {pilot.state} {pilot.reason}")
        t0 = time.time()
        for n, seconds in ((2, 4.0), (48, 2.0), (1, 20.0)):
            units = umgr.submit_units(sleeps(n, seconds * scale))
            states = umgr.wait_units([u.uid for u in units], timeout=600)
            if set(states) != {rp.DONE}:
                raise SystemExit(f"units: {states}")
        t_end = time.time()
        jobs = pilot.jobs
        decisions = pilot.adapt_log
        pilot.cancel(timeout=60)
    held = pd.nodes * (t_end - t0)
    for j in jobs[1:]:
        if j.get("joined"):
            held += j["nodes"] * (min(j.get("ended") or t_end, t_end) - max(j["joined"], t0))
    return {
        "makespan": t_end - t0,
        "node_s": held,
        "jobs": len(jobs) - 1,
        "grows": sum(d["action"] == "grow" for d in decisions),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--slurm", action="store_true", help="grow on tests/slurm.sh's SLURM too")
    ap.add_argument("--scale", type=float, default=1.0, help="the workload's durations x this")
    args = ap.parse_args()

    rows = []
    local = grow_cycles("local.nodes4", args.cycles, False)
    starts = pilot_starts("local.nodes4", args.cycles)
    rows.append(("local.nodes4", local, starts))
    if args.slurm:
        up = subprocess.run(["bash", os.path.join(ROOT, "tests", "slurm.sh"), "up"],
                            capture_output=True, text=True, timeout=600)  # fmt: skip
        if up.returncode != 0:
            raise SystemExit(f"tests/slurm.sh up: {up.stderr[-2000:]}")
        for line in up.stdout.splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            os.environ[key] = value
        os.environ.setdefault("PILOT_CLIENT_ADDRESS", "127.0.0.1")
        grown = grow_cycles("slurm.localhost", args.cycles, True)
        rows.append(("slurm.localhost", grown, pilot_starts("slurm.localhost", args.cycles)))

    print(f"\ngrow by 3 nodes and give back, {args.cycles} cycles (ms: median [min-max])")
    head = ("resource", "request->ACTIVE", "asked->joined", "joined->ACTIVE", "give back",
            "queue (batch)", "new pilot", "grow / new pilot")  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, g, st in rows:
        ratio = statistics.median(g["total"]) / statistics.median(st)
        queue = med(g["queue"], 1.0) + " s" if g["queue"] else "0 (a process)"
        print(
            f"| {name} | {med(g['total'])} | {med(g['asked_joined'])} | "
            f"{med(g['joined_active'])} | {med(g['release'])} | {queue} | {med(st)} | "
            f"{ratio:.2f} |"
        )

    fixed = workload(False, args.scale)
    adaptive = workload(True, args.scale)
    print("\nhead / wide middle / thin tail workload, local.nodes4 (node-seconds held)")
    print("| pilot | makespan s | node-s | jobs | adaptive / fixed |")
    print("|---|---|---|---|---|")
    print(f"| fixed, 4 nodes | {fixed['makespan']:.1f} | {fixed['node_s']:.0f} | 0 | |")
    print(
        f"| adaptive, 1-4 nodes | {adaptive['makespan']:.1f} | {adaptive['node_s']:.0f} | "
        f"{adaptive['jobs']} | node-s {adaptive['node_s'] / fixed['node_s']:.2f}, "
        f"makespan {adaptive['makespan'] / fixed['makespan']:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
