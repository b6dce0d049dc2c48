"""A client that streams a named sweep of zero-launch units (tests/test_stream_resume.py).

    python -m tests.scenarios.stream_client DATABASE_URL N [SESSION_UID]

Without SESSION_UID: a new session, a pilot on local.zero; with it: the session attached
(its dead owner's pilot taken back).  Either way it submits items 0..N-1 as
`submit_units(gen, lazy=True, name="sweep")`, item i a unit of /bin/true with the argument
str(i % 97) (97 descriptions, so that a unit's item can be told apart from its neighbours'),
prints {"session", "made"} lines every 20 ms while the stream pulls (the test kills it at a
point of its choosing), and at the end the stream's counts, then closes the session.
"""

from __future__ import annotations

import json
import sys
import time

import pilot as rp

NAME = "sweep"
KINDS = 97


def main() -> int:
    t0 = time.monotonic()
    url, n = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        session = rp.Session(uid=sys.argv[3], database_url=url)
        (pilot,) = rp.PilotManager(session).get_pilots()
        print(f"stream_client: attached in {time.monotonic() - t0:.2f} s", file=sys.stderr)
    else:
        session = rp.Session(database_url=url)
        pd = rp.ComputePilotDescription(
            resource="local.zero", parts=[rp.ComputePartitionDescription(cores=64)], runtime=10
        )
        pilot = rp.PilotManager(session).submit_pilots(pd)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    print(f"stream_client: units in {time.monotonic() - t0:.2f} s", file=sys.stderr)
    if pilot.partitions[0].wait(rp.ACTIVE, timeout=60) != rp.ACTIVE:
        raise SystemExit(f"partition {pilot.partitions[0].state}: {pilot.reason}")
    kinds = [
        rp.ComputeUnitDescription(executable="/bin/true", arguments=[str(k)]) for k in range(KINDS)
    ]
    ready = time.monotonic() - t0
    stream = umgr.submit_units((kinds[i % KINDS] for i in range(n)), lazy=True, name=NAME)
    print(f"stream_client: ready in {ready:.2f} s", file=sys.stderr, flush=True)
    while stream.thread.is_alive():
        print(json.dumps({"session": session.uid, "made": len(stream)}), flush=True)
        time.sleep(0.02)
    counts = stream.wait(timeout=120)
    print(json.dumps({"session": session.uid, "made": len(stream), "counts": counts}), flush=True)
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
