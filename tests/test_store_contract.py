"""One contract for every StateStore backend: sqlite (embedded) and MongoDB."""

from __future__ import annotations

import os
import time

import pytest

from pilot.pmgr.store import open_store
from pilot.pmgr.store.base import HISTORY, Batch, Own, Template, UnitMoves, UnitsPlaced


@pytest.fixture
def store(database_url):
    s = open_store(database_url)
    yield s
    s.close()


def unit_doc(uid, state="NEW", description=True, **kw):
    doc = {
        "uid": uid,
        "session": "s1",
        "pilot": "pilot.0000",
        "partition": None,
        "state": state,
        "reason": None,
        "exit_code": None,
        "node": None,
        "slots": None,
        "description": {"executable": "/bin/true", "arguments": ["a"]} if description else None,
    }
    doc.update(kw)
    return doc


def test_upsert_keeps_the_description_and_replaces_the_rest(store):
    b = Batch()
    b.docs["units"]["u1"] = unit_doc("u1")
    store.write_batch(b)
    b = Batch()
    b.docs["units"]["u1"] = unit_doc(
        "u1", "DONE", description=False, exit_code=0, partition="p0", slots={"cpus": [3]}
    )
    store.write_batch(b)
    doc = store.get("units", "u1")
    assert doc["state"] == "DONE" and doc["exit_code"] == 0 and doc["partition"] == "p0"
    assert doc["description"] == {"executable": "/bin/true", "arguments": ["a"]}
    assert doc["slots"] == {"cpus": [3]}
    assert store.get("units", "nope") is None


def test_find_filters_and_orders_by_uid(store):
    b = Batch()
    for i, state in enumerate(["DONE", "FAILED", "DONE"]):
        b.docs["units"][f"u{i}"] = unit_doc(f"u{i}", state)
    b.docs["units"]["other"] = unit_doc("other", "DONE", session="s2")
    b.docs["pilots"]["pilot.0000"] = {
        "uid": "pilot.0000",
        "session": "s1",
        "state": "ACTIVE",
        "size": {"cores": 2},
        "description": {"resource": "x"},
    }
    store.write_batch(b)
    assert [d["uid"] for d in store.find("units", session="s1", state="DONE")] == ["u0", "u2"]
    assert len(store.find("units")) == 4
    assert store.find("pilots", session="s1")[0]["size"] == {"cores": 2}
    with pytest.raises(ValueError, match=r"cannot filter on \['colour'\]"):
        store.find("units", colour="red")
    with pytest.raises(ValueError, match=r"kind='widgets' must be one of"):
        store.get("widgets", "x")


def test_history_keeps_every_change_in_order(store):
    t = time.time()
    rows = [
        ("s1", "units", "u1", s, t + i, None, i)
        for i, s in enumerate(["NEW", "SCHEDULING", "QUEUED", "EXECUTING"])
    ]
    rows.append(("s1", "units", "u1", "FAILED", t + 9, "exit code 3", 4))
    rows.append(("s1", "units", "u2", "NEW", t, None, 0))
    for i in range(0, len(rows), 2):  # several batches
        b = Batch()
        b.history.extend(rows[i : i + 2])
        store.write_batch(b)
    h = store.history(uid="u1")
    assert [r["state"] for r in h] == ["NEW", "SCHEDULING", "QUEUED", "EXECUTING", "FAILED"]
    assert h[-1]["reason"] == "exit code 3" and h[0]["ts"] == pytest.approx(t)
    assert len(store.history(session="s1")) == 6
    assert store.history(session="s2") == []


def test_a_batch_written_twice_is_stored_once(store):
    """A retry after a write that partly happened (the server died mid-write) adds nothing."""
    t = time.time()
    b = Batch()
    b.docs["units"]["u1"] = unit_doc("u1", "DONE")
    b.history.extend(
        ("s1", "units", "u1", s, t + i, None, i) for i, s in enumerate(["NEW", "DONE"])
    )
    store.write_batch(b)
    store.write_batch(b)
    assert [r["state"] for r in store.history(uid="u1")] == ["NEW", "DONE"]
    assert [r["seq"] for r in store.history(session="s1")] == [0, 1]
    assert len(store.find("units", session="s1")) == 1


