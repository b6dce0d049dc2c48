"""A named stream submitted while the store's disk is full (a regression the campaign found:
tests/test_chaos.py).  JSON out.

    unshare -m --propagation private sh -c 'mount -t tmpfs -o size=2m tmpfs SMALL &&
        exec python -m tests.chaos.full_store_stream SMALL'

The session (its sqlite store) is on SMALL, a tmpfs only this process tree sees.  Once a pilot
on local.zero runs, SMALL is filled, and a named stream of N units is submitted (lazy); after
3 s space comes back.  Said: how many units the stream made, what `stream.wait()` returned or
raised, and the stream's own error.  What the guarantees ask: every item one unit, DONE (the
store written once space came back), or the submit refused as a whole (rp.StoreUnavailable)
with nothing made; never items silently left out.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import pilot as rp
from tests.scenarios.full_disk_client import fill

N = 40


def main(small: str) -> dict:
    os.environ["PILOT_SESSIONS_DIR"] = small
    session = rp.Session()
    try:
        pd = rp.ComputePilotDescription(
            resource="local.zero", parts=[rp.ComputePartitionDescription(cores=8)], runtime=3
        )
        pilot = rp.PilotManager(session).submit_pilots(pd)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        assert pilot.partitions[0].wait(rp.ACTIVE, timeout=60) == rp.ACTIVE
        cud = rp.ComputeUnitDescription(executable="/bin/true")
        umgr.submit_units([cud] * 5)
        umgr.wait_units(timeout=60)
        session.writer.flush(timeout=30)
        filler = os.path.join(small, "filler")
        fill(filler)
        threading.Timer(3.0, os.unlink, [filler]).start()
        stream = umgr.submit_units((cud for _ in range(N)), lazy=True, name="full")
        stream.thread.join(90)
        try:
            counts, error = stream.wait(timeout=90), None
        except Exception as exc:
            counts, error = None, f"{type(exc).__name__}: {exc}"
        return {
            "session": session.uid,
            "n": N,
            "made": len(stream),
            "counts": counts,
            "error": error,
            "stream_error": repr(stream.error),
        }
    finally:
        session.close()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])), flush=True)
