"""The store holds the guarantees itself (pmgr/store/base.py: `final once`, `owner epoch`), on
both backends: a second final record of a unit, partition or pilot is refused atomically, with
both records kept, and its history rows with it; a deposed owner's writes are refused whatever
their timing.  Two writers race on one store: two connections of this process on threads,
and two processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from pilot.pmgr.store import open_store
from pilot.pmgr.store.base import Batch, Fenced, UnitMoves
from tests.conftest import ROOT

FINALS = ("DONE", "FAILED", "CANCELED")


def doc(kind: str, uid: str, state: str, reason: str | None = None, **kw) -> dict:
    d = {"uid": uid, "session": "s1", "state": state, "reason": reason, **kw}
    if kind == "units":
        d.setdefault("description", {"executable": "/bin/true"})
    return d


def final_rows(store, uid: str) -> list[str]:
    return [h["state"] for h in store.history(uid=uid) if h["state"] in FINALS]


@pytest.fixture
def stores(database_url):
    """Two stores (two connections) on the same database."""
    a, b = open_store(database_url), open_store(database_url)
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("kind", ["units", "partitions", "pilots"])
def test_a_second_final_record_is_refused_with_both_kept(stores, kind):
    a, b = stores
    batch = Batch()
    batch.docs[kind]["x1"] = doc(kind, "x1", "FAILED", "lost with its node")
    batch.history.append(("s1", kind, "x1", "FAILED", time.time(), "lost with its node", 3))
    assert a.write_batch(batch) == []
    again = Batch()  # (the same record again: a retried batch, no refusal)
    again.docs[kind]["x1"] = doc(kind, "x1", "FAILED", "lost with its node")
    assert a.write_batch(again) == []
    other = Batch()
    other.docs[kind]["x1"] = doc(kind, "x1", "CANCELED", "canceled by the user")
    other.docs[kind]["x2"] = doc(kind, "x2", "DONE")
    other.history.append(("s1", kind, "x1", "CANCELED", time.time(), "canceled by the user", 4))
    other.history.append(("s1", kind, "x2", "DONE", time.time(), None, 1))
    refused = b.write_batch(other)
    assert [(r.uid, r.stored_state, r.refused_state) for r in refused] == [
        ("x1", "FAILED", "CANCELED")
    ]
    assert "lost with its node" in str(refused[0]) and "canceled by the user" in str(refused[0])
    assert a.get(kind, "x1")["state"] == "FAILED"
    assert a.get(kind, "x1")["reason"] == "lost with its node"
    assert a.get(kind, "x2")["state"] == "DONE"  # (the rest of the batch was written)
    assert final_rows(a, "x1") == ["FAILED"]
    kept = a.refusals("s1")
    assert [(r["uid"], r["stored_state"], r["refused_state"]) for r in kept] == [
        ("x1", "FAILED", "CANCELED")
    ]
    later = Batch()  # a state after a final one is no final record either, and is refused
    later.docs[kind]["x2"] = doc(kind, "x2", "EXECUTING")
    assert [r.uid for r in b.write_batch(later)] == ["x2"]
    assert a.get(kind, "x2")["state"] == "DONE"


def test_a_refused_unit_moves_row_is_dropped_and_the_others_kept(stores):
    a, b = stores
    first = Batch()
    for uid in ("u1", "u2", "u3"):
        first.docs["units"][uid] = doc("units", uid, "QUEUED")
    first.docs["units"]["u2"] = doc("units", "u2", "FAILED", "lost")
    a.write_batch(first)
    moves = Batch()
    for uid in ("u1", "u2", "u3"):
        moves.docs["units"][uid] = doc("units", uid, "DONE", description=None)
    moves.moves.append(UnitMoves("s1", "DONE", ["u1", "u2", "u3"], [time.time()] * 3, 5, key="k1"))
    refused = b.write_batch(moves)
    assert [r.uid for r in refused] == ["u2"]
    assert {u: a.get("units", u)["state"] for u in ("u1", "u2", "u3")} == {
        "u1": "DONE",
        "u2": "FAILED",
        "u3": "DONE",
    }
    assert final_rows(a, "u2") == []  # (its FAILED came as a doc alone here)
    assert final_rows(a, "u1") == final_rows(a, "u3") == ["DONE"]


def test_two_writers_race_to_end_the_same_units_and_each_ends_once(stores):
    """Two connections, each on its own thread, write another final state for the same 300
    units in batches of 20, at the same time: every unit ends with exactly one final record,
    whichever came first; every write the store refused is kept, naming both records."""
    a, b = stores
    uids = [f"u{i:04d}" for i in range(300)]
    setup = Batch()
    for uid in uids:
        setup.docs["units"][uid] = doc("units", uid, "EXECUTING")
    a.write_batch(setup)
    refused: dict[str, list] = {"DONE": [], "CANCELED": []}
    go = threading.Barrier(2)

    def writer(store, state: str, order: list) -> None:
        go.wait()
        for i in range(0, len(order), 20):
            batch = Batch()
            for uid in order[i : i + 20]:
                batch.docs["units"][uid] = doc("units", uid, state, f"by the {state} writer",
                                               description=None)  # fmt: skip
                batch.history.append(("s1", "units", uid, state, time.time(), state, 6))
            refused[state] += store.write_batch(batch)

    threads = [
        threading.Thread(target=writer, args=(a, "DONE", uids)),
        threading.Thread(target=writer, args=(b, "CANCELED", uids[::-1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    lost = {r.uid: r for rs in refused.values() for r in rs}
    assert len(lost) == 300  # every unit: one writer's record kept, the other's refused
    for uid in uids:
        stored = a.get("units", uid)
        assert stored["state"] in ("DONE", "CANCELED")
        assert stored["reason"] == f"by the {stored['state']} writer"
        assert lost[uid].stored_state == stored["state"] != lost[uid].refused_state
        assert final_rows(a, uid) == [stored["state"]]


RACER = r"""
import sys, time
from pilot.pmgr.store import open_store
from pilot.pmgr.store.base import Batch
url, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(url)
order = [f"p{i:04d}" for i in range(n)]
if state == "CANCELED":
    order.reverse()