def test_a_big_batch(store):
    b = Batch()
    for i in range(2000):
        b.docs["units"][f"u{i:05d}"] = unit_doc(f"u{i:05d}", "DONE")
        b.history.append(("s1", "units", f"u{i:05d}", "DONE", time.time(), None, 1))
    store.write_batch(b)
    assert len(store.find("units", session="s1", state="DONE")) == 2000
    assert len(store.history(session="s1")) == 2000


def test_a_final_doc_is_pending_until_its_final_row_is_in(store):
    """A unit's final doc may be written a batch before its final row (its doc is made as
    the unit is when the batch is built): MongoDB, which writes a batch's docs and its rows
    apart, names it in rows_pending until the row is in (an attach then writes what the doc
    has and the rows lack, pmgr/core/recovery.py); sqlite writes a batch whole, none."""
    mongo = store.url.startswith("mongodb")
    b = Batch()
    b.docs["units"]["u1"] = unit_doc("u1", "DONE")
    b.docs["units"]["u2"] = unit_doc("u2", "EXECUTING")
    store.write_batch(b)
    assert [d["uid"] for d in store.rows_pending("s1")] == (["u1"] if mongo else [])
    b = Batch()
    b.history.append(("s1", "units", "u1", "EXECUTING", time.time(), None, 3))
    store.write_batch(b)  # (not its final row yet)
    assert [d["uid"] for d in store.rows_pending("s1")] == (["u1"] if mongo else [])
    b = Batch()
    b.history.append(("s1", "units", "u1", "DONE", time.time(), None, 4))
    store.write_batch(b)
    assert store.rows_pending("s1") == []


def test_unreachable_database_fails_fast_with_the_reason():
    from tests.mongo_server import free_port

    url = f"mongodb://127.0.0.1:{free_port()}/pilot"
    t0 = time.monotonic()
    with pytest.raises(
        ValueError,
        match=r"database_url='mongodb://127.0.0.1:\d+/pilot': no "
        r"MongoDB answered within 3 s",
    ):
        open_store(url)
    assert time.monotonic() - t0 < 10


def test_bad_urls_name_what_is_accepted():
    with pytest.raises(ValueError, match=r"must start with sqlite:/// or mongodb://"):
        open_store("postgres://x")


@pytest.mark.parametrize("n", [1, 3, 17, 85, 341])
def test_batches_of_every_size_keep_each_row_and_its_values(store, n):
    """Rows go several to a statement (sqlite): every row of a batch of any size is stored,
    with its own values, and a second write of the batch (a retry) changes nothing."""
    t = time.time()
    b = Batch()
    for i in range(n):
        uid = f"u{i:04d}"
        b.docs["units"][uid] = unit_doc(uid, "DONE", exit_code=i, slots={"cpus": [i % 4]})
        b.history.extend(
            ("s1", "units", uid, s, t + i, None, q) for q, s in ((0, "NEW"), (1, "DONE"))
        )
    store.write_batch(b)
    store.write_batch(b)
    docs = store.find("units", session="s1")
    assert [(d["uid"], d["exit_code"], d["slots"]) for d in docs] == [
        (f"u{i:04d}", i, {"cpus": [i % 4]}) for i in range(n)
    ]
    hist = store.history(session="s1")
    assert sorted((h["uid"], h["seq"], h["state"]) for h in hist) == sorted(
        (f"u{i:04d}", q, s) for i in range(n) for q, s in ((0, "NEW"), (1, "DONE"))
    )


def _as_moves(rows: list[tuple], key: str) -> list[UnitMoves]:
    """Units' history rows of one batch as the writer sends them: in columns, a record per
    state (each unit's rows keep their order: a unit moves through the states in order)."""
    by_state: dict = {}
    for session, _, uid, state, ts, reason, seq in rows:
        by_state.setdefault((session, state), []).append((uid, ts, reason, seq))
    out = []
    for (session, state), got in by_state.items():
        uids, ts, reasons, seqs = (list(c) for c in zip(*got))
        out.append(
            UnitMoves(
                session,
                state,
                uids,
                ts,
                seqs if len(set(seqs)) > 1 else seqs[0],
                reasons if any(reasons) else None,
                key=f"{key}.{state}",
            )
        )
    return out


