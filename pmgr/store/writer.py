"""Batched, off-the-hot-path writes: a thread that drains a queue into `write_batch` calls.

Producers call `doc()` / `hist()` (cheap: a tuple into a SimpleQueue).  The writer thread takes
everything queued, folds it into one Batch (the newest doc per uid wins) and writes it in one
transaction.  `lag` is the age of the oldest record not yet written; `flush()` waits (bounded)
until everything queued so far is written.  A failing write is logged and counted in
`failed`, with the uids that were not persisted kept in `unpersisted`.
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
        self.max_lag = 0.0
        self._enqueued = 0
        self._done = 0
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="pmgr-store-writer", daemon=True)
        self._thread.start()

    def doc(self, kind: str, doc: dict) -> None:
        self.q.put((time.monotonic(), kind, doc))
        self._enqueued += 1

    def hist(self, entry: tuple) -> None:
        self.q.put((time.monotonic(), None, entry))
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
        for _, kind, rec in items:
            if kind is None:
                batch.history.append(rec)
            else:
                batch.docs[kind][rec["uid"]] = rec
        try:
            self.store.write_batch(batch)
            self.written += len(items)
            self.batches += 1
        except Exception as exc:  # a database error must not stop the client
            self.failed += len(items)
            self.unpersisted.update(rec["uid"] if kind else rec[2] for _, kind, rec in items)
            log.error("store write of %d records failed: %s", len(items), exc)
        self.max_lag = max(self.max_lag, time.monotonic() - items[0][0])
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
