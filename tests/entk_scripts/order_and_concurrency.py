"""Two pipelines of three stages of two tasks each, on a pilot of 4 cores: EnTK runs a stage's
tasks only when the stage before it in its pipeline ended, and the pipelines side by side.
Every task sleeps 1 s and records its start and end (common.timed).  Then a second workflow
runs on the same pilot (AppManager.run() again)."""

import common

import pilot.entk as re


def make(p: str) -> re.Pipeline:
    stages = [
        common.stage(s, [common.timed(f"{p}.{s}.{t}", 1) for t in ("t1", "t2")])
        for s in ("s1", "s2", "s3")
    ]
    return common.pipeline(p, stages)


if __name__ == "__main__":
    amgr = re.AppManager()
    amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 4}
    first = [make("a"), make("b")]
    amgr.workflow = set(first)
    amgr.run()
    pilot = amgr.pilot.uid
    second = [make("c")]
    amgr.workflow = second
    amgr.outputs = ["$SHARED/times.txt"]
    amgr.run()
    same = amgr.pilot.uid == pilot
    amgr.terminate()
    common.summary(first + second, same_pilot=same)
