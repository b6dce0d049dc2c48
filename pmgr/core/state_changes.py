"""StateChanges: the session lock, and every state change made under it persisted and its
callbacks fired.  A part of a Session (pmgr/core/session.py), shared by everything that changes
a pilot, a partition or a unit.

The lock is this class's own: the rest of the client takes it as `with session.locked():`,
whether it changes a state or only reads what the lock guards, and waits for a change with
`wait` (`notify` wakes the waiters).  A state change has one way in, `record(obj, state, ts)`
(`record_together` for units that moved at once), inside `locked()`: it hands the change's
record to the store writer (a unit's with the others made while the lock is held, in one list
at the outermost `locked()`: pmgr/store/writer.py `moved`) and queues the object's callbacks on
this thread; `fire=False` records a state nobody is told of (an object's NEW as it is made, a
history row recovery adds).  The outermost `locked()` wakes the waiters and then, with the
lock released (a callback may take its time, or submit more units), runs the callbacks in order
on the same thread (`fire`): the object's own, then its manager's.
A final state's callbacks run, then the object is settled (waits count it) and, once the store
has that state (the writer's `then`), a unit is released (pmgr/core/unit_table.py).
"""

from __future__ import annotations

import _thread
import functools
import logging
import threading
import time
from collections import deque
from contextlib import contextmanager

from pilot import states as S
from pilot.pmgr.store.writer import MovedTogether

log = logging.getLogger("pmgr.session")


