"""Batched, off-the-hot-path writes: a thread that drains a queue into `write_batch` calls.

Producers call `changed(obj)` after an object changed and `hist(row, obj)` for each state
change of a pilot or a partition: a SimpleQueue put each, nothing else on the hot path.
An object has KIND, uid, `stored` (written once: its description need not go again) and
`as_doc(full)`; a unit also has `writing` and `written`, the (state, partition) its doc is
being written with and has in the store: the moves of a unit whose doc says the same already
(it was written ahead, with its send) are written without it.  Units'
state changes come a list at a time (`moved`: what the session gathered while its lock was
held), and are written in columns: one UnitMoves a state per batch (pmgr/store/base.py),
with each unit's doc.  The writer thread takes everything
queued, builds one doc per changed object (`obj.as_doc(full)`, full the first time only, so the
description is encoded once per object) and writes the batch in one transaction.  `lag` is the
age of the oldest record in a batch when it was written; `max_lag` the largest so far.
`flush()` waits (bounded) until everything queued so far is written.
A batch takes at most the store's BATCH_RECORDS[0] records (sqlite 2,000, MongoDB 500), or
BATCH_RECORDS[1] once its oldest record has waited longer than BEHIND (the writer is behind:
sqlite's commit costs its fsyncs whatever its size, so fewer, larger ones catch up; a send
joining such a batch waits for it, ~0.1 s).

A batch of state changes alone waits up to LINGER seconds for more (a unit's QUEUED, EXECUTING
and DONE then often share one batch, and its record is written once instead of three times:
two upserts fewer per unit, measured 14 us each); a batch ends at an urgent callback (`then`:
units to send to a partition that is running short of them), which is written at once, and so
is a batch with a flush waiting.  An urgent send's docs go in a transaction of their own,
ahead of what was gathered (a call's round trip waits for that commit: its fewest statements);
what was gathered goes after a linger, or at once when it has waited LINGER already (calls one
at a time send every few ms, and each send would put the rest off again).

`then(callback)` runs `callback()` on the writer thread once everything queued before it has
been written (or refused for good: see `unpersisted`).  `send_after(objs, callback)` runs it
once the docs of `objs` are written, ahead of the backlog: the client sends units to their
pilot only from such a callback, so a unit is in the store, with the partition it goes to,
before it leaves the client, and a send does not wait behind the records of units that are
going nowhere yet (measured: while 5,000 units were being submitted, sends waited 90-320 ms
behind them and the partition's cores idled for a third of that time).  Its docs and callback
join the batch being gathered, which an urgent one ends at once; a batch also ends after LINGER
of gathering or max_batch records, so none waits long.  A callback is never dropped:
during an outage it waits for the database, with its batch.

What the store refuses because the object's stored state is final already (a second final
record: pmgr/store/base.py, `final once`) is logged with both records and kept in `refused`
(the last REFUSED_KEPT).  A batch the store refuses because a newer owner holds the session
(`Fenced`: this client was deposed) is refused for good, and so is every later one: the
writer says so once, calls `on_deposed(exc)` (the session lets its pilots go), names their
uids in `unpersisted`, and still runs their callbacks, so that units waiting to be sent fail
unsent (pmgr/core/routing.py) instead of waiting for ever.  A store whose file was lost under it
and made anew (`StoreRenewed`: deleted, replaced) wrote nothing of the batch: the writer calls
`on_renewed(exc)` (the session queues every object it holds again, in full) and writes the
batch again after the usual backoff.

When the database fails (lost, restarting), nothing upstream notices: the writer keeps the
records it could not write and tries again, with a backoff of RETRY_MIN..RETRY_MAX seconds,
merging what arrived meanwhile into its next batch; when the database is back it catches up in
two writes.  The failed batch is tried again as it was built (`retry`), not made anew with what
came since: a MongoDB write can land without its answer reaching us, and its records of moves
are found again by their keys only if the same records carry the same keys (made anew, a
unit's row would be stored twice).  It holds at most `max_buffer` records: past that the
oldest are dropped and their uids kept in `unpersisted` (exactly what was not persisted), and
`dropped` counts them.
"""

from __future__ import annotations

import itertools
import logging
import operator
import queue
import threading
import time
import uuid
from collections.abc import Callable

import pilot.wire.checks as checks
from pilot.pmgr.store.base import (
    Batch,
    Fenced,
    StateStore,
    StoreRenewed,
    UnitMoves,
    UnitsPlaced,
)
from pilot.pmgr.store.held import held_of
from pilot.states import UNIT_STATES

