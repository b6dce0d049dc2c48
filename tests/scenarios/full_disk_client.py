"""A client whose disk fills up (tests/test_full_disk.py): one scenario, JSON out.

    unshare -m --propagation private sh -c 'mount -t tmpfs -o size=2m tmpfs SMALL &&
        exec python -m tests.scenarios.full_disk_client SCENARIO SMALL ROOMY'

Run in a private mount namespace: SMALL is a small tmpfs only this process tree sees (gone with
it), ROOMY a directory with room.

sandboxes  units write 400 KB each into sandboxes on SMALL until it is full (the pilot's own
           sandbox and the store on ROOMY)
store      the session directory (its store) is on SMALL; once the pilot is up, SMALL is filled
           and units are submitted (500, then 1,000: more than the ids reserved ahead); after
           3 s space comes back
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pilot as rp

BIG = "head -c 400000 /dev/zero | tr '\\0' x; echo its-own-words >&2"


def fill(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"x")
    except OSError:
        pass
    os.close(fd)


def pilot_in(session, sandbox: str):
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(
            resource="local.localhost",
            runtime=3,
            sandbox=sandbox,
            parts=[rp.ComputePartitionDescription(cores=2)],
        )
    )
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    assert pilot.partitions[0].wait(rp.ACTIVE, timeout=30) == rp.ACTIVE
    return pilot, umgr


def sandboxes(small: str, roomy: str) -> dict:
    session = rp.Session(dir=os.path.join(roomy, "session"))
    try:
        pilot, umgr = pilot_in(session, roomy)
        descs = [
            rp.ComputeUnitDescription(
                executable="/bin/sh", arguments=["-c", BIG], sandbox=f"{small}/u{i}"
            )
            for i in range(8)
        ]
        units = umgr.submit_units(descs)
        umgr.wait_units(timeout=60)
        sizes = {}
        for i, u in enumerate(units):
            try:
                sizes[u.uid] = os.path.getsize(f"{small}/u{i}/{u.uid}.out")
            except OSError:
                sizes[u.uid] = None
        session.writer.flush()
        stored = {d["uid"]: d["state"] for d in session.store.find("units")}
        history = session.store.history(session=session.uid)
        log = ""
        for root, _, files in os.walk(pilot.sandbox):
            for name in files:
                if name.endswith(".log"):
                    with open(os.path.join(root, name), errors="replace") as f:
                        log += f.read()
        return {
            "session": session.uid,
            "units": [[u.uid, u.state, u.exit_code, u.reason, u.stderr] for u in units],
            "sizes": sizes,
            "stored": stored,
            "finals": sum(1 for h in history if h["state"] in rp.FINAL and h["kind"] == "units"),
            "logged": [line for line in log.splitlines() if "No space left" in line],
        }
    finally:
        session.close()


def store(small: str, roomy: str) -> dict:
    os.environ["PILOT_SESSIONS_DIR"] = small
    session = rp.Session()
    try:
        pilot, umgr = pilot_in(session, roomy)
        first = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 5)
        umgr.wait_units(timeout=30)
        session.writer.flush()
        filler = os.path.join(small, "filler")
        fill(filler)
        seen = {}

        def look_then_free() -> None:  # while full: what is held back, and named
            time.sleep(3)
            seen["states"] = sorted({u.state for u in umgr.units.values()})
            seen["unpersisted"] = sorted(session.unpersisted)
            os.unlink(filler)

        freer = threading.Thread(target=look_then_free)
        freer.start()
        # 500 fit the block of ids reserved ahead; 1,000 more wait for the store
        later = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 500)
        t0 = time.monotonic()
        later += umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 1000)
        seen["submit_took"] = time.monotonic() - t0
        freer.join(30)
        umgr.wait_units(timeout=120)
        assert session.writer.flush(60)
        stored = {d["uid"]: d["state"] for d in session.store.find("units")}
        return {
            "session": session.uid,
            **seen,
            "states": seen.get("states"),
            "after": sorted({u.state for u in first + later}),
            "n": len(first + later),
            "stored": stored,
            "unpersisted_after": sorted(session.unpersisted),
            "pilot": pilot.state,
        }
    finally:
        session.close()


if __name__ == "__main__":
    scenario, small, roomy = sys.argv[1:4]
    out = {"sandboxes": sandboxes, "store": store}[scenario](small, roomy)
    print(json.dumps(out))
