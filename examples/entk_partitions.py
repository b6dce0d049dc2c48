"""Partitions per stage, in RADICAL-EnTK's API (pilot.entk): the simulate/analyse pattern of
examples/pipeline.py, written as an EnTK pipeline.  No other EnTK runs stages on different
partitions of one pilot, or reshapes the pilot between stages.

The pilot (resource_desc 'partitions') starts with two partitions:
    simulate   2 cores, 2 GPUs     analyse   2 cores
and the pipeline has four stages, each naming the partition(s) its tasks run in:
    simulate 1   GPU tasks (gpu_reqs) on 'simulate'
    analyse 1    CPU tasks on 'analyse' and 'lent': as the stage starts, its reconfig stops
                 'simulate' and starts 'lent', a CPU partition of its 2 cores
    simulate 2   the cores go back: its reconfig stops 'lent', starts 'simulate' again
    analyse 2    lent again
Each task writes the partition it ran in ($RP_PARTITION_ID) and its GPUs to its stdout file;
at the end the script prints, per stage, where its tasks ran and when.

    python examples/entk_partitions.py [--tasks 4] [--summary summary.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot.entk as re  # noqa: E402  (was: import radical.entk as re)

SIMULATE = {"name": "simulate", "cores": 2, "gpus": 2}
LENT = {"name": "lent", "cores": 2}
LOG = "$RP_PILOT_SANDBOX/times.txt"


def task(stage: str, i: int, seconds: float, gpus: int) -> re.Task:
    t = re.Task()
    t.name = f"t{i}"
    t.executable = "/bin/sh"
    t.arguments = ["-c", "echo $RP_PARTITION_ID gpus=$CUDA_VISIBLE_DEVICES"]
    t.pre_exec = [f'echo "{stage} start $(date +%s.%N)" >> {LOG}', f"sleep {seconds}"]
    t.post_exec = [f'echo "{stage} end $(date +%s.%N)" >> {LOG}']
    t.stdout = "out.txt"
    t.gpu_reqs = {"gpu_processes": gpus}
    return t


def stage(name: str, tasks: list, partition, reconfig=None) -> re.Stage:
    s = re.Stage()
    s.name = name
    s.add_tasks(tasks)
    s.partition = partition  # beyond EnTK: the partition(s) its tasks run in
    if reconfig:
        s.reconfig = reconfig  # beyond EnTK: done as the stage starts
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=4, help="tasks per simulation stage")
    ap.add_argument("--summary", help="write per-stage results as JSON here")
    args = ap.parse_args()
    n = args.tasks

    def simulate(k: int, reconfig=None) -> re.Stage:
        name = f"simulate {k}"
        return stage(name, [task(name, i, 1.5, 1) for i in range(n)], "simulate", reconfig)

    def analyse(k: int) -> re.Stage:
        name = f"analyse {k}"
        lend = {"stop": "simulate", "start": [LENT]}
        return stage(name, [task(name, i, 1, 0) for i in range(2 * n)], ["analyse", "lent"], lend)

    p = re.Pipeline()
    p.name = "sim ana"
    p.add_stages([simulate(1), analyse(1), simulate(2, {"stop": "lent", "start": [SIMULATE]}),
                  analyse(2)])  # fmt: skip

    amgr = re.AppManager()
    amgr.resource_desc = {
        "resource": "local.simulated",  # logical nodes of 4 cores and 2 GPUs, on this machine
        "walltime": 10,
        "cpus": 4,
        "gpus": 2,
        "partitions": [SIMULATE, {"name": "analyse", "cores": 2}],
    }
    amgr.workflow = [p]
    amgr.outputs = ["$SHARED/times.txt"]
    amgr.run()
    names = {part.uid: part.description.name for part in amgr.pilot.partitions}
    amgr.terminate()

    times: dict = {}  # (stage, 'start' or 'end') -> epoch seconds of its tasks
    with open("times.txt") as f:
        for line in f:
            label, kind, when = line.rsplit(" ", 2)
            times.setdefault((label, kind), []).append(float(when))
    t0 = min(min(v) for v in times.values())
    summary = []
    for s in p.stages:
        ran = []
        for t in s.tasks:
            with open(os.path.join(t.path, "out.txt")) as f:
                part, gpus = f.read().split()
            ran.append({"partition": part, "name": names[part], "gpus": gpus[5:], "state": t.state})
        where = sorted({f"{r['name']} ({r['partition']})" for r in ran})
        done = sum(r["state"] == re.states.DONE for r in ran)
        start, end = min(times[s.name, "start"]) - t0, max(times[s.name, "end"]) - t0
        print(
            f"{s.name:11} {done}/{len(ran)} DONE, {start:4.1f}-{end:4.1f} s, on {', '.join(where)}"
        )
        summary.append(
            {"stage": s.name, "state": s.state, "tasks": ran, "start": start, "end": end}
        )
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f, indent=1)
    return 0 if p.state == re.states.DONE else 1


if __name__ == "__main__":
    sys.exit(main())