log = logging.getLogger("pmgr.store")
_STOP = object()
_WAKE = object()  # (an urgent send_after arrived: the batch being gathered ends)
_SOON = object()  # (a send_after that may wait for the batch's linger)
RETRY_MIN, RETRY_MAX = 0.5, 5.0
BEHIND = 0.25  # seconds: a batch whose oldest record waited longer is the writer behind
LINGER = 0.02  # seconds a batch of state changes alone waits for more
REFUSED_KEPT = 1000  # refusals kept in `refused` (all are logged, one line a second at most)


class _Moved(list):
    """Units' state changes [(unit, state, ts, seq, prev, reason) | MovedTogether, ...], in
    order; `weight`: how many changes (what `flush` counts)."""

    __slots__ = ("weight",)

    def __init__(self, moves=()) -> None:
        super().__init__(moves)
        self.weight = sum(len(m.units) if type(m) is MovedTogether else 1 for m in self)


class MovedTogether:
    """Units that moved to one state at once, each one direct step (the session's short way:
    a group of an agent's batch, a chunk submitted): `ts`, `seqs`, `prevs` and `reasons` a
    list each or one value for all."""

    __slots__ = ("state", "units", "ts", "seqs", "prevs", "reasons")

    def __init__(self, state: str, units: list, ts, seqs, prevs, reasons) -> None:
        self.state, self.units, self.ts = state, units, ts
        self.seqs, self.prevs, self.reasons = seqs, prevs, reasons


class _Then:
    """A callback waiting in the queue for the records queued before it."""

    __slots__ = ("callback", "urgent")

    def __init__(self, callback, urgent: bool) -> None:
        self.callback = callback
        self.urgent = urgent


