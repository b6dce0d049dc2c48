"""Batched, off-the-hot-path writes: a thread that drains a queue into `write_batch` calls.

Producers call `changed(obj)` after an object changed and `hist(row)` for each state change:
a SimpleQueue put each, nothing else on the hot path.  The writer thread takes everything
queued, builds one doc per changed object (`obj.as_doc(full)`, full the first time only, so the
description is encoded once per object) and writes the batch in one transaction.  `lag` is the
age of the oldest record in a batch when it was written; `max_lag` the largest so far.
`flush()` waits (bounded) until everything queued so far is written.  A failing write is
logged; its records are counted in `failed` and their uids kept in `unpersisted`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from pmgr.store.base import Batch, StateStore

log = logging.getLogger("pmgr.store")
_STOP = object()


class BatchWriter:
    def __init__(self, store: StateStore, max_batch: int = 20000) -> None:
        self.store = store
        self.max_batch = max_batch
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.written = 0
        self.batches = 0
        self.failed = 0
        self.unpersisted: set[str] = set()
        self.lag = 0.0
        self.max_lag = 0.0
        self._enqueued = 0
        self._done = 0
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="pmgr-store-writer", daemon=True)
        self._thread.start()

    def changed(self, obj) -> None:
        """`obj` (with KIND, uid, as_doc(full)) changed: write its doc in the next batch."""
        self.q.put((time.monotonic(), obj))
        self._enqueued += 1

    def doc(self, kind: str, doc: dict) -> None:
        """Write a plain doc (no object behind it)."""
        self.q.put((time.monotonic(), (kind, doc)))
        self._enqueued += 1

    def hist(self, row: tuple) -> None:
        self.q.put((time.monotonic(), row))
        self._enqueued += 1

    def _run(self) -> None:
        stop = False
        while not stop:
            item = self.q.get()
            items = []
            while item is not None:
                if item is _STOP:
                    stop = True
                else:
                    items.append(item)
                if len(items) >= self.max_batch:
                    break
                try:
                    item = self.q.get_nowait()
                except queue.Empty:
                    item = None
            if items:
                self._write(items)

    def _write(self, items: list) -> None:
        batch = Batch()
        objs = {}
        uids = set()
        for _, rec in items:
            if isinstance(rec, tuple) and len(rec) == 2:
                batch.docs[rec[0]][rec[1]["uid"]] = rec[1]
                uids.add(rec[1]["uid"])
            elif isinstance(rec, tuple):
                batch.history.append(rec)
                uids.add(rec[2])
            else:
                objs[id(rec)] = rec
        for obj in objs.values():
            full = not getattr(obj, "_stored", False)
            batch.docs[obj.KIND][obj.uid] = obj.as_doc(full)
            uids.add(obj.uid)
        try:
            self.store.write_batch(batch)
            for obj in objs.values():
                obj._stored = True
            self.written += len(items)
            self.batches += 1
        except Exception as exc:  # a database error must not stop the client
            self.failed += len(items)
            self.unpersisted.update(uids)
            log.error("store write of %d records failed: %s", len(items), exc)
        self.lag = time.monotonic() - items[0][0]
        self.max_lag = max(self.max_lag, self.lag)
        with self._cv:
            self._done += len(items)
            self._cv.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        target = self._enqueued
        with self._cv:
            return self._cv.wait_for(lambda: self._done >= target, timeout)

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        self.q.put(_STOP)
        self._thread.join(timeout)
