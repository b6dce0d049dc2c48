"""The store writer (pmgr/store/writer.py): a send waits for its own units' records only."""

from __future__ import annotations

import threading
import time

from pilot.pmgr.store.base import StateStore
from pilot.pmgr.store.writer import BatchWriter


class SlowStore(StateStore):
    """Takes 0.05 ms per record written, and remembers which docs it has."""

    url = "slow://"

    def __init__(self) -> None:
        self.docs: set[str] = set()
        self.rows = 0

    def write_batch(self, batch) -> None:
        time.sleep(0.00005 * len(batch))
        self.docs.update(batch.docs["units"])
        self.rows += len(batch.history)

    def get(self, kind, uid):
        return None

    find = history = get


class Obj:
    KIND = "units"
    stored = False

    def __init__(self, uid: str) -> None:
        self.uid = uid

    def as_doc(self, full=True):
        return {"uid": self.uid}


def test_a_send_does_not_wait_behind_a_backlog():
    store = SlowStore()
    w = BatchWriter(store)
    try:
        backlog = [Obj(f"b{i}") for i in range(20000)]  # 40,000 records: 2 s to write
        for o in backlog:
            w.hist(("s", "units", o.uid, "NEW", 0.0, None, 0), o)
        sent = Obj("sent")
        seen = {}
        ran = threading.Event()

        def send():
            seen["had_doc"] = "sent" in store.docs
            seen["rows_then"] = store.rows
            ran.set()

        t0 = time.monotonic()
        w.send_after([sent], send)
        assert ran.wait(10)
        waited = time.monotonic() - t0
        assert seen["had_doc"], "the send ran before its unit's doc was written"
        # (it waits for the batch being written and the one it ends: max_batch records each)
        assert waited < 1.0, f"the send waited {waited:.2f} s behind unrelated records"
        assert seen["rows_then"] < 20000  # (the backlog was not written first)
        assert w.flush(timeout=30)  # flush counts the send and its doc too
        assert store.rows == 20000 and len(store.docs) == 20001
    finally:
        w.close(timeout=5)


def test_a_send_during_an_outage_waits_for_its_docs():
    class Down(SlowStore):
        up = False

        def write_batch(self, batch) -> None:
            if not self.up:
                raise ConnectionError("down")
            super().write_batch(batch)

        def transient(self, exc) -> bool:
            return True

    store = Down()
    w = BatchWriter(store)
    try:
        ran = threading.Event()
        w.changed(Obj("first"))  # the writer is retrying when the send comes
        time.sleep(0.2)
        w.send_after([Obj("sent")], lambda: ran.set() if "sent" in store.docs else None)
        assert not ran.wait(0.8)  # not sent unpersisted
        store.up = True
        assert ran.wait(10), "the send never ran once the database was back"
        assert w.flush(timeout=10)
        assert store.docs == {"first", "sent"}
    finally:
        w.close(timeout=5)


def test_a_flush_does_not_wait_for_the_linger():
    store = SlowStore()
    w = BatchWriter(store, linger=5.0)  # a batch of state changes alone would wait 5 s
    try:
        o = Obj("u1")
        w.hist(("s", "units", o.uid, "NEW", 0.0, None, 0), o)
        time.sleep(0.05)  # (the writer has it and lingers)
        t0 = time.monotonic()
        assert w.flush(timeout=3.0)
        assert time.monotonic() - t0 < 1.0
        assert "u1" in store.docs and store.rows == 1
    finally:
        w.close(timeout=5.0)