def _views_session(store, n=23, columns=False):
    """A pilot, two partitions and `n` units of session s1 (unit 3 and 7 FAILED, one unit of
    s2), each change a history row (or, `columns`, the units' rows in columns as the client's
    writer sends them), written a few units a batch."""
    t = time.time()
    b = Batch()
    b.docs["pilots"]["pilot.0000"] = {"uid": "pilot.0000", "session": "s1", "state": "ACTIVE"}
    b.history += [("s1", "pilots", "pilot.0000", s, t + i, None, i)
                  for i, s in enumerate(["NEW", "PENDING", "ACTIVE"])]  # fmt: skip
    for p in ("p0", "p1"):
        b.docs["partitions"][p] = {"uid": p, "session": "s1", "pilot": "pilot.0000"}
        b.history.append(("s1", "partitions", p, "ACTIVE", t + 2.5, None, 0))
    store.write_batch(b)
    for first in range(0, n, 5):
        b = Batch()
        for k in range(first, min(n, first + 5)):
            uid = f"unit.{k:06d}"
            final = "FAILED" if k in (3, 7) else "DONE" if k < n - 2 else "EXECUTING"
            b.docs["units"][uid] = unit_doc(uid, final, partition=f"p{k % 2}", exit_code=0)
            path = ["NEW", "SCHEDULING", "QUEUED", "EXECUTING"]
            path += [final] if final != "EXECUTING" else []
            b.history += [("s1", "units", uid, s, t + 3 + k + i / 10, f"r{k}" if s == "FAILED"
                           else None, i) for i, s in enumerate(path)]  # fmt: skip
        if columns:
            b.moves, b.history = _as_moves(b.history, f"batch{first}"), []
        store.write_batch(b)
    b = Batch()
    b.docs["units"]["other"] = unit_doc("other", "FAILED", session="s2")
    b.history.append(("s2", "units", "other", "FAILED", t + 99, None, 0))
    store.write_batch(b)
    return t


@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
@pytest.mark.parametrize("page", [7, 10_000])
def test_iter_history_streams_the_session_oldest_first_in_pages(store, monkeypatch, page, columns):
    """Oldest first: rows in the order written (MongoDB: by ts), each unit's in its order,
    whether they were written a row a change or in columns."""
    import pilot.pmgr.store.mongo as mongo_mod
    import pilot.pmgr.store.sqlite as sqlite_mod

    monkeypatch.setattr(sqlite_mod, "PAGE", page)
    monkeypatch.setattr(mongo_mod, "PAGE", page)
    t = _views_session(store, columns=columns)
    rows = list(store.iter_history("s1"))
    whole = [tuple(r[k] for k in HISTORY) for r in store.history(session="s1")]
    assert sorted(rows, key=repr) == sorted(whole, key=repr)
    assert len(rows) == 3 + 2 + 21 * 5 + 2 * 4
    if not columns:
        assert rows == whole
        assert [r[4] for r in rows] == sorted(r[4] for r in rows)  # oldest first
    units = list(store.iter_history("s1", kinds=("units",)))
    assert len(units) == 21 * 5 + 2 * 4 and {r[1] for r in units} == {"units"}
    for uid in {r[2] for r in units}:  # each unit's rows in its order
        mine = [r for r in units if r[2] == uid]
        assert [r[6] for r in mine] == list(range(len(mine)))
        assert [r[4] for r in mine] == sorted(r[4] for r in mine)
    first = [r for r in units if r[2] == "unit.000000"]
    assert first[:2] == [
        ("s1", "units", "unit.000000", "NEW", pytest.approx(t + 3), None, 0),
        ("s1", "units", "unit.000000", "SCHEDULING", pytest.approx(t + 3.1), None, 1),
    ]
    assert [r["state"] for r in store.history(uid="unit.000007")] == [
        "NEW",
        "SCHEDULING",
        "QUEUED",
        "EXECUTING",
        "FAILED",
    ]
    assert store.history(uid="unit.000007")[-1]["reason"] == "r7"
    assert list(store.iter_history("s1", kinds=("pilots",)))[-1][3] == "ACTIVE"
    assert list(store.iter_history("nobody")) == []
    lo, hi = store.history_span("s1")
    assert lo == pytest.approx(t) and hi == pytest.approx(t + 3 + 22 + 0.3)
    assert store.history_span("nobody") == (None, None)


