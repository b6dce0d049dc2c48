"""A stalled bootstrap: a 4-node pilot whose bootstrap is stopped (SIGSTOP) while units run.

    python bench/freeze.py [--freeze 20] [--node-timeout 10] [--units 12]

local.nodes4 (four logical nodes, a node daemon each) with the node_timeout given; units of
/bin/sh that sleep freeze/2 s and write a line when they start and one when they end, so that
some end while the bootstrap is stopped.  Once 8 run, the bootstrap gets SIGSTOP for `freeze`
seconds, then SIGCONT.  Prints one JSON line: the units by final state, how many started more
than once (must be 0), the nodes lost (must be none), what the daemons logged of the silence,
and how long after SIGCONT the last unit ended.  The pytest version, smaller:
tests/test_liveness.py (8 s, node_timeout 2 s).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402
from pilot import liveness  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--freeze", type=float, default=20.0)
    p.add_argument("--node-timeout", type=float, default=10.0)
    p.add_argument("--units", type=int, default=12)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="freeze-")
    with open(os.path.join(os.path.dirname(rp.__file__), "..", "configs", "local.yaml")) as f:
        cfg = yaml.safe_load(f)["nodes4"]
    res = os.path.join(tmp, "nodes4.yaml")
    with open(res, "w") as f:
        yaml.safe_dump(dict(cfg, node_timeout=a.node_timeout), f)
    truth = os.path.join(tmp, "truth.log")
    script = (
        f'echo "$PILOT_UNIT_ID start" >> {truth}; sleep {a.freeze / 2}; '
        f'echo "$PILOT_UNIT_ID end" >> {truth}'
    )
    with rp.Session(dir=os.path.join(tmp, "session")) as session:
        pd = rp.ComputePilotDescription(
            resource=res, parts=[rp.ComputePartitionDescription(nodes=4)], runtime=10
        )
        pilot = rp.PilotManager(session).submit_pilots(pd)
        assert pilot.partitions[0].wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, pilot.reason
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        cud = rp.ComputeUnitDescription(executable="/bin/sh", arguments=["-c", script])
        units = umgr.submit_units([cud] * a.units)
        deadline = time.monotonic() + 30
        while sum(u.state == rp.EXECUTING for u in units) < min(8, a.units):
            assert time.monotonic() < deadline, [u.state for u in units]
            time.sleep(0.02)
        os.kill(pilot.job.pid, signal.SIGSTOP)
        try:
            time.sleep(a.freeze)
        finally:
            os.kill(pilot.job.pid, signal.SIGCONT)
        resumed = time.monotonic()
        umgr.wait_units(timeout=120)
        took = time.monotonic() - resumed
        time.sleep(liveness.tolerance(0))  # (the daemons' first heartbeat after the freeze)
        starts = Counter()
        for line in open(truth).read().splitlines():
            uid, _, what = line.partition(" ")
            starts[uid] += what == "start"
        with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
            boot = f.read()
        nodes = ""
        for name in sorted(os.listdir(os.path.join(pilot.sandbox, "nodes"))):
            with open(os.path.join(pilot.sandbox, "nodes", name)) as f:
                nodes += f.read()
        out = {
            "freeze_s": a.freeze,
            "node_timeout_s": a.node_timeout,
            "states": dict(Counter(u.state for u in units)),
            "started_twice": sum(n > 1 for n in starts.values()),
            "nodes_lost": boot.count("node.lost"),
            "daemons_saw_silence": nodes.count("node.silent"),
            "daemons_heard_again": nodes.count("node.heard"),
            "last_unit_after_sigcont_s": round(took, 2),
            "pilot": pilot.state,
        }
    print(json.dumps(out))
    return 0 if out["states"] == {rp.DONE: a.units} and not out["nodes_lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