def test_an_outage_holds_every_record_waiting_and_loses_none_written_one_by_one():
    """While the store fails, `held` names every record waiting for it, not only the batch
    tried first; and a batch the store refuses for good is written one record at a time, where
    a transient failure midway keeps what is left (before: dropped, never counted as done)."""

    class Picky(SlowStore):
        """Refuses for good a batch of more than one doc; fails once, for now, on `down`."""

        down = True

        def write_batch(self, batch) -> None:
            if len(batch.docs["units"]) > 1:
                raise ValueError("a batch it refuses for good")
            if self.down and "b" in batch.docs["units"]:
                self.down = False
                raise ConnectionError("down, for now")
            super().write_batch(batch)

        def transient(self, exc) -> bool:
            return isinstance(exc, ConnectionError)

    store = Picky()
    w = BatchWriter(store, linger=0.2)
    try:
        for uid in ("a", "b", "c", "d"):
            w.changed(Obj(uid))
        assert w.flush(timeout=10), "a record was never written nor counted"
        assert store.docs == {"a", "b", "c", "d"} and not w.unpersisted
    finally:
        w.close(timeout=5)

    class Down(SlowStore):
        def write_batch(self, batch) -> None:
            raise ConnectionError("down")

        def transient(self, exc) -> bool:
            return True

    w = BatchWriter(Down())
    try:
        w.changed(Obj("first"))
        time.sleep(0.3)  # (its batch failed: the writer holds it to try again)
        for uid in ("second", "third"):
            w.changed(Obj(uid))
        deadline = time.monotonic() + 10
        while w.held != {"first", "second", "third"} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert w.held == {"first", "second", "third"}
    finally:
        w.close(timeout=2)


def test_sends_one_after_another_do_not_put_off_the_states_gathered_meanwhile():
    """Calls one at a time (rp.Executor's round trips): a send every few ms, and between
    them the states of the call before.  Each urgent send's docs go first, alone; what was
    gathered must still be written within about a linger, not put off by every next send until
    max_batch records (the final states of hundreds of calls, their units held in memory)."""
    store = SlowStore()
    w = BatchWriter(store)
    try:
        sent = threading.Event()
        lag = []
        for i in range(150):  # (at least 0.45 s: the sleeps)
            o = Obj(f"u{i}")
            sent.clear()
            w.send_after([o], sent.set)
            assert sent.wait(5)
            w.hist(("s", "units", o.uid, "DONE", 0.0, None, 0), o)
            lag.append((time.monotonic(), store.rows))
            time.sleep(0.003)
        # every state recorded more than 0.25 s before the sends stopped is written by then
        # (LINGER is 0.02 s; before, none was until max_batch records had gathered)
        end = lag[-1][0]
        early = sum(1 for (t, _) in lag if t < end - 0.25)
        assert early > 0
        assert lag[-1][1] >= early, (early, lag[-1][1])
    finally:
        w.close(timeout=5)


def test_a_unit_a_submit_does_not_leave_the_writer_behind():
    """A script that submits a unit a call (submit_units(desc) in a loop) puts a send between
    every few state records.  Each send goes first, in a transaction of its own, and the
    records queued meanwhile come along in the next one: a batch that ended at every send
    wrote them a few at a time (two transactions a unit), and the writer fell ever further
    behind (seconds within seconds; every unit held until the store had it)."""

    class TxStore(SlowStore):
        batches = 0

        def write_batch(self, batch) -> None:
            self.batches += 1
            time.sleep(0.0002)  # (a transaction's own cost: BEGIN and COMMIT, ~60-200 us)
            super().write_batch(batch)

    store = TxStore()
    w = BatchWriter(store)
    try:
        n = 4000
        for i in range(n):
            o = Obj(f"u{i}")
            w.send_after([o], lambda: None)
            for state in ("QUEUED", "EXECUTING", "DONE"):
                w.hist(("s", "units", o.uid, state, 0.0, None, 0), o)
            if i % 100 == 0:
                time.sleep(0.001)  # (the submitting thread lets the writer in, as the GIL does)
        assert w.flush(timeout=60)
        assert store.rows == 3 * n and len(store.docs) == n
        assert store.batches < n // 2, store.batches  # (before: ~2 a unit)
    finally:
        w.close(timeout=5)
