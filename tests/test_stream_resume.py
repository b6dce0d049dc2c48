"""A named stream survives its client (pmgr/core/stream_marks.py): a client streaming 200,000
zero-launch units is killed (SIGKILL) at five random points; after each, a new client attaches
to the session and resumes the stream from the same generator; in the end every item ran
exactly once: one unit each, DONE, the unit of its item (its description says which of 97),
each started once by its agent (the start journal).
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter

from pilot.pmgr.core import reaper
from pilot.pmgr.core.stream_marks import SEGMENT
from pilot.pmgr.store import open_store
from tests.conftest import ROOT
from tests.scenarios.stream_client import KINDS, NAME

N = 200_000
KILLS = 5


def client(url: str, log, uid: str | None = None, kill_at: int | None = None) -> dict:
    """Run the stream client until it has made `kill_at` units (then SIGKILL), or to its end;
    its last line."""
    argv = [sys.executable, "-m", "tests.scenarios.stream_client", url, str(N)]
    proc = subprocess.Popen(
        argv + ([uid] if uid else []),
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    last: dict = {}
    buf = b""
    deadline = time.monotonic() + 180
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the client did not get on: {last}"
            if not select.select([proc.stdout], [], [], min(left, 1.0))[0]:
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            *lines, buf = (buf + data).split(b"\n")
            if lines:
                last = json.loads(lines[-1])
            if kill_at is not None and last.get("made", 0) >= kill_at:
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        if proc.poll() is None and kill_at is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    if kill_at is None:
        assert proc.returncode == 0, f"the last client exited {proc.returncode}: see its log"
    last["took"] = round(time.monotonic() + 180 - deadline, 1)
    return last


def test_a_named_stream_resumed_after_five_kills_runs_every_item_once(tmp_path):
    seed = int.from_bytes(os.urandom(4), "little")
    points = sorted(random.Random(seed).sample(range(1, N), KILLS))
    url = f"sqlite:///{tmp_path / 'state.db'}"
    uid = None
    t0 = time.monotonic()
    with open(tmp_path / "clients.log", "ab") as log:
        try:
            took = []
            for point in points:
                got = client(url, log, uid, kill_at=point)
                uid = got["session"]
                took.append(got["took"])
            last = client(url, log, uid)
            took.append(last["took"])
        finally:
            if uid is not None:
                left = reaper.session_processes(uid)
                reaper.kill_session_processes(uid)
    why = f"seed {seed}, killed at {points}, clients' s {took}, see {tmp_path / 'clients.log'}"
    assert not left, f"processes left behind: {left} ({why})"
    assert last["counts"] == {"DONE": N}, (last, why)
    store = open_store(url)
    try:
        marks = store.marks(f"{uid}/stream/{NAME}/")
        item_of = {}  # uid -> the item it is, by the marks
        for key, value in marks.items():
            k = int(key.rsplit("/", 1)[1])
            prefix, first = value.split(":")
            for j in range(SEGMENT):
                if k * SEGMENT + j < N:
                    item_of[f"{prefix}.{int(first) + j:06d}"] = k * SEGMENT + j
        assert sorted(item_of.values()) == list(range(N)), why
        units = store.find("units", session=uid)
        pilot = store.find("pilots", session=uid)[0]
    finally:
        store.close()
    assert len(units) == N, (len(units), why)
    for u in units:
        i = item_of.get(u["uid"])
        assert i is not None, (u["uid"], "is no item's unit", why)
        assert u["state"] == "DONE", (u["uid"], u["state"], u["reason"], why)
        assert u["description"]["arguments"] == [str(i % KINDS)], (u["uid"], i, why)
    started: Counter = Counter()
    for name in os.listdir(pilot["sandbox"]):
        if name.endswith(".started"):
            with open(os.path.join(pilot["sandbox"], name)) as f:
                started.update(line.strip() for line in f if line.strip())
    twice = [u for u, n in started.items() if n > 1]
    assert not twice, (twice[:5], why)
    assert set(started) == set(item_of), why
    print(f"{N} units, {KILLS} kills ({why}): {time.monotonic() - t0:.1f} s")


def test_a_named_stream_given_again_makes_nothing_twice_and_bad_names_are_refused(session):
    """In one client: the same named stream given again (its items all known) makes no unit;
    given more items, it makes only those; a name that is none is refused, naming it."""
    import pilot as rp

    pd = rp.ComputePilotDescription(
        resource="local.zero", parts=[rp.ComputePartitionDescription(cores=8)], runtime=5
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    cud = rp.ComputeUnitDescription(executable="/bin/true")
    first = umgr.submit_units((cud for _ in range(5000)), name="again")
    assert umgr.wait_units(timeout=60) and len(umgr.units) == 5000
    again = umgr.submit_units((cud for _ in range(5000)), lazy=True, name="again")
    assert again.wait(timeout=60) == {rp.DONE: 5000}
    assert list(again.uids()) == [u.uid for u in first] and len(umgr.units) == 5000
    more = umgr.submit_units((cud for _ in range(6000)), lazy=True, name="again")
    assert more.wait(timeout=60) == {rp.DONE: 6000} and len(umgr.units) == 6000
    for bad in ("", "a b", "x" * 65, 7):
        try:
            umgr.submit_units((cud for _ in range(3)), name=bad)
        except ValueError as exc:
            assert f"name={bad!r} must be 1-64 letters" in str(exc), exc
        else:
            raise AssertionError(f"name={bad!r} was taken")