class BatchWriter:
    def __init__(
        self,
        store: StateStore,
        max_batch: int | None = None,
        max_buffer: int = 1_000_000,
        behind_batch: int | None = None,
        linger: float = LINGER,
    ) -> None:
        self.store = store
        self.linger = linger
        self.flushing = 0  # flush() callers waiting: no lingering
        most, behind = store.BATCH_RECORDS  # (the store's own sizes, unless given)
        self.max_batch = most if max_batch is None else max_batch
        self.behind_batch = max(self.max_batch, behind if behind_batch is None else behind_batch)
        self.max_buffer = max_buffer
        self.pending: list = []  # records a failed write left behind, oldest first
        # (n, the batch built of pending's first n records): a failed write, tried again as
        # it was built (the header, "retry")
        self.retry: tuple[int, tuple] | None = None
        self.dropped = 0
        self.retrying = False
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.first: queue.SimpleQueue = queue.SimpleQueue()  # send_after's (ts, objs, callback)
        self.written = 0
        self.batches = 0
        self.failed = 0
        self.unpersisted: set[str] = set()
        self.held: set[str] = set()  # the uids kept to retry while the store fails (full disk)
        self.refusals = checks.BadMessages(log)  # one line per 10 s, however many
        self.refused: list = []  # the store's Refusals (final once), the last REFUSED_KEPT
        self.deposed: Fenced | None = None  # a newer owner holds the session (module header)
        # called once with it (the session lets its pilots go)
        self.on_deposed: Callable[[Fenced], None] | None = None
        # called when the store's file was lost and made anew
        self.on_renewed: Callable[[StoreRenewed], None] | None = None
        self.lag = 0.0
        self.max_lag = 0.0
        self._enqueued = 0
        self._done = 0
        self.token = uuid.uuid4().hex[:12]  # (names this writer's records of moves)
        self.keys = 0
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

    def moved(self, moves: list) -> None:
        """Units' state changes [(unit, state, ts, seq, prev, reason), ...] (each unit's in
        its order), with their docs: in columns (the module's header)."""
        moved = _Moved(moves)
        self.q.put((time.monotonic(), moved))
        self._enqueued += moved.weight

    def hist(self, row: tuple, obj=None) -> None:
        """A state change (a HISTORY row); with `obj`, also `changed(obj)`, in one put."""
        self.q.put((time.monotonic(), row if obj is None else (*row, obj)))
        self._enqueued += 1

    def then(self, callback, urgent: bool = True) -> None:
        """Run `callback()` (writer thread) once everything queued so far is written; not
        `urgent`: it may wait for the batch's linger (what it sends is not awaited yet)."""
        self.q.put((time.monotonic(), _Then(callback, urgent)))
        self._enqueued += 1

    def send_after(self, objs: list, callback, urgent: bool = True) -> None:
        """Run `callback()` (writer thread) once the docs of `objs` are written, ahead of
        whatever else is queued (their earlier history rows may follow it); not `urgent`: it
        may wait for the batch's linger."""
        objs = list(objs)
        self.first.put((time.monotonic(), objs, callback))
        self._enqueued += 1 + len(objs)  # (flush counts each doc and the callback)
        self.q.put(_WAKE if urgent else _SOON)

    def _run(self) -> None:
        stop = False
        backoff = RETRY_MIN
        deferred = False  # (pending holds what an urgent send went ahead of, not a retry)
        items: list | None  # (None: let go before the next wait, below)
        sends: list | None
        while not stop or self.pending:
            try:
                if self.pending:
                    item = self.q.get(timeout=self.linger if deferred else backoff)
                else:
                    item = self.q.get()
            except queue.Empty:
                item = None
            deferred = False
            items = self.pending
            self.pending = []
            linger_until = time.monotonic() + self.linger
            most = self.max_batch
            urgent = False
            while item is not None:
                if item is _STOP:
                    stop = True
                elif item is _WAKE:  # a send waits: it goes first, alone, then this batch,
                    urgent = True  # with what is queued already (no wait for more: a script
                    # that submits a unit a call puts a send between every few records, and
                    # a batch that ended at each wrote them a few at a time, falling behind)
                elif item is not _SOON:
                    items.append(item)
                    if type(item[1]) is _Then and item[1].urgent:
                        break  # written now: what came after it waits for the next batch
                if len(items) >= most:
                    if most < self.behind_batch and time.monotonic() - items[0][0] > BEHIND:
                        most = self.behind_batch  # behind: catch up in fewer, larger commits
                    else:
                        break
                if time.monotonic() > linger_until:
                    break
                try:
                    item = self.q.get_nowait()
                except queue.Empty:
                    left = linger_until - time.monotonic()
                    if stop or left <= 0 or self.flushing or urgent:
                        break
                    try:  # state changes only: more of the same objects' may come
                        item = self.q.get(timeout=left)
                    except queue.Empty:
                        break
            sends = self._with_sends([])
            if urgent and sends and items and self.retry is None:
                # (its docs alone: the fewest statements before the send; what was gathered
                # goes next, its units' earlier moves among it: after a linger, or now when it
                # has waited one already (one call at a time sends every few ms: each send
                # would put the rest off again, until max_batch records, the final states of
                # hundreds of calls with their units held in memory, had waited))
                if self._write(sends):  # (the rest after a linger: the interpreter is the
                    sends = []  # channel thread's, to send them)
                    if time.monotonic() - items[0][0] < self.linger:
                        self.pending, deferred = items, True
                        items = item = sends = None
                        continue
                else:
                    items, sends = sends + items, []  # (the store failed: kept, the send's first)
            items = items + sends
            if self.retry is not None:  # (a failed batch first, as it was built)
                n, built = self.retry
                head = items[:n]
                if not self._write(head, built):
                    self._keep(head + items[n:])  # (head: what is left of it)
                    backoff = min(backoff * 2, RETRY_MAX)
                    if stop:
                        return
                    items = item = sends = None
                    continue
                items = items[n:]
            if items and not self._write(items):
                self._keep(items)
                backoff = min(backoff * 2, RETRY_MAX)
                if stop:
                    return  # closing with the database down: what is left stays unpersisted
            else:
                backoff = RETRY_MIN
            items = item = None  # (not held while the next get waits: their units may go)

    def _with_sends(self, items: list) -> list:
        """`items`, then the docs send_after waits for, then its callbacks: one batch."""
        while True:
            try:
                ts, objs, callback = self.first.get_nowait()
            except queue.Empty:
                return items
            items.extend((ts, o) for o in objs)
            items.append((ts, _Then(callback, True)))

    def _keep(self, items: list) -> None:
        """Keep `items` (all that waits for the store), the oldest dropped past max_buffer."""
        excess = len(items) - self.max_buffer
        if excess > 0:
            if self.retry is not None:  # (the failed batch goes whole, or is made anew)
                excess = max(excess, self.retry[0])
                self.retry = None
            lost, items = items[:excess], items[excess:]
            kept = [i for i in lost if isinstance(i[1], _Then)]  # callbacks are never dropped
            lost = [i for i in lost if not isinstance(i[1], _Then)]
            items = kept + items
            self.dropped += _weight(lost)
            self.unpersisted.update(uid for _, rec in lost for uid in _uids(rec))
            with self._cv:
                self._done += _weight(lost)
                self._cv.notify_all()
        self.pending = items
        self.held = {u for _, rec in items if not isinstance(rec, _Then) for u in _uids(rec)}

    def _write(self, items: list, built: tuple | None = None) -> bool:
        """Write one batch (`built`: the one `items` made before, its keys and all) and run its
        callbacks; False when the database failed for now (the caller keeps `items` to retry,
        and `retry` holds the batch), True when written or refused for good."""
        self.retry = None
        if built is None:
            built = self._batch(items)
        batch, objs, thens, unbuilt = built
        refused = None
        try:
            if len(batch):  # (callbacks alone need no write)
                refused = self.store.write_batch(batch)
        except Fenced as exc:
            return self._fenced(items, exc)
        except StoreRenewed as exc:  # a new file: what the client holds is written again
            log.error("%s", exc)
            if self.on_renewed is not None:
                try:
                    self.on_renewed(exc)
                except Exception:  # (the session's: it must not stop the writer)
                    log.exception("store writer: on_renewed failed")
            self.retrying = True  # (the batch again, soon: "store is back" once it is in)
            return False
        except Exception as exc:  # a database error must not stop the client: retry later
            return self._not_written(items, exc, built)
        if refused:
            self._refused(refused)
        if self.retrying:
            log.warning("store is back: %d records written after the outage", len(items))
            self.retrying = False
            self.held = set()
        for obj in objs.values():
            obj.stored = True
            if hasattr(obj, "writing"):  # (a Unit: its doc skipped while it says the same)
                obj.written = obj.writing
        if self.unpersisted:  # written now, after all (a retry, a write one by one)
            uids = {u for _, rec in items if type(rec) in (tuple, _Moved) for u in _uids(rec)}
            uids.update(o.uid for o in objs.values() if o.uid not in unbuilt)
            self.unpersisted.difference_update(uids)
        self.written += len(items)
        self.batches += 1
        self.lag = time.monotonic() - items[0][0]
        self.max_lag = max(self.max_lag, self.lag)
        for callback in thens:
            try:
                callback()
            except Exception:  # a callback's failure must not stop the writer
                log.exception("store writer: callback %r failed", callback)
        with self._cv:
            self._done += _weight(items)
            self._cv.notify_all()
        return True

    def _refused(self, refused: list) -> None:
        """(_write) Records the store refused (final once): logged with both records, kept."""
        for r in refused:
            self.refusals.report(f"store kept a final record: {r}")
        self.refused = (self.refused + list(refused))[-REFUSED_KEPT:]

    def _fenced(self, items: list, exc: Fenced) -> bool:
        """(_write) A newer owner holds the session: these records are refused for good (and
        every later one); their callbacks still run (units not persisted are not sent)."""
        first = self.deposed is None
        self.deposed = exc
        uids = {u for _, rec in items if not isinstance(rec, _Then) for u in _uids(rec)}
        self.unpersisted.update(uids)
        if first:
            log.error("%s; %d records and all later ones are not written", exc, len(uids))
            if self.on_deposed is not None:
                try:
                    self.on_deposed(exc)
                except Exception:  # (the session's: it must not stop the writer)
                    log.exception("store writer: on_deposed failed")
        for _, rec in items:
            if isinstance(rec, _Then):
                try:
                    rec.callback()
                except Exception:
                    log.exception("store writer: callback %r failed", rec.callback)
        with self._cv:
            self._done += _weight(items)
            self._cv.notify_all()
        return True

    def _batch(self, items: list) -> tuple[Batch, dict, list, set]:
        """(_write) The Batch of `items`: history rows, plain docs, one doc per changed object
        (by id); their objects, the callbacks to run after, the uids whose doc failed."""
        batch = Batch()
        objs = {}
        thens = []
        history = batch.history
        moved: dict = {}  # (session, seq, state) -> its columns
        units: dict = {}  # the units moves are about (their docs, unless written as they are)
        for _, rec in items:
            if type(rec) is _Moved:
                self._columns(rec, moved, units)
            elif type(rec) is tuple:
                n = len(rec)
                if n == 8:  # a state change and its object
                    objs[id(rec[7])] = rec[7]
                    history.append(rec[:7])
                elif n == 2:
                    batch.docs[rec[0]][rec[1]["uid"]] = rec[1]
                else:
                    history.append(rec)
            elif type(rec) is _Then:
                thens.append(rec.callback)
            else:
                objs[id(rec)] = rec
        for session, _, state in sorted(moved, key=_ORDER):
            cols = moved[(session, _, state)]
            batch.moves.append(_unit_moves(session, state, cols, self._next_key()))
        for key, unit in units.items():  # (a doc written since in its state: not again)
            if key not in objs and unit.written != (unit.state, unit.part):
                objs[key] = unit
        unbuilt = set()
        together: dict = {}  # (UnitsPlaced's fields) -> its uids
        for obj in objs.values():
            try:
                if hasattr(obj, "writing"):  # (a Unit: what its doc says; `written` once
                    obj.writing = (obj.state, obj.part)  # it is stored: see the header)
                    key = _together(obj)
                    if key is not None:
                        got = together.get(key)
                        if got is None:
                            got = together[key] = ([], [])
                        got[0].append(obj.uid)
                        got[1].append(obj.own_fields())
                        continue
                batch.docs[obj.KIND][obj.uid] = obj.as_doc(not obj.stored)
            except Exception as exc:  # a bug in one object must not stop the writer
                unbuilt.add(obj.uid)
                self.unpersisted.add(obj.uid)
                self.refusals.report(f"record of {obj.uid} could not be built: {exc!r}")
        for (session, state, pilot, part, template), (uids, own) in together.items():
            own = own if template is not None and any(own) else None
            batch.placed.append(UnitsPlaced(session, state, pilot, part, uids, template, own))
        return batch, objs, thens, unbuilt

    def _columns(self, moves: _Moved, moved: dict, objs: dict) -> None:
        """(_batch) Units' changes into the batch's columns, their units into `objs`: a
        MovedTogether as it is, single changes a run of one state at a time."""
        for together, run in itertools.groupby(moves, _IS_GROUP):
            if together:
                for g in run:
                    self._group(g.state, g.units, g.ts, g.seqs, g.prevs, g.reasons, moved, objs)
                continue
            for state, group in itertools.groupby(run, _STATE):
                same = list(group)
                self._group(
                    state,
                    [m[0] for m in same],
                    [m[2] for m in same],
                    [m[3] for m in same],
                    [m[4] for m in same],
                    [m[5] for m in same],
                    moved,
                    objs,
                )

    def _group(self, state, units, ts, seqs, prevs, reasons, moved: dict, objs: dict) -> None:
        """(_columns) Units' changes to `state`: into the batch's group of (state, place in
        the history), so the batch's groups go in that order and each unit's rows keep theirs
        (a restarted unit is SCHEDULING again, later)."""
        objs.update(zip(map(id, units), units))
        n = len(units)
        if type(ts) is not list:
            ts = [ts] * n
        if type(seqs) is not list:
            seqs = [seqs] * n
        elif seqs.count(seqs[0]) != n:  # (units at different places of their histories)
            at = 0
            for seq, same in itertools.groupby(seqs):
                k = len(list(same))
                cut = slice(at, at + k)
                self._group(
                    state,
                    units[cut],
                    ts[cut],
                    seq,
                    prevs[cut] if type(prevs) is list else prevs,
                    reasons[cut] if type(reasons) is list else reasons,
                    moved,
                    objs,
                )
                at += k
            return
        key = (units[0].session.uid, seqs[0], state)
        cols: tuple[list, ...] | None = moved.get(key)
        if cols is None:
            cols = moved[key] = ([], [], [], [], [], [])
        cols[0].extend([u.uid for u in units])
        cols[1].extend(ts)
        cols[2].extend(seqs)
        cols[3].extend(reasons if type(reasons) is list else [reasons] * n)
        prevs = prevs if type(prevs) is list else [prevs] * n
        cols[4].extend(prevs)
        if state == "EXECUTING" or "EXECUTING" in prevs:  # (unit_flow: what they hold)
            cols[5].extend(
                [
                    _held(u) if state == "EXECUTING" or p == "EXECUTING" else None
                    for u, p in zip(units, prevs)
                ]
            )
        else:
            cols[5].extend([None] * n)

    def _next_key(self) -> str:
        self.keys += 1
        return f"{self.token}.{self.keys}"

    def _not_written(self, items: list, exc: Exception, built: tuple) -> bool:
        """(_write) The store refused `items` (their batch `built`): a transient failure keeps
        them to retry, the same batch (`retry`: False); a batch it refuses for good is written
        one record at a time, and a single record it refuses for good is dropped, its uid in
        `unpersisted` (True).  If the store fails for now during the one at a time, `items`
        becomes what is left of them, `retry` the one that failed (False)."""
        if not self.store.transient(exc) and len(items) > 1:
            # something in the batch itself is wrong: write one record at a time, so
            # only the bad ones are lost (and named), not the batch they came with
            log.error("store refused a batch (%s); writing its records one by one", exc)
            for i, item in enumerate(items):
                if not self._write([item]):  # (down for now: `retry` holds it, built)
                    items[:] = items[i:]
                    return False
            return True
        if not self.store.transient(exc):
            self.unpersisted.update(_uids(items[0][1]))
            self.refusals.report(f"store refused the record of {_uids(items[0][1])[0]}: {exc}")
            with self._cv:
                self._done += _weight(items)
                self._cv.notify_all()
            return True
        self.failed += 1
        self.retry = (len(items), built)  # (the same batch again: the header, "retry")
        if not self.retrying:
            log.error(
                "store write of %d records failed, keeping them to retry: %s", len(items), exc
            )
        self.retrying = True
        return False

    def flush(self, timeout: float = 30.0) -> bool:
        target = self._enqueued
        with self._cv:
            self.flushing += 1
            self.q.put(_WAKE)  # (a batch lingering for more goes now)
            try:
                return self._cv.wait_for(lambda: self._done >= target, timeout)
            finally:
                self.flushing -= 1

    def close(self, timeout: float = 30.0) -> set[str]:
        """Write what is left (bounded); returns the uids whose records could not be written."""
        self.flush(timeout)
        self.q.put(_STOP)
        self._thread.join(timeout)
        left = list(self.pending)
        while True:
            try:
                rec = self.q.get_nowait()
            except queue.Empty:
                break
            if type(rec) is tuple:  # (not a marker: _STOP, _WAKE, _SOON)
                left.append(rec)
        self.unpersisted.update(
            u for _, rec in left if not isinstance(rec, _Then) for u in _uids(rec)
        )
        return set(self.unpersisted)


