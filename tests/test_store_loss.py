"""Losing the database mid-run: units already sent keep running, new ones wait until the store
has them (a unit is persisted before it leaves the client), writes are kept and caught up."""

from __future__ import annotations

import time
from collections import Counter

import pilot as rp
from tests.conftest import active_pilot
from tests.mongo_server import MongoServer


def test_database_lost_and_back_mid_run(make_session, tmp_path, mongo_server):
    if mongo_server[0] == "external":
        import pytest

        pytest.skip("MONGODB_URI: cannot stop an external server; covered with SecantusDB")
    storage = tmp_path / "db"
    storage.mkdir()
    server = MongoServer(str(storage))
    server.start()
    try:
        session = make_session(database_url=server.database_url())
        pilot, umgr = active_pilot(session, parts=((2,),))
        first = umgr.submit_units(
            [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(50)]
        )
        umgr.wait_units(timeout=60)
        assert session.writer.flush(timeout=60)
        sleeper = umgr.submit_units(
            rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["2"])
        )
        assert sleeper.wait(rp.EXECUTING, timeout=30) == rp.EXECUTING
        server.stop()  # the database goes away
        during = umgr.submit_units(
            [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(100)]
        )
        assert sleeper.wait(timeout=30) == rp.DONE  # what was sent runs on
        time.sleep(1)
        assert Counter(u.state for u in during) == {rp.SCHEDULING: 100}  # not sent unpersisted
        assert not session.writer.flush(timeout=2)  # nothing can be written now
        server.start()  # back, same port and data
        assert umgr.wait_units([u.uid for u in during], timeout=60)
        assert Counter(u.state for u in during) == {rp.DONE: 100}
        assert session.writer.flush(timeout=60), "the writer did not catch up"
        assert not session.writer.unpersisted
        rows = session.store.find("units", session=session.uid)
        assert len(rows) == 151 and {r["state"] for r in rows} == {"DONE"}
        hist = session.store.history(session=session.uid)
        per_unit = Counter(h["uid"] for h in hist if h["kind"] == "units")
        assert set(per_unit.values()) == {5} and len(per_unit) == 151
        assert first[0].uid in per_unit
        session.close()  # (while its database is up: else its last records wait for it)
    finally:
        server.stop()


def test_records_lost_for_good_are_named(tmp_path):
    """With the database down at the end, close() says which objects were not persisted."""
    from pilot.pmgr.store.base import StateStore
    from pilot.pmgr.store.writer import BatchWriter

    class Down(StateStore):
        url = "down://"

        def write_batch(self, batch):
            raise ConnectionError("database is down")

        get = find = history = write_batch

    class Obj:
        KIND = "units"
        stored = False

        def __init__(self, uid):
            self.uid = uid

        def as_doc(self, full=True):
            return {"uid": self.uid}

    w = BatchWriter(Down(), max_buffer=3)
    for i in range(5):
        w.changed(Obj(f"u{i}"))
    time.sleep(0.3)
    lost = w.close(timeout=1)
    assert lost == {f"u{i}" for i in range(5)}
    assert w.dropped >= 2  # past max_buffer the oldest are dropped, and named


def test_a_bad_record_does_not_take_its_batch_down(tmp_path):
    from pilot.pmgr.store import open_store
    from pilot.pmgr.store.writer import BatchWriter

    class Obj:
        KIND = "units"
        stored = False

        def __init__(self, uid, state):
            self.uid, self.state = uid, state

        def as_doc(self, full=True):
            return {"uid": self.uid, "session": "s", "state": self.state}

    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    w = BatchWriter(store)
    for i in range(5):
        w.changed(Obj(f"u{i}", {"not": "bindable"} if i == 2 else "DONE"))
    assert w.flush(timeout=10)
    assert [d["uid"] for d in store.find("units")] == ["u0", "u1", "u3", "u4"]
    assert w.unpersisted == {"u2"}
    w.close()


def test_sqlite_file_deleted_mid_run_is_noticed_and_made_anew(session, caplog):
    """The store file vanishes under a running session: the next write says so, the store makes
    a new file, the client writes what it holds into it again (the units it let go of as their
    final state only), and units go on being persisted before they are sent."""
    import logging
    import os

    pilot, umgr = active_pilot(session, parts=((1,),))
    before = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 5)
    assert umgr.wait_units([u.uid for u in before], timeout=30) == [rp.DONE] * 5
    assert session.writer.flush(timeout=30)
    os.unlink(session.store.path)
    with caplog.at_level(logging.ERROR, logger="pmgr.store"):
        after = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 5)
        assert umgr.wait_units([u.uid for u in after], timeout=30) == [rp.DONE] * 5
    assert session.writer.flush(timeout=30)
    assert any("was deleted or replaced" in r.getMessage() for r in caplog.records)
    assert os.path.exists(session.store.path)
    stored = {d["uid"]: d for d in session.store.find("units", session=session.uid)}
    assert {u.uid for u in before + after} <= stored.keys()
    assert {stored[u.uid]["state"] for u in before + after} == {rp.DONE}
    assert "its final state only" in stored[before[0].uid]["reason"]
    assert session.store.get("pilots", pilot.uid)["state"] == rp.ACTIVE
    assert not session.unpersisted
    assert pilot.state == rp.ACTIVE
