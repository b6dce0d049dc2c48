"""A client whose store's files fail under it while units run (tests/test_store_files.py): one
scenario, JSON out.

    python -m tests.scenarios.store_files_client KIND STORE_DIR [HOLD]

The session's sqlite store is STORE_DIR/state.db.  A 2-core pilot runs 300 units of
`sleep 0.02`; once a third of them ended the store's files fail, 200 more units are
submitted, and after BROKEN_S s the files work again (but `deleted`, whose new file is made by
the store itself):
    deleted     the store file (and its journal) removed
    immutable   chattr +i on the file and its journal (a file system that takes chattr)
    readonly    STORE_DIR read-only: a read-only bind mount of it on top of it (run in a
                private mount namespace: unshare -m), so that what the store opens (its
                journal, each commit) is refused; unmounted after
                (the open file itself stays writable: the kernel lets no mount that has open
                writers go read-only, short of an error that forces it)
    slow        STORE_DIR is a FUSE mount whose writes wait while the file HOLD exists
                (tests/blocking_fs.py): HOLD is made, and removed after BROKEN_S s
Printed: the units' states at the client, the store's states of those units, what the client
holds unwritten, whether it logged the failure, and what the store had lost (deleted).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter

import pilot as rp
from pilot.pmgr.store import writer

BROKEN_S = 3.0
# the store writer's back-off cap (5 s) lowered: what is tested is that the held records are
# written once the store takes writes again, not how long the writer backs off meanwhile (at
# 5 s its next try came up to 5 s after the BROKEN_S s, and the 200 units waited for it)
writer.RETRY_MAX = 1.0


class Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def files(store: str) -> list[str]:
    return [p for p in (store, store + "-journal") if os.path.exists(p)]


def main() -> int:
    kind, store_dir = sys.argv[1], sys.argv[2]
    hold = sys.argv[3] if len(sys.argv) > 3 else None
    said = Said()
    logging.getLogger().addHandler(said)
    store = os.path.join(store_dir, "state.db")
    session = rp.Session(database_url=f"sqlite:///{store}")
    try:
        pilot = rp.PilotManager(session).submit_pilots(
            rp.ComputePilotDescription(
                resource="local.localhost",
                runtime=5,
                parts=[rp.ComputePartitionDescription(cores=2)],
            )
        )
        assert pilot.partitions[0].wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, pilot.reason
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        desc = rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["0.02"])
        first = umgr.submit_units([desc] * 300)
        deadline = time.monotonic() + 60
        while sum(u.final for u in first) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        if kind == "deleted":
            for path in files(store):
                os.unlink(path)
        elif kind == "immutable":
            subprocess.run(["chattr", "+i", *files(store)], check=True)
        elif kind == "readonly":
            subprocess.run(["mount", "--bind", "-o", "ro", store_dir, store_dir], check=True)
        elif kind == "slow":
            with open(hold, "w") as f:
                f.write("writes wait")
        broken = time.monotonic()
        later = umgr.submit_units([desc] * 200)
        time.sleep(max(0.0, broken + BROKEN_S - time.monotonic()))
        unpersisted_while = len(session.unpersisted)
        if kind == "immutable":
            subprocess.run(["chattr", "-i", *files(store)], check=True)
        elif kind == "readonly":
            subprocess.run(["umount", store_dir], check=True)
        elif kind == "slow":
            os.unlink(hold)
        units = list(first) + list(later)
        umgr.wait_units(timeout=120)
        flushed = session.writer.flush(timeout=60)
        want = [u.uid for u in units]  # (all: a deleted file's units ended before it went,
        # their final state only)
        stored = {d["uid"]: d["state"] for d in session.store.find("units", session=session.uid)}
        out = {
            "session": session.uid,
            "client": dict(Counter(u.state for u in units)),
            "stored": dict(Counter(stored.get(uid) for uid in want)),
            "stored_all": len(stored),
            "unpersisted_while": unpersisted_while,
            "unpersisted": len(session.unpersisted),
            "flushed": flushed,
            "said": said.lines[:5],
            "pilot_stored": (session.store.get("pilots", pilot.uid) or {}).get("state"),
        }
    finally:
        if kind == "immutable" and files(store):  # (never leave a file nobody can remove)
            subprocess.run(["chattr", "-i", *files(store)], capture_output=True)
        session.close()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
