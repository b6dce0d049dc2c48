"""The views' counts of the embedded store (pmgr/store/sqlite.py's unit_tally) and its index of
open units: what `pilot status` and `pilot top` read must be what a count of the units table
gives, whatever wrote the units (this client, a second one, a version without the tally) and
however a batch ended."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter

import pytest

from pilot.pmgr.store import open_store
from pilot.pmgr.store.base import Batch
from pilot.pmgr.store.sqlite import EXECUTING_NOW, SqliteStore

STATES = ("NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE", "FAILED", "CANCELED")
PARTS = (None, "pilot.0000.part.0000", "pilot.0000.part.0001")


def counted(path: str, session: str = "s1") -> dict:
    """{(partition, state): n} by a scan of the units table: the truth."""
    db = sqlite3.connect(path)
    rows = db.execute(
        "SELECT partition, state, COUNT(*) FROM units WHERE session = ? GROUP BY 1, 2", (session,)
    ).fetchall()
    db.close()
    return {(p, s): n for p, s, n in rows}


def doc(uid: str, state: str, partition=None, session="s1", pilot="pilot.0000") -> dict:
    return {"uid": uid, "session": session, "pilot": pilot, "partition": partition, "state": state}


def write(store, docs) -> None:
    b = Batch()
    for d in docs:
        b.docs["units"][d["uid"]] = d
    store.write_batch(b)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "state.db")


def test_counts_follow_every_change_of_state_and_partition(path):
    """Random batches (a unit may appear once per batch, move between partitions, go back to
    an earlier state, be written again when final): the tally equals the scan after each."""
    rng = random.Random(3)
    store = SqliteStore(f"sqlite:///{path}")
    for _ in range(60):
        uids = rng.sample(range(400), rng.randint(1, 120))
        write(
            store,
            [doc(f"unit.{u:06d}", rng.choice(STATES), rng.choice(PARTS)) for u in uids],
        )
        assert store.unit_counts("s1") == counted(path)
    db = sqlite3.connect(path)
    (n,) = db.execute("SELECT COUNT(*) FROM units").fetchone()
    db.close()
    assert sum(store.unit_counts("s1", by=("state",)).values()) == n
    store.close()


def test_two_clients_writing_the_same_units_keep_one_count(path):
    """A second client (another store object on the file) moves units the first one wrote:
    each write counts from the stored row, not from what its writer wrote last."""
    a = SqliteStore(f"sqlite:///{path}")
    write(a, [doc(f"u{i}", "NEW") for i in range(10)])
    write(a, [doc(f"u{i}", "QUEUED", PARTS[1]) for i in range(10)])
    b = SqliteStore(f"sqlite:///{path}")
    write(b, [doc(f"u{i}", "EXECUTING", PARTS[2]) for i in range(5)])
    assert a.unit_counts("s1") == counted(path)
    assert b.unit_counts("s1") == counted(path)
    write(b, [doc(f"u{i}", "DONE", PARTS[2]) for i in range(5)])
    write(a, [doc(f"u{i}", "DONE", PARTS[1]) for i in range(5, 10)])
    assert a.unit_counts("s1") == counted(path) == {(PARTS[2], "DONE"): 5, (PARTS[1], "DONE"): 5}
    a.close()
    b.close()


def test_a_unit_moved_by_another_client_in_between(path):
    a = SqliteStore(f"sqlite:///{path}")
    write(a, [doc("u1", "QUEUED", PARTS[1])])
    b = SqliteStore(f"sqlite:///{path}")
    write(b, [doc("u1", "EXECUTING", PARTS[2])])
    write(a, [doc("u1", "DONE", PARTS[1])])
    assert a.unit_counts("s1") == counted(path) == {(PARTS[1], "DONE"): 1}
    a.close()
    b.close()


def test_a_failed_batch_changes_no_count(path, monkeypatch):
    store = SqliteStore(f"sqlite:///{path}")
    write(store, [doc(f"u{i}", "QUEUED", PARTS[1]) for i in range(4)])
    import pilot.pmgr.store.sqlite as sq

    real = sq.execute_rows

    def fail_on_history(db, sql, rows):
        if sql.startswith(sq.sql.HISTORY_INSERT):
            raise sqlite3.OperationalError("disk I/O error")
        return real(db, sql, rows)

    monkeypatch.setattr(sq, "execute_rows", fail_on_history)
    b = Batch()
    for i in range(4):
        b.docs["units"][f"u{i}"] = doc(f"u{i}", "DONE", PARTS[1])
    b.history.append(("s1", "units", "u0", "DONE", 1.0, None, 4))
    with pytest.raises(sqlite3.OperationalError):
        store.write_batch(b)
    assert store.unit_counts("s1") == counted(path) == {(PARTS[1], "QUEUED"): 4}
    monkeypatch.setattr(sq, "execute_rows", real)
    store.write_batch(b)
    assert store.unit_counts("s1") == counted(path) == {(PARTS[1], "DONE"): 4}
    store.close()


def test_a_store_made_without_the_tally_gets_it_filled_once(path):
    store = SqliteStore(f"sqlite:///{path}")
    write(store, [doc(f"u{i}", STATES[i % 7], PARTS[i % 3]) for i in range(50)])
    store.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE unit_tally")  # (as a store written by an earlier version)
    db.commit()
    db.close()
    again = open_store(f"sqlite:///{path}")
    assert again.unit_counts("s1") == counted(path)
    assert sum(again.unit_counts("s1", by=("state",)).values()) == 50
    write(again, [doc("u0", "DONE", PARTS[0])])
    assert again.unit_counts("s1") == counted(path)
    again.close()


def test_counts_by_pilot_and_session_and_the_other_fields(path):
    store = SqliteStore(f"sqlite:///{path}")
    write(
        store,
        [doc(f"a{i}", "DONE", PARTS[1]) for i in range(3)]
        + [doc(f"b{i}", "FAILED", PARTS[1], pilot="pilot.0001") for i in range(2)]
        + [doc(f"c{i}", "NEW", session="s2", pilot=None) for i in range(4)],
    )
    assert store.unit_counts("s1", pilot="pilot.0001", by=("state",)) == {("FAILED",): 2}
    assert store.unit_counts("s1", by=("pilot",)) == {("pilot.0000",): 3, ("pilot.0001",): 2}
    assert store.unit_counts("s2", by=("pilot", "partition")) == {(None, None): 4}
    assert store.unit_counts("s1", by=("node",)) == {(None,): 5}  # (not the tally's: a scan)
    store.close()


def test_executing_units_are_read_through_the_partial_index(path):
    from pilot.pmgr.observe.top_store import SqliteReader

    store = SqliteStore(f"sqlite:///{path}")
    write(store, [doc(f"u{i:03d}", STATES[i % 7], PARTS[1 + i % 2]) for i in range(70)])
    got = Counter(d["state"] for d in store.open_units("s1"))
    assert got == {s: 10 for s in STATES[:4]}
    reader = SqliteReader(path)
    running = reader.executing("s1", "pilot.0000")
    assert sorted(d["partition"] for d in running) == [PARTS[1]] * 5 + [PARTS[2]] * 5
    assert reader.unit_counts("s1", "pilot.0000") == counted(path)
    plan = reader.db.execute(
        "EXPLAIN QUERY PLAN SELECT slots FROM units "
        f"WHERE {EXECUTING_NOW} AND session = ? AND state = ? AND pilot = ?",
        ("s1", "EXECUTING", "pilot.0000"),
    ).fetchall()
    assert "units_executing" in str(plan), plan
    reader.close()
    store.close()
