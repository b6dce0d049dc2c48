"""A client of a take-over cut short (tests/test_takeover_cut.py).

    python -m tests.scenarios.takeover_client RESOURCE.yaml LOG N [SESSION_UID]

The store is PILOT_DATABASE_URL's.  Without SESSION_UID: a new session, a pilot on
RESOURCE.yaml with two partitions, N units that write the ground-truth log LOG
(tests/faults.py) submitted, then one more every 50 ms; with it: the session taken over
(`take_over=True`: its owner may be alive), its units adopted, N more units submitted.  Each
step done is said on stdout, one JSON line {"stage", "session", "t"}: `session` (the Session
made), `attached` (the pilot taken: PilotManager), `adopted` (the units: UnitManager, their
agents asked), `submitted`, `running` (the first owner's units executing, the store caught
up).  Then it waits to be killed (at most 120 s): the test kills every client of this kind at
a point of its choosing.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pilot as rp
from tests.faults import truth_unit

T0 = time.monotonic()


def say(stage: str, session) -> None:
    line = {"stage": stage, "session": session.uid, "t": round(time.monotonic() - T0, 3)}
    print(json.dumps(line), flush=True)


def main() -> int:
    resource, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if len(sys.argv) > 4:
        session = rp.Session(uid=sys.argv[4], take_over=True)
        say("session", session)
        (pilot,) = rp.PilotManager(session).get_pilots()
        say("attached", session)
        umgr = rp.UnitManager(session)
        say("adopted", session)
        umgr.submit_units([truth_unit(log, sleep=0.3) for _ in range(n)])
        say("submitted", session)
    else:
        session = rp.Session()
        say("session", session)
        parts = [rp.ComputePartitionDescription(cores=2), rp.ComputePartitionDescription(cores=2)]
        pd = rp.ComputePilotDescription(resource=resource, parts=parts, runtime=5)
        pilot = rp.PilotManager(session).submit_pilots(pd)
        for part in pilot.partitions:
            if part.wait(rp.ACTIVE, timeout=60) != rp.ACTIVE:
                raise SystemExit(f"partition {part.state}: {part.reason} / {pilot.reason}")
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        units = umgr.submit_units([truth_unit(log, sleep=0.3) for _ in range(n)])
        units[0].wait(rp.EXECUTING, timeout=60)
        session.writer.flush(timeout=30)
        say("running", session)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # one more unit every 50 ms until it is killed
            umgr.submit_units(truth_unit(log, sleep=0.3))
            time.sleep(0.05)
    time.sleep(120)  # (killed long before: a client left behind ends here)
    os._exit(3)


if __name__ == "__main__":
    sys.exit(main())