_STATE = operator.itemgetter(1)


def _IS_GROUP(rec) -> bool:
    return type(rec) is MovedTogether


_RANK = {s: i for i, s in enumerate(UNIT_STATES)}


def _ORDER(key: tuple) -> tuple:
    """A batch's groups of moves: by place in the units' histories, then by state."""
    return key[1], _RANK.get(key[2], len(_RANK))


def _together(unit) -> tuple | None:
    """The UnitsPlaced a unit's doc goes with (its fields but the uid), or None (its own
    doc): a new unit not placed or placed (SCHEDULING, nothing else known of it), or one the
    store has as SCHEDULING whose partition alone changed (it waited here, placed now)."""
    if unit.state != "SCHEDULING" or unit.node is not None or unit.exit_code is not None:
        return None
    if unit.reason is not None or unit.value is not None or unit.kept or unit.slots is not None:
        return None
    pilot = unit.pilot.uid if unit.pilot is not None else None
    if not unit.stored:
        return unit.session.uid, "SCHEDULING", pilot, unit.part, unit.blueprint.stored
    written = unit.written
    if written is not None and written[0] == "SCHEDULING" and written[1] != unit.part:
        return unit.session.uid, "SCHEDULING", pilot, unit.part, None
    return None


def _held(unit) -> tuple:
    """(partition, cores, gpus) an EXECUTING unit holds (unit_flow), made once a unit."""
    held = unit.held
    if held is None or held[0] != unit.part:
        held = unit.held = (unit.part or "", *held_of(unit.slots, unit.asked))
    return held


def _uids(rec) -> list[str]:
    """The uids a queued record is about."""
    if type(rec) is _Moved:
        return [u.uid for m in rec for u in (m.units if type(m) is MovedTogether else (m[0],))]
    if isinstance(rec, tuple):
        return [rec[1]["uid"] if len(rec) == 2 else rec[2]]
    return [rec.uid]


def _weight(items: list) -> int:
    """Records these queue items count for (`flush` waits for every one)."""
    return sum(rec.weight if type(rec) is _Moved else 1 for _, rec in items)


def _unit_moves(session: str, state: str, cols: tuple, key: str) -> UnitMoves:
    """A batch's columns of one state as a UnitMoves (one value where all are the same)."""
    uids, ts, seqs, reasons, prev, held = cols
    return UnitMoves(
        session,
        state,
        uids,
        ts,
        _one(seqs),
        reasons if any(r is not None for r in reasons) else None,
        _one(prev),
        held if any(h is not None for h in held) else None,
        key,
    )


def _one(values: list):
    """The value every item has, or the list."""
    first = values[0]
    return first if values.count(first) == len(values) else values
