"""Helpers for fault injection: units that write a ground-truth log, and the invariant check.

Every unit runs `/bin/sh -c 'echo $PILOT_UNIT_ID start >> LOG; sleep S; echo $PILOT_UNIT_ID end
>> LOG'`: the log says, whatever the pilot reports, which units started and which finished.
`check_exactly_once` compares it with the client and the store (docs/guarantees.md).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pilot as rp


def truth_unit(log: str, sleep: float = 0.3, **kw) -> rp.ComputeUnitDescription:
    script = (
        f'echo "$PILOT_UNIT_ID start" >> {log}; sleep {sleep}; echo "$PILOT_UNIT_ID end" >> {log}'
    )
    return rp.ComputeUnitDescription(executable="/bin/sh", arguments=["-c", script], **kw)


def read_truth(log: str) -> tuple[Counter, Counter]:
    starts, ends = Counter(), Counter()
    if os.path.exists(log):
        for line in open(log).read().splitlines():
            uid, _, what = line.partition(" ")
            (starts if what == "start" else ends)[uid] += 1
    return starts, ends


def check_exactly_once(session, units, log: str, restartable: bool = False) -> Counter:
    """Every unit is final exactly once, ran at most once, and its final state matches what its
    process did; the store holds the same state and the same history, row for row (a unit
    routed again visits SCHEDULING twice, and has two rows for it)."""
    starts, ends = read_truth(log)
    for u in units:
        assert u.final, f"{u.uid} is {u.state}"
        assert starts[u.uid] <= 1, f"{u.uid} started {starts[u.uid]} times"
        if u.state == rp.DONE:
            assert starts[u.uid] == 1 and ends[u.uid] == 1, f"{u.uid} DONE but the log says not"
        if ends[u.uid] and u.state != rp.DONE:
            # its last line written, it was killed before it exited (a cancel's or a stop's
            # SIGTERM: the exit code says so), or its agent died and the outcome is unknown
            killed = u.state == rp.CANCELED and u.exit_code is not None and u.exit_code < 0
            assert killed or (
                u.reason and ("outcome is unknown" in u.reason or "killed" in u.reason)
            ), f"{u.uid} finished but is {u.state}: {u.reason} (exit code {u.exit_code})"
        if u.state != rp.DONE:
            assert u.reason, f"{u.uid} is {u.state} without a reason"
        finals = [s for s, _ in u.history if s in rp.FINAL]
        assert len(finals) == 1, f"{u.uid} history {u.history}"
    assert session.writer.flush(timeout=30)
    rows = {r["uid"]: r for r in session.store.find("units", session=session.uid)}
    hist: dict[str, list] = {}
    for h in session.store.history(session=session.uid):
        if h["kind"] == "units":
            hist.setdefault(h["uid"], []).append(h["state"])
    for u in units:
        assert rows[u.uid]["state"] == u.state, f"{u.uid}: store {rows[u.uid]['state']}"
        assert hist[u.uid] == [s for s, _ in u.history], f"{u.uid}: store history {hist[u.uid]}"
    return Counter(u.state for u in units)


def agent_pid(pilot, part) -> int:
    deadline = time.monotonic() + 10
    path = os.path.join(pilot.sandbox, f"{part.uid}.agent.log")
    while time.monotonic() < deadline:
        text = open(path).read() if os.path.exists(path) else ""
        if "up, pid " in text:
            return int(text.split("up, pid ", 1)[1].split(",", 1)[0])
        time.sleep(0.05)
    raise AssertionError(f"no pid in {path}")


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def processes_with(*markers: str) -> list[int]:
    """Pids of live processes whose environment holds every one of `markers` (e.g.
    PILOT_SESSION_ID=..., PILOT_PARTITION_ID=...: name the session too, as uids like
    pilot.0000.part.0000 repeat in every session on the machine)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = open(f"/proc/{name}/environ", "rb").read().split(b"\0")
            stat = open(f"/proc/{name}/stat", "rb").read()
        except OSError:
            continue
        if stat.rsplit(b")", 1)[-1].split()[0] != b"Z" and all(m.encode() in env for m in markers):
            found.append(int(name))
    return found