def test_unit_counts_are_aggregates_by_the_fields_asked(store):
    _views_session(store)
    assert store.unit_counts("s1") == {
        ("p0", "DONE"): 11,
        ("p1", "DONE"): 8,
        ("p1", "FAILED"): 2,
        ("p0", "EXECUTING"): 1,
        ("p1", "EXECUTING"): 1,
    }
    assert store.unit_counts("s1", by=("state",)) == {
        ("DONE",): 19,
        ("FAILED",): 2,
        ("EXECUTING",): 2,
    }
    assert store.unit_counts("s1", pilot="pilot.0000", by=("state",))[("FAILED",)] == 2
    assert store.unit_counts("s1", pilot="pilot.0001") == {}
    assert store.unit_counts("s2", by=("state",)) == {("FAILED",): 1}
    with pytest.raises(ValueError, match=r"cannot filter on \['colour'\]"):
        store.unit_counts("s1", by=("colour",))


@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
def test_last_events_are_the_newest_pilot_partition_and_failed_rows(store, columns):
    t = _views_session(store, columns=columns)
    rows = store.last_events("s1", 200)
    got = [(r["kind"], r["uid"], r["state"]) for r in rows]
    assert got == [
        ("pilots", "pilot.0000", "NEW"),
        ("pilots", "pilot.0000", "PENDING"),
        ("pilots", "pilot.0000", "ACTIVE"),
        ("partitions", "p0", "ACTIVE"),
        ("partitions", "p1", "ACTIVE"),
        ("units", "unit.000003", "FAILED"),
        ("units", "unit.000007", "FAILED"),
    ]
    assert rows[-1]["reason"] == "r7" and rows[-1]["ts"] == pytest.approx(t + 3 + 7 + 0.4)
    assert set(rows[0]) == set(HISTORY)
    assert [r["uid"] for r in store.last_events("s1", 2)] == ["unit.000003", "unit.000007"]
    assert store.last_events("s1", 0) == []
    assert [r["uid"] for r in store.last_events("s2", 5)] == ["other"]


def test_get_many_fetches_the_stored_ones_by_uid(store):
    _views_session(store, n=1203)
    uids = [f"unit.{k:06d}" for k in range(0, 1203, 2)] + ["nope"]
    docs = store.get_many("units", uids, ("partition", "state", "slots"))
    assert sorted(docs) == uids[:-1]
    assert docs["unit.000002"] == {
        "uid": "unit.000002",
        "partition": "p0",
        "state": "DONE",
        "slots": None,
    }
    whole = store.get_many("units", ["unit.000007"])
    assert whole == {"unit.000007": store.get("units", "unit.000007")}
    assert whole["unit.000007"]["description"] == {"executable": "/bin/true", "arguments": ["a"]}
    assert store.get_many("units", []) == {}
    with pytest.raises(ValueError, match=r"cannot filter on \['colour'\]"):
        store.get_many("units", uids, ("colour",))


def test_units_that_share_a_description_store_it_once(store):
    """The writer hands the store a Template for units made from one description: a read
    gives each unit the description back as a dict, and it is kept across later upserts."""
    shared = Template({"executable": "/bin/true", "policy": {"placement": None}})
    b = Batch()
    for i in range(50):
        b.docs["units"][f"u{i:02d}"] = unit_doc(f"u{i:02d}", description=False)
        b.docs["units"][f"u{i:02d}"]["description"] = shared
    b.docs["units"]["odd"] = unit_doc("odd")  # a plain dict: its own
    store.write_batch(b)
    b = Batch()
    b.docs["units"]["u07"] = unit_doc("u07", "DONE", description=False, times=[["NEW", 1.0]])
    store.write_batch(b)
    doc = store.get("units", "u07")
    assert doc["description"] == shared.value and doc["state"] == "DONE"
    assert doc["times"] == [["NEW", 1.0]]
    assert store.get("units", "odd")["description"] == {"executable": "/bin/true",
                                                        "arguments": ["a"]}  # fmt: skip
    docs = store.get_many("units", ["u00", "u49", "odd"])
    assert [docs[u]["description"] for u in ("u00", "u49")] == [shared.value] * 2
    assert [d["description"] for d in store.find("units", session="s1")].count(shared.value) == 50
    assert len(store.open_units("s1")) == 50  # (u07 is DONE)


