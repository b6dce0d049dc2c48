"""How rp.Executor's calls become units and its futures learn their outcome: `Feed`, a part the
Executor (pmgr/compat/futures/executor.py) holds, given the unit manager and what the executor
decides (its unit fields, directory, reruns, bundling, how many cores it has, whether a unit's
partition was stopped under it, how its units are canceled).

The feeder thread takes everything queued at once (pairs of a future and a `remote_call.Call`,
or of a future and a ComputeUnitDescription of the caller's own) and submits it with one
UnitManager.submit_units.  A call goes as a unit of its own, or, when it is short, with other
short calls as one unit, a bundle (remote_call.call_many):
    short       its function's calls took at most BUNDLE_CALL_S each, as their workers
                measured them (a single call's value comes back with the seconds the call
                itself took, functions.Timed: not a worker's start, not the hops; a bundle
                reports what its calls took together), an exponential average per function
                whose first measurement is replaced by the second (a function's first call
                may import what it needs); a function never measured, or whose value was
                LARGE (a bundle's values must fit VALUE_MAX together), is not short.  So a
                function is short after one call: after one warm-up call, the next thousands
                go in bundles as soon as a batch holds enough (ProcessPoolExecutor's calls
                all flow at once too)
    when        the batch holds more calls than 2 per core of the executor's partition (or
                pilot) can take at once; then at most BUNDLE_S of calls go in a bundle, and no
                more than the batch over 2 x cores (every core still gets units); a call
                whose arguments pickle to LARGE bytes goes alone (a bundle's must fit
                PACKED_MAX)
    semantics   a bundled call is running once its bundle is submitted (Future.cancel() fails
                from then on: as ProcessPoolExecutor's calls in its call queue); it shares its
                unit (fut.unit), that unit's stdout and stderr, and its fate when the unit fails
                (a worker that dies fails the calls of its bundle) or its partition is stopped
                (the calls run again)
Each submit_units costs a store transaction, a routing round and a message whatever its size,
and each unit 0.2-0.3 ms of the client's interpreter: 5,000 submit(pow, 2, 10) on 2 cores ran
at 1,900-2,150 calls/s with a unit each (300-390 us of client CPU a call), and at 11,900-13,200
calls/s bundled (190-460 units, 61-68 us a call; ProcessPoolExecutor(2): 2,800-4,800/s).

Calls that trickle in (a Parsl DataFlowKernel launches one task at a time, 1-2 ms apart) are
submitted together: after a batch of fewer than BATCH_FULL calls, while the executor has at
least `busy` units in flight (as many as its pilot has cores: they have work, and waiting costs
them nothing), the feeder waits up to LINGER seconds for more, until BATCH_FULL are queued or
fewer are in flight; else a call goes at once (so a call after a pause, or a loop of submit and
result, never waits here).  Measured with parsl-perf, 3,000 tasks on 2 cores: 1,406 batches of
2.3 tasks cost the client 2.4 ms of CPU a task (360 tasks/s); lingering, 150 batches of 21,
1.2-1.9 ms (440-560 tasks/s), of which Parsl's DataFlowKernel takes 0.9-1.3 ms.

States arrive on the session's delivery thread (UnitManager.register_callback): EXECUTING marks
a single call's future running and starts its runtime limit, if it has one; a final state
resolves the future(s): a call's value (or its own exception); FAILED -> ExecutorError; a unit
canceled because its partition was stopped (a reconfig) runs again elsewhere, at most `reruns`
times; one canceled otherwise (from elsewhere, or the executor's own partition stopped: it has
nowhere else to run) cancels a future not yet running, and fails one running with
ExecutorError (CancelledError only for a future that is cancelled()).  Then the unit's data
files (a LARGE call's arguments, its value's file) are removed once the store has its final
state (`_drop_files`; pmgr/store/data_files.py says why they must not stay).  Futures are found by
their unit's description (its id; the table keeps it alive).
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures

from pilot import functions, remote_call, states as S
from pilot.descriptions import ComputeUnitDescription

BATCH_FULL = 64
LINGER = 0.05
BUNDLE_CALL_S = 0.002  # calls taking longer are never bundled
BUNDLE_S = 0.005  # the calls of a bundle take about this long, together
BUNDLE_MAX = 64
AVERAGE = 0.3  # weight of the newest measurement in a function's running average


class ExecutorError(RuntimeError):
    """A call that did not run to its end: its unit FAILED (the reason says why: its worker
    died, it could never fit, its partition ended), or its exception could not be sent back
    (then the message is "Type: message" and the traceback is its __cause__)."""


class Sent:
    """A unit this executor submitted: its description, its (future, Call or None) items,
    whether it is a bundle."""

    __slots__ = ("desc", "items", "bundle")

    def __init__(self, desc, items: list, bundle: bool) -> None:
        self.desc, self.items, self.bundle = desc, items, bundle  # (a call alone: timed)


class Feed:
    """The feeder thread and the state callback of an Executor (the module's header).  Every
    future is in one of `queue`, `transit` (being submitted) or `sent` until it is done."""

    def __init__(
        self,
        umgr,
        fields: dict,
        *,
        cwd: str | None,
        reruns: int,
        bundling: bool,
        busy: int,
        cores: Callable[[], int],
        stopped_under: Callable[[object], bool],
        cancel_units: Callable[[list, str], None],
    ) -> None:
        """`umgr`: the UnitManager; `fields`: unit fields of every call; `busy`: calls in
        flight above which a trickle lingers; `cores()`: the cores its calls have;
        `stopped_under(unit)`: whether a canceled unit's partition was stopped under it (its
        calls run again); `cancel_units(units, reason)`: the executor's."""
        self.umgr = umgr
        self.proto = ComputeUnitDescription(function="math.gcd", **fields)  # each unit's: a copy
        self.cwd = cwd
        self.reruns = reruns
        self.bundling = bundling
        self.busy = busy
        self.cores = cores
        self.stopped_under = stopped_under
        self.cancel_units = cancel_units
        self.queue: deque = deque()  # (future, Call | ComputeUnitDescription), oldest first
        self.transit: list = []  # what the feeder took from the queue and is submitting now
        self.lock = threading.Lock()  # the queue against transit, and put against close
        self.sent: dict[int, Sent] = {}  # id(description) -> what was submitted, not final yet
        self.took: dict[str, float] = {}  # a function's pickle -> s a call takes (inf: never short)
        self.once: set[str] = set()  # functions measured once: the next measurement replaces it
        self.wake = threading.Event()  # the feeder has work
        self.go = threading.Event()  # the feeder's linger ends
        self.closed = False  # no more calls (the executor's shutdown)
        self.ended = False  # the feeder is ended
        self.keep = True  # False once shutdown(cancel_futures=True): no call runs again
        self.deadlines: Deadlines | None = None
        self.thread = threading.Thread(target=self._run, name="pilot-executor", daemon=True)
        self.thread.start()

    def put(self, fut, item) -> bool:
        """Queue a call (or a unit description of the caller's own); False once closed."""
        with self.lock:
            if self.closed:
                return False
            self.queue.append((fut, item))
        if not self.wake.is_set():
            self.wake.set()
        if len(self.queue) >= BATCH_FULL:
            self.go.set()
        return True

    def close(self) -> None:
        """No more calls (what is queued still goes)."""
        with self.lock:
            self.closed = True

    def stop(self) -> bool:
        """End the feeder thread and the deadlines' (its futures done: the caller waited);
        False when it was ended already."""
        with self.lock:
            if self.ended:
                return False
            self.ended = True
        self.wake.set()
        self.go.set()
        self.thread.join()
        if self.deadlines is not None:
            self.deadlines.close()
        return True

    # -- the feeder thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            n = self._submit_queued()
            if n == 0 and self.ended:
                return
            if 0 < n < BATCH_FULL:  # a trickle: while the cores are busy, the next calls
                self.go.clear()  # gather (until BATCH_FULL are queued, or fewer in flight)
                if self._in_flight() >= self.busy and len(self.queue) < BATCH_FULL:
                    self.go.wait(LINGER)

    def _in_flight(self) -> int:
        return len(self.sent)

    def _submit_queued(self) -> int:
        """Submit what is queued, at once; how many futures that was."""
        batch = []
        queue = self.queue
        with self.lock:  # (a future is always in one of _queue, _transit, _sent: _pending)
            while queue:
                batch.append(queue.popleft())
            self.transit = batch
        try:
            if batch:
                self._submit_batch(batch)
        finally:
            self.transit = []
        return len(batch)

    def _submit_batch(self, batch: list) -> None:
        calls = [(f, c) for f, c in batch if not f.dropped and type(c) is remote_call.Call]
        own = [(f, d) for f, d in batch if not f.dropped and type(d) is not remote_call.Call]
        made = []
        for group in self._groups(calls):
            try:
                made.append(self._unit_for(group))
            except Exception as exc:  # (calls that cannot be packed together: their outcome)
                for f, _ in group:
                    _fail(f, exc)
        made += [Sent(d, [(f, None)], False) for f, d in own]
        sent = [s for s in made if s is not None]
        if not sent:
            return
        for s in sent:
            self.sent[id(s.desc)] = s
            for f, _ in s.items:
                f.runs += 1
        try:
            units = self.umgr.make_units([s.desc for s in sent])
        except Exception as exc:  # (a description the UnitManager refused; a closed session)
            for s in sent:
                if self.sent.pop(id(s.desc), None) is not None:
                    for f, _ in s.items:
                        _fail(f, exc)
            return
        canceled = []
        for s, unit in zip(sent, units):
            for f, _ in s.items:
                f.unit = unit
            if not s.bundle and s.items[0][0].dropped and id(s.desc) in self.sent:
                canceled.append(unit)
        if canceled:
            self.cancel_units(canceled, "canceled through its future")

    def _groups(self, calls: list) -> list[list]:
        """The calls of a batch as units: one each, or short ones bundled (see the header)."""
        spread = 2 * max(1, self.cores())
        if not self.bundling or len(calls) <= spread:
            return [[c] for c in calls]
        most = min(BUNDLE_MAX, len(calls) // spread)
        bundle: list[tuple] = []
        out, bundle_s = [], 0.0
        for item in calls:
            fut, call = item
            took = self.took.get(call.fn_text)
            if (
                took is None
                or took > BUNDLE_CALL_S
                or fut.runtime is not None  # (a runtime limit is a unit's)
                or len(call.blob) >= functions.LARGE  # (a bundle's must fit PACKED_MAX)
            ):
                out.append([item])
                continue
            if bundle and (
                len(bundle) >= most
                or bundle_s + took > BUNDLE_S
                or (call.cwd, call.fields) != (bundle[0][1].cwd, bundle[0][1].fields)
            ):
                out.append(bundle)
                bundle, bundle_s = [], 0.0
            bundle.append(item)
            bundle_s += took
        if bundle:
            out.append(bundle)
        return out

    def _unit_for(self, group: list) -> Sent | None:
        """The description of a unit for these (future, Call) items; None if none is left
        (bundled futures are marked running now; one canceled meanwhile is left out)."""
        if len(group) > 1:
            group = [(f, c) for f, c in group if self._mark_running(f)]
            if not group:
                return None
        first = group[0][1]
        function = remote_call.packed([c for _, c in group], self.cwd, timed=len(group) == 1)
        if first.fields is None:  # (a copy of the executor's own, only its call set)
            desc = self.proto.with_fields(function=function)
        else:
            desc = ComputeUnitDescription(function=function, **first.fields)
        return Sent(desc, group, len(group) > 1)

    @staticmethod
    def _mark_running(fut) -> bool:
        fut.started = True
        try:
            return fut.set_running_or_notify_cancel()
        except RuntimeError:  # (canceled meanwhile: its cancel notified)
            return False

    # -- unit states (the session's delivery thread) ------------------------------------------
    def on_state(self, unit, state: str) -> None:
        if state == S.EXECUTING:
            sent = self.sent.get(id(unit.description))
            if sent is not None and not sent.bundle and not sent.items[0][0].started:
                self._started(sent.items[0][0])
            return
        if state not in S.FINAL:
            return
        sent = self.sent.pop(id(unit.description), None)
        if sent is None:  # (another executor's unit, on a shared UnitManager)
            return
        if len(self.sent) < self.busy:
            self.go.set()
        try:
            self._ended(sent, unit, state)
        finally:
            if sent.items[0][1] is not None:  # (a call's unit: not a description of the
                _drop_files(unit)  # caller's own, whose unit the caller may read later)

    def _ended(self, sent: Sent, unit, state: str) -> None:
        """A unit of this executor's is final: its future(s) resolved, or its calls queued
        again."""
        if sent.bundle:
            self._bundle_ended(sent, unit, state)
            return
        fut, item = sent.items[0]
        if fut.dropped:
            return
        if state == S.CANCELED and not fut.timed_out:
            if not self._again(sent, unit) and not fut.cancel():  # (it ran: a cancel from
                # elsewhere ended it, or the stop of the executor's own partition; not the
                # future's: CancelledError is for a future that is cancelled())
                fut.set_exception(ExecutorError(f"{unit.uid} CANCELED while it ran: {unit.reason}"))
            return
        if state == S.DONE and item is not None:
            self._load(fut, item, unit)
        try:
            value = fut.outcome(fut, unit)
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(value)

    def _load(self, fut, item, unit) -> None:
        """A call alone ended DONE: its value loaded once, for its future (fut.loaded) and for
        the measurement of its function (its worker's Timed); a LARGE value or a file of the
        data directory is left to the future's outcome (and its function is never bundled)."""
        stored = unit.value
        if stored is not None and (
            len(stored) >= functions.LARGE or functions.is_value_ref(stored)
        ):
            self._measured([item], math.inf)
            return
        try:
            value, seconds = functions.unpack_timed(stored)
        except BaseException:  # (one this process cannot load: the outcome says why)
            return
        fut.loaded = value
        self._measured([item], seconds)

    def _bundle_ended(self, sent: Sent, unit, state: str) -> None:
        if state == S.DONE:
            try:
                values, took = unit.return_value
            except Exception as exc:  # (a value this process cannot load)
                why = f"{unit.uid}: its return values cannot be loaded: {exc}"
                values, took = [remote_call.Raised(None, "", why)] * len(sent.items), None
            n = len(sent.items)
            if unit.value is not None and (
                len(unit.value) >= functions.LARGE * n or functions.is_value_ref(unit.value)
            ):
                took = math.inf  # (values this large do not go in bundles)
            if took is not None:
                self._measured([c for _, c in sent.items], took)
            for (fut, _), value in zip(sent.items, values):
                if type(value) is remote_call.Raised:
                    fut.set_exception(value.rebuild(ExecutorError))
                else:
                    fut.set_result(value)
            return
        if state == S.CANCELED and self._again(sent, unit):
            return
        n = len(sent.items)
        for fut, _ in sent.items:
            if state == S.FAILED:
                fut.set_exception(
                    ExecutorError(f"{unit.uid} (a bundle of {n} calls) FAILED: {unit.reason}")
                )
            else:  # (running since the bundle was submitted: not cancelled(), so no
                # CancelledError)
                fut.set_exception(
                    ExecutorError(f"{unit.uid} (a bundle of {n} calls) CANCELED: {unit.reason}")
                )

    def _again(self, sent: Sent, unit) -> bool:
        """A unit canceled because its partition was stopped under it: its calls are queued
        again (at most `reruns` times); False when they are not."""
        if not self.stopped_under(unit) or max(f.runs for f, _ in sent.items) > self.reruns:
            return False
        for fut, item in sent.items:
            fut.unit = None
            self.queue.append((fut, item if item is not None else sent.desc))
        self.wake.set()
        return True

    def _measured(self, calls: list, seconds: float | None) -> None:
        """Calls that took `seconds` together: their functions' running averages (a function's
        first measurement is replaced by its second: the first call may have imported what
        the function needs; inf: the function is never short)."""
        if seconds is None:
            return
        each = seconds / len(calls)
        took, once = self.took, self.once
        for c in calls:
            key = c.fn_text
            old = took.get(key)
            if old == math.inf:  # (a function whose value was LARGE stays so)
                continue
            if old is None or key in once or each == math.inf:
                took[key] = each
                if old is None:
                    once.add(key)
                else:
                    once.discard(key)
            else:
                took[key] = old + AVERAGE * (each - old)

    def _started(self, fut) -> None:
        if not self._mark_running(fut):
            return
        if fut.runtime is not None:
            if self.deadlines is None:
                self.deadlines = Deadlines(self._expired)
            self.deadlines.add(fut.runtime, fut)

    def _expired(self, fut) -> None:
        """(deadline thread) A future's unit ran past its runtime limit: it is canceled."""
        unit = fut.unit
        if unit is not None and not unit.final and not fut.done():
            fut.timed_out = True
            self.cancel_units([unit], f"its runtime limit of {fut.runtime} s was reached")

    def pending(self) -> list:
        """Futures not done: submitted ones oldest first, then those being submitted, then
        queued ones."""
        with self.lock:
            sent = [f for s in list(self.sent.values()) for f, _ in s.items]
            later = [f for f, _ in self.transit] + [f for f, _ in self.queue]
        return list(dict.fromkeys(sent + later))


def _drop_files(unit) -> None:
    """A final unit's data files (pmgr/store/data_files.py), removed once the store has its
    final state (on the writer's thread, after what is queued now: its first doc too, which
    writes its arguments' file when the unit ended before that write): its call's LARGE
    arguments, which the store wrote for it alone (a call's description is its own: its
    blueprint and the files it names are its unit's), and its value's file (its worker's, or
    the store's, named after the unit).  Its future has its outcome (or its calls went again
    as new units, with files of their own), so nothing reads them again."""
    session = unit.session
    data = session.store.data
    if data is None:
        return

    def drop() -> None:
        names = list(unit.blueprint.stored.files.values())
        value = unit.value
        if type(value) is str and value.startswith(functions.VALUE_REF):
            names.append(value[len(functions.VALUE_REF) :])
        elif type(value) is bytes:
            names.append(functions.value_name(unit.uid))
        if names:
            data.drop(names)

    session.writer.then(drop, urgent=False)


def _fail(fut, exc: BaseException) -> None:
    """fut ends with `exc`, unless it ended meanwhile (a cancel() racing this thread)."""
    try:
        if not fut.done():
            fut.set_exception(exc)
    except futures.InvalidStateError:
        pass


class Deadlines:
    """One thread that calls `expired(future)` when a future's runtime has passed."""

    def __init__(self, expired) -> None:
        self.expired = expired
        self.heap: list = []
        self.seq = itertools.count()
        self.cond = threading.Condition()
        self.closed = False
        threading.Thread(target=self._run, name="pilot-executor-deadlines", daemon=True).start()

    def add(self, seconds: float, fut) -> None:
        with self.cond:
            heapq.heappush(self.heap, (time.monotonic() + seconds, next(self.seq), fut))
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()

    def _run(self) -> None:
        with self.cond:
            while not self.closed:
                now = time.monotonic()
                while self.heap and self.heap[0][0] <= now:
                    self.expired(heapq.heappop(self.heap)[2])
                self.cond.wait(self.heap[0][0] - now if self.heap else None)