refused = 0
for i in range(0, n, 10):
    batch = Batch()
    for uid in order[i : i + 10]:
        batch.docs["units"][uid] = {"uid": uid, "session": "s1", "state": state, "reason": state}
        batch.history.append(("s1", "units", uid, state, time.time(), state, 6))
    refused += len(store.write_batch(batch))
store.close()
print(refused)
"""


def test_two_processes_race_to_end_the_same_units_and_each_ends_once(stores, database_url):
    a, _ = stores
    n = 200
    setup = Batch()
    for i in range(n):
        setup.docs["units"][f"p{i:04d}"] = doc("units", f"p{i:04d}", "EXECUTING")
    a.write_batch(setup)
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, database_url, state, str(n)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for state in ("DONE", "CANCELED")
    ]
    try:
        refused = sum(int(p.communicate(timeout=120)[0]) for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs)
    assert refused == n
    for i in range(n):
        uid = f"p{i:04d}"
        stored = a.get("units", uid)["state"]
        assert final_rows(a, uid) == [stored]
    assert len(a.refusals("s1")) == n


def test_a_deposed_owners_writes_are_refused_after_the_take_over(stores):
    old, new = stores
    e1 = old.next_epoch("s1")
    old.install_epoch("s1", e1, {"host": "h", "pid": 1, "since": 1.0})
    batch = Batch()
    batch.docs["units"]["u1"] = doc("units", "u1", "EXECUTING")
    old.write_batch(batch)
    old.put_mark("s1/stream/a", "1")
    e2 = new.next_epoch("s1")
    assert e2 > e1
    new.install_epoch("s1", e2, {"host": "h", "pid": 2, "since": 2.0})
    assert new.owner_of("s1") == {"epoch": e2, "host": "h", "pid": 2, "since": 2.0}
    late = Batch()
    late.docs["units"]["u1"] = doc("units", "u1", "FAILED", "lost", description=None)
    late.history.append(("s1", "units", "u1", "FAILED", time.time(), "lost", 4))
    with pytest.raises(Fenced, match=r"this client \(owner epoch \d+\) was deposed"):
        old.write_batch(late)
    with pytest.raises(Fenced):
        old.put_mark("s1/stream/a", "2")
    assert new.get("units", "u1")["state"] == "EXECUTING"
    assert final_rows(new, "u1") == []
    assert new.marks("s1/stream/")["s1/stream/a"] == "1"
    with pytest.raises(Fenced):  # an older epoch cannot be installed over a newer one
        old.install_epoch("s1", e1, {"host": "h", "pid": 1, "since": 1.0})
    ok = Batch()
    ok.docs["units"]["u1"] = doc("units", "u1", "DONE", description=None)
    assert new.write_batch(ok) == []
    assert new.get("units", "u1")["state"] == "DONE"


def test_no_write_of_a_deposed_owner_lands_after_the_take_over_whatever_its_timing(stores):
    """The old owner writes batch after batch on a thread while the new one installs
    its epoch at a random moment: every batch the old owner's store took committed before
    the install returned (what the new owner reads then stays as it is), every later one is
    Fenced, nothing in between."""
    old, new = stores
    old.install_epoch("s1", old.next_epoch("s1"), {"host": "h", "pid": 1, "since": 1.0})
    written: list[int] = []
    fenced: list[int] = []
    stop = threading.Event()

    def keep_writing() -> None:
        i = 0
        while not stop.is_set() and len(fenced) < 20:
            batch = Batch()
            batch.docs["units"][f"w{i:05d}"] = doc("units", f"w{i:05d}", "NEW")
            try:
                old.write_batch(batch)
                written.append(i)
            except Fenced:
                fenced.append(i)
            i += 1
            time.sleep(0.001)  # (as a writer between flushes: a loop that never lets go of
            # sqlite's lock starves the new owner's BEGIN IMMEDIATE past its busy timeout)

    t = threading.Thread(target=keep_writing)
    t.start()
    time.sleep(0.3)
    new.install_epoch("s1", new.next_epoch("s1"), {"host": "h", "pid": 2, "since": 2.0})
    seen = {d["uid"] for d in new.find("units", session="s1")}
    stop_at = time.monotonic() + 30
    while len(fenced) < 20 and time.monotonic() < stop_at:
        time.sleep(0.05)
    stop.set()
    t.join(timeout=60)
    assert len(fenced) >= 20 and written, (len(written), len(fenced))
    assert max(written) < min(fenced)  # (nothing taken after the first refusal)
    assert {d["uid"] for d in new.find("units", session="s1")} == seen  # nothing landed since
    assert seen == {f"w{i:05d}" for i in written}


def test_a_deposed_client_lets_its_pilots_go_and_makes_nothing_more(session):
    """A newer owner installs its epoch in the store under a running client (as a take-over
    this client never heard of does): the client's next write is refused (Fenced), it says so
    once, lets its pilots go, and refuses new pilots and units (PilotOwned), so nothing it
    makes afterwards is left unrecorded (a batch job nobody owns: found by the fault
    campaign, seed 21 of --resource mix)."""
    import pilot as rp
    from tests.conftest import active_pilot

    pilot, umgr = active_pilot(session, parts=((1,),))
    other = open_store(session.url)
    try:
        other.install_epoch(session.uid, other.next_epoch(session.uid), {"host": "h", "pid": 1})
    finally:
        other.close()
    late = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    assert late.wait(timeout=30) == rp.FAILED and "was deposed" in late.reason, late.reason
    assert session.deposed is not None and pilot.released
    with pytest.raises(rp.PilotOwned, match="no longer owns the session"):
        umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    with pytest.raises(rp.PilotOwned, match="no longer owns the session"):
        rp.PilotManager(session).submit_pilots(
            rp.ComputePilotDescription(resource="local.localhost", cores=1, runtime=1)
        )
    session.close()  # (its pilot is left to its new owner: none here, so it is ended below)
    assert pilot.job.poll() is None, "the deposed client ended the new owner's pilot job"
    from pilot.pmgr.core import reaper

    reaper.kill_session_processes(session.uid)