def test_units_of_one_template_with_arguments_of_their_own_read_back_whole(store):
    """A sweep's units share one template and each keeps its own arguments (its first doc's
    Own, or a UnitsPlaced's `own`): a read lays them over the template; later upserts, a
    retried batch, and units without any of their own keep what they had."""
    shared = Template({"executable": "/bin/echo", "policy": {"placement": None}})
    b = Batch()
    for i in range(3):
        b.docs["units"][f"d{i}"] = unit_doc(f"d{i}", description=False)
        b.docs["units"][f"d{i}"]["description"] = Own(shared, {"arguments": [f"doc {i}"]})
    own = [{"arguments": ["p0", "x y"]}, None, {"arguments": ["p2"]}]
    b.placed.append(UnitsPlaced("s1", "SCHEDULING", "pilot.0000", None, ["p0", "p1", "p2"],
                                shared, own))  # fmt: skip
    store.write_batch(b)
    store.write_batch(b)  # (a retry: the same rows)
    b = Batch()
    b.docs["units"]["d1"] = unit_doc("d1", "DONE", description=False, times=[["NEW", 1.0]])
    b.placed.append(UnitsPlaced("s1", "SCHEDULING", "pilot.0000", "part.0001", ["p2"]))
    store.write_batch(b)
    docs = store.get_many("units", ["d0", "d1", "d2", "p0", "p1", "p2"])
    got = {u: d["description"] for u, d in docs.items()}
    assert got["d1"] == {**shared.value, "arguments": ["doc 1"]}
    assert docs["d1"]["state"] == "DONE" and docs["p2"]["partition"] == "part.0001"
    assert got["p0"] == {**shared.value, "arguments": ["p0", "x y"]}
    assert got["p1"] == shared.value and got["p2"]["arguments"] == ["p2"]
    assert store.get("units", "d2")["description"]["arguments"] == ["doc 2"]
    found = {d["uid"]: d["description"] for d in store.find("units", session="s1")}
    assert found == got
    assert store.get("units", "p1")["description"] == shared.value  # (not another's)
    import sqlite3

    if isinstance(store.db, sqlite3.Connection):
        (count,) = store.db.execute("SELECT COUNT(*) FROM templates").fetchone()
    else:
        count = store.db.templates.count_documents({})
    assert count == 1


def test_moves_written_twice_are_stored_once(store):
    """A record of moves (its key) retried after a failure is not stored again."""
    m = UnitMoves("s1", "DONE", ["u1", "u2"], [1.0, 2.0], 4, ["r1", None], key="w.1")
    b = Batch()
    b.moves.append(m)
    store.write_batch(b)
    store.write_batch(b)
    assert [(r["uid"], r["reason"], r["seq"]) for r in store.history(session="s1")] == [
        ("u1", "r1", 4),
        ("u2", None, 4),
    ]
    assert [r["ts"] for r in store.history(uid="u2")] == [2.0]


