"""What a job that grows a running pilot runs: the node daemons of its nodes, nothing else.

    python -m pilot.partition.nodes.join_job PILOT_SANDBOX/jobs/JOB/join.json

The pilot's first job runs the bootstrap (partition/bootstrap.py).  A later job of the same
pilot (asked for by partition/growth.py, submitted by the client: pmgr/core/pilot_jobs.py)
runs this on its first node instead: it starts one node daemon per node of the job through
the resource's launch method (srun over the job's allocation; fork or exec for logical nodes),
each with hint `hint_base` + its number in the job and the running bootstrap's node channel,
pulse and keys (join.json), so that they join the pilot (partition/nodes/joins.py).  Then it
waits until every daemon has ended, and exits with 0: the job ends when its daemons do (the
bootstrap halted them when it gave the job back, or the pilot ended).  SIGTERM (scancel, the
job's time limit) ends the daemons through the launch method first (they say bye; their nodes
are lost to the pilot and their units end FAILED with the reason).  The wait is bounded by
the runtime join.json gives (the pilot's) plus the launch's stop grace.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time

from pilot import processes
from pilot.config import resource_config
from pilot.partition import launch
from pilot.partition.launch.base import ALL_NODES

log = logging.getLogger("join")
POLL = 0.5  # s between looks at the daemons (and at the clock)


def run(cfg: dict) -> int:
    rcfg = resource_config.parse(cfg["resource"], cfg["resource_config"])
    if processes.names_vars(rcfg.python):  # (the job's shell expanded them: job_script.py)
        import dataclasses

        rcfg = dataclasses.replace(rcfg, python=sys.executable)
    daemon_cfg = {
        "pilot": cfg["pilot"],
        "session": cfg["session"],
        "pulse": cfg["pulse"],
        "pulse_s": cfg.get("pulse_s"),
        "curve": cfg.get("curve"),
        "hint_base": cfg["hint_base"],
        "positions": cfg.get("positions") or [],
    }
    ends: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: ends.append(signal.Signals(s).name))
    nodes = launch.for_resource(
        rcfg, cfg["nodes"], cfg["endpoint"], daemon_cfg, os.path.join(cfg["dir"], "nodes")
    )
    nodes.start()
    log.info(
        "join: %d daemon(s) of job %s of %s started by %s (hints %d..)",
        cfg["nodes"], cfg["job"], cfg["pilot"], nodes.method, cfg["hint_base"],
    )  # fmt: skip
    deadline = time.monotonic() + float(cfg["runtime"])
    while not ends and time.monotonic() < deadline:
        exited = nodes.exited()
        if exited and (ALL_NODES in exited or len(exited) >= cfg["nodes"]):
            log.info("join: every daemon ended: %s", exited)
            break
        time.sleep(POLL)
    else:
        log.info("join: %s; ending the daemons", ends[0] if ends else "runtime over")
    nodes.stop()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pilot.partition.nodes.join_job JOIN.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with open(argv[0]) as f:
        return run(json.load(f))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
