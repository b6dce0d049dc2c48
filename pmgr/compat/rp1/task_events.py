"""What a TaskManager (pmgr/compat/rp1/tasks.py) does as its tasks change: RADICAL-Pilot 1.x's
callbacks, task timeouts, and tasks that wait for the orders before them (`tags={"order": ...}`).

`TaskEvents` is the hooks object (pmgr/core/unit_hooks.py's `UnitHooks`) the TaskManager gives
the core UnitManager it is: `on_change` is the manager's first state callback (run on the thread
that made the change, after the session lock is released, in the order of the changes), `hold`
and `release` keep ordered tasks at the client, `on_pilot_changed` fails them when no pilot is
left.  It uses the manager through its public methods and attributes only.
    TASK_STATE       cb(task, state[, cb_data]) for every change (uid=: that task's only)
    bulk callbacks   RADICAL_PILOT_BULK_CB=true|yes|1 (read when the manager is made), as RP:
                     TASK_STATE callbacks get cb(tasks[, cb_data]), once per batch of changes
                     (a batch: the changes made under the session lock at once, e.g. one
                     state message of a pilot), each task once, with no state (task.state)
    WAIT_QUEUE_SIZE  cb(tmgr, size[, cb_data]): tasks waiting at the client (not yet sent to
                     a partition), told when task states change and the size differs
    timeout          a task still not final `timeout` s after it was EXECUTING is canceled
                     (CANCELED, "timeout ..."); one timer thread per manager, made when needed
    order tags       {"ns": n, "order": k, "size": s}: held at the client (SCHEDULING) while
                     fewer tasks than its `size` have ended of an order below k in ns
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time

from pilot import states as S
from pilot.pmgr.compat.rp1.names import TASK_STATE, TMGR_METRICS, WAIT_QUEUE_SIZE
from pilot.pmgr.compat.rp1.task_description import TaskDescription

log = logging.getLogger("pmgr.tasks")


def bulk_from_env() -> bool:
    return os.environ.get("RADICAL_PILOT_BULK_CB", "").lower() in ("true", "yes", "1")


class TaskEvents:
    """A TaskManager's RP 1.x callbacks, timeouts and ordered tasks (the UnitHooks it gives
    the core UnitManager).

    Args:
        tmgr (TaskManager): the manager (made with this object as its hooks).
        session (Session): its session.
    """

    def __init__(self, tmgr, session) -> None:
        self.tmgr = tmgr
        self.session = session
        self.bulk = bulk_from_env()
        self.registered: list[tuple] = []  # (metric, cb, cb_data, uid)
        self.changed: dict = {}  # bulk: uid -> task, changed since the last batch was told
        self.queue_size: int | None = None
        self.held: list = []  # tasks waiting for the orders before them
        self.orders: dict[tuple, list[int]] = {}  # (ns, order) -> [size, ended]
        self.deadlines: list[tuple[float, str]] = []  # heap of (when, uid)
        self.timer: threading.Thread | None = None
        self.timer_cond = threading.Condition()

    # -- callbacks ----------------------------------------------------------------------------
    def register_callback(self, cb, cb_data=None, metric=None, uid: str | None = None) -> None:
        """RP 1.x's order: cb, cb_data, metric (TASK_STATE, WAIT_QUEUE_SIZE or a list), uid; a
        metric's name as the second argument is the metric (RP 0.90's order)."""
        if not callable(cb):
            raise ValueError(f"TaskManager.register_callback: cb={cb!r} must be callable")
        if metric is None and isinstance(cb_data, str) and cb_data in TMGR_METRICS:
            cb_data, metric = None, cb_data  # (RP 0.90's order: cb, metric)
        metrics = [TASK_STATE] if metric is None else metric
        for m in [metrics] if isinstance(metrics, str) else list(metrics):
            if m not in TMGR_METRICS:
                raise ValueError(
                    f"TaskManager.register_callback: metric={m!r}; accepted: {list(TMGR_METRICS)}"
                )
            if uid is not None and uid not in self.tmgr.units:
                raise ValueError(f"TaskManager.register_callback: uid={uid!r} is no task here")
            with self.session.locked():
                self.registered.append((m, cb, cb_data, uid))

    def unregister_callback(self, cb=None, metrics=None, uid: str | None = None) -> None:
        metrics = [TASK_STATE] if metrics is None else metrics
        metrics = [metrics] if isinstance(metrics, str) else list(metrics)
        with self.session.locked():
            self.registered = [
                r
                for r in self.registered
                if not (r[0] in metrics and (cb is None or r[1] is cb) and r[3] == uid)
            ]

    def on_change(self, task, state: str) -> None:
        """(UnitHooks) The manager's first state callback: timeouts, orders, RP's callbacks."""
        if state == S.EXECUTING and getattr(task.description, "timeout", None):
            self._deadline(task)
        if state in S.FINAL and self.orders:
            self._ended(task)
        if self.registered:
            self._tell(task, state)

    def _tell(self, task, state: str) -> None:
        with self.session.locked():
            registered = list(self.registered)
            batch, self.changed = (self.changed, {}) if self.bulk else ({}, self.changed)
            size = len(self.tmgr.pending) + len(self.held)
            told, self.queue_size = self.queue_size, size
        for metric, cb, data, uid in registered:
            if metric == WAIT_QUEUE_SIZE:
                if size != told:
                    _call(cb, (self.tmgr, size), data)
            elif not self.bulk:
                if uid is None or uid == task.uid:
                    _call(cb, (task, state), data)
            elif batch:
                tasks = [t for t in batch.values() if uid is None or t.uid == uid]
                if tasks:
                    _call(cb, (tasks,), data)

    def note_change(self, task) -> None:
        """(session lock held: Task.advance) `task` changed: it goes with the next batch."""
        if self.bulk:
            self.changed[task.uid] = task

    # -- ordered tasks ------------------------------------------------------------------------
    def know_orders(self, descs: list) -> dict:
        """(before they are queued) The orders of these tasks exist: those above wait.
        Returns the orders known before (to set back if the tasks are not made after all)."""
        with self.session.locked():
            before = {k: list(v) for k, v in self.orders.items()}
            for d in descs:
                order = d.tags.get("order")
                if order is not None:
                    entry = self.orders.setdefault(_order_key(order), [0, 0])
                    entry[0] = max(entry[0], order["size"])
        return before

    def hold(self, unit) -> bool:
        """(UnitHooks, lock held) A task of an order that may not start yet is held here."""
        d = unit.description
        ordered = self.orders and isinstance(d, TaskDescription)  # (no orders: no look)
        order = d.peek("tags").get("order") if ordered else None
        if order is not None and not self._may_start(order):
            self.held.append(unit)
            return True
        return False

    def release(self, unit) -> bool:
        """(UnitHooks, lock held) A task not sent is canceled: let go of it if held here."""
        if unit in self.held:
            self.held.remove(unit)
            return True
        return False

    def _may_start(self, order: dict) -> bool:
        ns, k = _order_key(order)
        return all(e[1] >= e[0] for (n, j), e in self.orders.items() if n == ns and j < k)

    def _ended(self, task) -> None:
        d = task.description
        order = d.peek("tags").get("order") if isinstance(d, TaskDescription) else None
        if order is None:
            return
        with self.session.locked():
            self.orders[_order_key(order)][1] += 1
            ready = [u for u in self.held if self._may_start(u.description.tags["order"])]
            for unit in ready:
                self.held.remove(unit)
                self.tmgr.enqueue(unit)
            if ready:
                self.tmgr.routing.route()

    def on_pilot_changed(self, pilot) -> None:
        """(UnitHooks, lock held) With no live pilot left, the tasks held wait for nothing."""
        pilots = self.tmgr.pilots
        if self.held and pilots and all(p.final for p in pilots):
            now = time.time()
            for unit in self.held:
                unit.advance(S.FAILED, now, "no live pilot is left to run it")
            self.held.clear()

    # -- timeouts -----------------------------------------------------------------------------
    def _deadline(self, task) -> None:
        with self.timer_cond:
            heapq.heappush(self.deadlines, (time.monotonic() + task.description.timeout, task.uid))
            if self.timer is None:
                self.timer = threading.Thread(target=self._time, name="task-timeouts", daemon=True)
                self.timer.start()
            self.timer_cond.notify()

    def _time(self) -> None:
        while not self.session.closed:
            with self.timer_cond:
                now = time.monotonic()
                due = []
                while self.deadlines and self.deadlines[0][0] <= now:
                    due.append(heapq.heappop(self.deadlines)[1])
                if not due:
                    wait = self.deadlines[0][0] - now if self.deadlines else 1.0
                    self.timer_cond.wait(min(wait, 1.0))
                    continue
            for uid in due:
                task = self.tmgr.units.live.get(uid)  # (a released one is final)
                if task is not None and not task.final:
                    why = f"timeout: still running {task.description.timeout:g} s after it started"
                    self.tmgr.cancel_units([uid], reason=why)


def _order_key(order: dict) -> tuple:
    return (repr(order["ns"]), order["order"])


def _call(cb, args: tuple, data) -> None:
    try:
        cb(*args) if data is None else cb(*args, data)
    except Exception:
        log.exception("callback %r failed", cb)