def test_a_sweep_of_distinct_descriptions_keeps_each_and_holds_a_bounded_few(store):
    """A description a unit (a sweep of arguments): each is read back as written, found again
    when a later batch names it (one template each), and the store remembers only a bounded
    number of texts (a sweep of 10^7 units holds no 10^7 texts in the client)."""
    from pilot.pmgr.store.base import TextIds

    n = TextIds.MOST + 50
    for lo in range(0, n, 1000):
        b = Batch()
        for i in range(lo, min(n, lo + 1000)):
            b.docs["units"][f"u{i:05d}"] = unit_doc(f"u{i:05d}", description=False)
            b.docs["units"][f"u{i:05d}"]["description"] = Template(
                {"executable": "/bin/echo", "arguments": [str(i)]}
            )
        store.write_batch(b)
    assert len(store.templates.ids) <= TextIds.MOST
    b = Batch()  # the first ones again (forgotten by the client): found, not made twice
    for i in range(3):
        b.docs["units"][f"v{i}"] = unit_doc(f"v{i}", description=False)
        b.docs["units"][f"v{i}"]["description"] = Template(
            {"executable": "/bin/echo", "arguments": [str(i)]}
        )
    store.write_batch(b)
    docs = store.get_many("units", ["u00000", "u04100", "v0", "v2"])
    assert [docs[u]["description"]["arguments"] for u in docs] == [["0"], ["4100"], ["0"], ["2"]]
    import sqlite3

    if isinstance(store.db, sqlite3.Connection):  # sqlite: found by an index lookup
        from pilot.pmgr.store import sqlite_schema as sql

        (count,) = store.db.execute("SELECT COUNT(*) FROM templates").fetchone()
        assert count == n
        plan = " ".join(
            str(r) for r in store.db.execute("EXPLAIN QUERY PLAN " + sql.TEMPLATE_FIND, (0, ""))
        )
        assert "templates_key" in plan, plan
    else:
        assert store.db.templates.count_documents({}) == n


def test_bytes_in_a_description_and_a_value_come_back_whole(store):
    """A call's large arguments (bytes in the description) and a large return value (bytes):
    a file each beside the store when it has a data directory, else in the doc."""
    args, value = os.urandom(300_000), os.urandom(200_000)
    described = {"function": {"name": "m.f", "pickle": "eA==", "args": args}}
    b = Batch()
    b.docs["units"]["u1"] = unit_doc("u1", description=False)
    b.docs["units"]["u1"]["description"] = Template(described)
    b.docs["units"]["u2"] = unit_doc("u2", description=False)
    b.docs["units"]["u2"]["description"] = Template({**described, "cpus": 2})
    store.write_batch(b)
    b = Batch()
    b.docs["units"]["u1"] = unit_doc("u1", "DONE", description=False, return_value=value)
    store.write_batch(b)
    doc = store.get("units", "u1")
    assert doc["description"] == described and doc["return_value"] == value
    docs = store.get_many("units", ["u1", "u2"])
    assert docs["u2"]["description"]["function"]["args"] == args
    assert docs["u1"]["return_value"] == value
    assert [d["uid"] for d in store.find("units", session="s1")] == ["u1", "u2"]


def test_marks_are_kept_replaced_and_found_by_prefix(store, database_url):
    """put_mark / marks (a named stream's segments: pmgr/core/stream_marks.py), seen by another
    connection to the same database."""
    store.put_mark("s1/stream/a/00000000", "unit:0")
    store.put_mark("s1/stream/a/00000001", "unit:4096")
    store.put_mark("s1/stream/ab/00000000", "unit:9")
    store.put_mark("s1/stream/a/00000001", "unit:8192")
    other = open_store(database_url)
    try:
        assert other.marks("s1/stream/a/") == {
            "s1/stream/a/00000000": "unit:0",
            "s1/stream/a/00000001": "unit:8192",
        }
        assert other.marks("s2/") == {}
    finally:
        other.close()


@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
def test_histories_are_each_units_history_read_at_once(store, monkeypatch, columns):
    """histories(uids) (what an attach reads for the units it adopts) says for each uid what
    history(uid=) says, in one pass; a uid with no rows has an empty history."""
    import pilot.pmgr.store.sqlite as sqlite_mod

    monkeypatch.setattr(sqlite_mod, "MOVES_PAGE", 2)  # (several pages)
    _views_session(store, columns=columns)
    uids = ["unit.000000", "unit.000007", "unit.000021", "unit.000022", "nobody"]
    got = store.histories(uids, "s1")
    assert sorted(got) == sorted(uids) and got["nobody"] == []
    for uid in uids[:-1]:
        assert got[uid] == store.history(uid=uid), uid
    assert [r["state"] for r in got["unit.000022"]] == ["NEW", "SCHEDULING", "QUEUED", "EXECUTING"]