class StateChanges:
    """The session lock (private: `locked()`, `wait`, `notify`), the records of state changes
    made under it, and the callbacks they fire."""

    def __init__(self, session_uid: str, writer) -> None:
        self.uid = session_uid
        self.writer = writer
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self.releasable: deque = deque()  # final units the store has (_settle)
        self.firing = threading.local()  # this thread's `locked()` and `fire` (see locked)

    # -- state changes (called with the lock held) ---------------------------------------------
    def record(self, obj, state: str, ts: float, fire: bool = True) -> None:
        """(inside `locked()`) `obj` moved to `state` at `ts` (its history has it): persisted,
        and its callbacks queued unless `fire` is False (then the lock need not be held)."""
        self._persist(obj, state, ts)
        if fire:
            self._changed(obj, state)

    def record_together(self, state, units, ts, seqs, prevs, reasons) -> None:
        """(inside `locked()`) `record` for units of one manager that moved to `state` at
        once, each one direct step: `ts`, `seqs`, `prevs` and `reasons` a list each or one
        value for all (pmgr/store/writer.py MovedTogether)."""
        self._persist_together(state, units, ts, seqs, prevs, reasons)
        self._changed_together(units, state)

    def _persist(self, obj, state: str, ts: float) -> None:
        """(lock held) `obj` moved to `state` (its history has it): its record goes to the
        store; a unit's with the others made while the lock is held, in one list (the
        outermost `locked()` hands it to the writer: pmgr/store/writer.py `moved`)."""
        reason = obj.reason if state in S.FINAL else None
        seq = len(obj.history) - 1  # the change's place in the object's history
        if obj.KIND != "units":
            self.writer.hist((self.uid, obj.KIND, obj.uid, state, ts, reason, seq), obj)
            return
        prev = obj.history[-2][0] if seq else None
        moves = getattr(self.firing, "moves", None)
        if moves is None:  # (no locked() around it: written on its own)
            self.writer.moved([(obj, state, ts, seq, prev, reason)])
        else:
            moves.append((obj, state, ts, seq, prev, reason))

    def _persist_together(self, state, units, ts, seqs, prevs, reasons) -> None:
        """(lock held) _persist for units that moved together (advance_together's), as
        one record."""
        rec = MovedTogether(state, units, ts, seqs, prevs, reasons)
        moves = getattr(self.firing, "moves", None)
        if moves is None:
            self.writer.moved([rec])
        else:
            moves.append(rec)

    def _changed_together(self, units: list, state: str) -> None:
        """`_changed` for each of `units` (of one manager)."""
        tl = self.firing
        if not getattr(tl, "holding", False):
            raise RuntimeError(f"{len(units)} units -> {state} outside session.locked()")
        if state in S.FINAL or (units and units[0].manager_callbacks()):
            tl.pending.extend([(u, state) for u in units])
        else:
            tl.pending.extend([(u, state) for u in units if u.callbacks])
            tl.moved = True

    def hand_moves(self) -> None:
        """(lock held) The units' changes gathered so far in this `locked()` go to the writer
        now (not at its end): what is queued after them is written after them."""
        moves = getattr(self.firing, "moves", None)
        if moves:
            self.writer.moved(moves)
            self.firing.moves = []

    @contextmanager
    def locked(self):
        """The session lock; the callbacks of what changed meanwhile run after its release."""
        tl = self.firing
        with self._lock:
            outer = not getattr(tl, "holding", False)
            if outer:
                tl.holding, tl.pending, tl.moves, tl.moved = True, [], [], False
            try:
                yield
            finally:
                if outer:
                    if tl.moves:  # (units' changes, to the store writer in one list)
                        self.writer.moved(tl.moves)
                    tl.moves = None
                    if self.releasable:
                        self._release()
                    tl.holding = False
                    pending, tl.pending = tl.pending, []
                    if pending or tl.moved:
                        tl.moved = False
                        self._cond.notify_all()
        if outer and pending:
            self.fire(pending)

    def notify(self) -> None:
        """Wake every thread in `wait` (something they wait for changed outside a record)."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        """Wait up to `timeout` s for a change (`locked()` with a record in it, or `notify`)."""
        with self._cond:
            self._cond.wait(timeout)

    def wait_until(self, predicate, deadline: float | None) -> bool:
        """Wait until `predicate()` (called with the lock held) is true: True, or False once
        time.monotonic() passes `deadline` (None: no deadline; woken at least once a second)."""
        with self._cond:
            while not predicate():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(min(left, 1.0) if left is not None else 1.0)
        return True

    def _changed(self, obj, state: str) -> None:
        """`obj` moved to `state` (lock held, inside `locked()`): its callbacks run after (a
        change nothing is called for, the object's own or its manager's, and that is not final,
        only wakes the waiters)."""
        tl = self.firing
        if not getattr(tl, "holding", False):
            raise RuntimeError(f"{obj.uid} -> {state} outside session.locked()")
        if obj.callbacks or state in S.FINAL or obj.manager_callbacks():
            tl.pending.append((obj, state))
        else:
            tl.moved = True

    def fire(self, fired: list) -> None:
        """Run callbacks for objects that changed (outside the lock): the object's own, then
        those of the manager that owns it (a unit's UnitManager, a pilot's PilotManager)."""
        ended = []
        self.firing.depth = getattr(self.firing, "depth", 0) + 1
        try:
            for obj, state in fired:
                own, theirs = obj.callbacks, obj.manager_callbacks()
                for cb in (*own, *theirs) if own else theirs:
                    try:
                        cb(obj, state)
                    except Exception:
                        log.exception("callback %r for %s failed", cb, obj.uid)
                if state in S.FINAL:
                    ended.append(obj)
                if state == S.FAILED and getattr(obj, "exit_on_error", False):
                    log.error(
                        "%s FAILED (%s) and exits on error: interrupting", obj.uid, obj.reason
                    )
                    _thread.interrupt_main()  # RP: KeyboardInterrupt in the script
        finally:
            self.firing.depth -= 1
            if ended:
                self._settle(ended)

    def _settle(self, ended: list) -> None:
        """(fire) Their final-state callbacks have run: waits count them now; a unit is
        released (its object let go of: pmgr/core/unit_table.py) once the store has its final
        state (the writer's `then`, drained by the next locked())."""
        units = []
        with self._cond:
            for obj in ended:
                obj.settled = True
                if obj.KIND == "units":
                    obj.umgr.units.settled(obj)
                    units.append(obj)
            self._cond.notify_all()
        if units:
            self.writer.then(functools.partial(self.releasable.extend, units), urgent=False)

    def _release(self) -> None:
        """(lock held) Release the units the store has the final state of."""
        lost = self.writer.unpersisted
        while self.releasable:
            unit = self.releasable.popleft()
            if unit.uid not in lost:
                unit.umgr.units.release(unit)

    def in_callback(self) -> bool:
        """Whether this thread is running callbacks: a wait there cannot wait for them."""
        return getattr(self.firing, "depth", 0) > 0
