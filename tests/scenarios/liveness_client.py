"""A client in a test-host namespace whose node links fail silently (tests/test_liveness.py).

    python -m tests.scenarios.liveness_client SCENARIO RESOURCE.yaml CTL_NS [ARGS]

outage LINKS NAME SECONDS  one partition over every host; units on them all (on node NAME
                           too); the hosts LINKS (1 or 1,2,3) drop every packet for SECONDS,
                           then carry them again
silent LINK...             every link given drops every packet until the partition ends; then
                           the pilot is canceled
The links fail through tests/netns.py (`silence`, `mend`: tc on the bridge side, in CTL_NS).
Units write a ground-truth log (tests/faults.py), checked here: each ends exactly once.
Prints one JSON line last.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pilot as rp
from tests import netns
from tests.faults import check_exactly_once, truth_unit


def read(pilot, name: str) -> str:
    try:
        with open(os.path.join(pilot.sandbox, name)) as f:
            return f.read()
    except OSError:
        return ""


def start(session, resource: str, units: int, sleep: float):
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(
            resource=resource, parts=[rp.ComputePartitionDescription(nodes=3)], runtime=3
        )
    )
    part = pilot.partitions[0]
    if part.wait([rp.ACTIVE, rp.FAILED], timeout=60) != rp.ACTIVE:
        raise SystemExit(f"partition {part.state}: {part.reason} / pilot {pilot.reason}")
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    log = os.path.join(session.dir, "truth.log")
    return pilot, umgr, log, umgr.submit_units([truth_unit(log, sleep=sleep)] * units)


def wait_running_on(units, name: str) -> None:
    deadline = time.monotonic() + 30
    while not any(u.state == rp.EXECUTING and u.node == name for u in units):
        if time.monotonic() > deadline:
            raise SystemExit(f"no unit executing on {name}: {[(u.state, u.node) for u in units]}")
        time.sleep(0.02)


def outage(session, resource: str, ctl: str, links: str, name: str, seconds: str) -> dict:
    pilot, umgr, log, units = start(session, resource, units=18, sleep=1.0)
    wait_running_on(units, name)
    links = [int(k) for k in links.split(",")]
    for link in links:
        netns.silence(ctl, link)
    t0 = time.monotonic()
    try:
        time.sleep(float(seconds))
    finally:
        for link in links:
            netns.mend(ctl, link)
    mended = time.monotonic()
    umgr.wait_units(timeout=90)
    states = check_exactly_once(session, units, log)
    part = pilot.partitions[0]
    return {
        "pilot": pilot,
        "silent_s": round(mended - t0, 2),
        "states": dict(states),
        "reasons": sorted({u.reason for u in units if u.reason}),
        "victim_units": sum(u.node == name for u in units),
        "part": [part.state, part.reason],
        "pilot_state": pilot.state,
    }


def silent(session, resource: str, ctl: str, *links: str) -> dict:
    """Each of `links` ("LINK:NODE_NAME") dropped until every unit on its node has ended: how
    long that took, what the partition and the units became."""
    pilot, umgr, log, units = start(session, resource, units=12, sleep=30)
    deadline = time.monotonic() + 30
    while not any(u.state == rp.EXECUTING for u in units):
        if time.monotonic() > deadline:
            raise SystemExit(f"nothing executing: {[u.state for u in units]}")
        time.sleep(0.02)
    names = {link.split(":", 1)[1] for link in links}
    for link in links:
        netns.silence(ctl, int(link.split(":")[0]))
    t0 = time.monotonic()
    try:
        there = [u for u in units if u.node in names]
        umgr.wait_units([u.uid for u in there], timeout=60)
        ended = time.monotonic() - t0
        part = [pilot.partitions[0].state, pilot.partitions[0].reason]
        elsewhere = sorted({u.state for u in units if u not in there and u.node})
    finally:
        for link in links:
            netns.mend(ctl, int(link.split(":")[0]))
    pilot.cancel(timeout=30)
    umgr.wait_units(timeout=30)
    states = check_exactly_once(session, units, log)
    return {
        "pilot": pilot,
        "ended_s": round(ended, 2),
        "states": dict(states),
        "lost": [[u.state, u.reason] for u in there],
        "elsewhere": elsewhere,
        "reasons": sorted({u.reason or "" for u in units}),
        "part": part,
    }


def main() -> int:
    scenario, resource, ctl, *more = sys.argv[1:]
    session = rp.Session()
    try:
        result = {"outage": outage, "silent": silent}[scenario](session, resource, ctl, *more)
        pilot = result.pop("pilot")
    finally:
        session.close()
    result["session"] = session.uid
    result["final"] = [pilot.state, pilot.reason]
    result["log"] = read(pilot, "bootstrap.log")
    result["node_logs"] = {
        name: read(pilot, os.path.join("nodes", name))
        for name in sorted(os.listdir(os.path.join(pilot.sandbox, "nodes")))
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
