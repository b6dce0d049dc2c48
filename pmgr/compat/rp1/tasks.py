"""RADICAL-Pilot 1.x's TaskManager and Task: the UnitManager and Unit with RP 1.x's names and
semantics, so an RP 1.x script runs with `import pilot as rp`.

A task is a unit.  submit_tasks turns each TaskDescription into the description it runs with
(pmgr/compat/rp1/task_form.py), with the task's uid (task.NNNNNN unless it names one) and what needs
this manager: colocation (the first task of a `colocate` key), a pilot's named environments
(pmgr/compat/rp1/named_envs.py), a Raptor's partition (pmgr/compat/rp1/raptor.py), a pilot's
partition by index. Tasks with a priority are sent higher first (the call's tasks are submitted in
that order and the client's queue is kept in it: pmgr/core/unit_submit.py `enqueue`).  What else
differs from a UnitManager (RP 1.x's semantics):
    wait_tasks / Task.wait   return the states when the timeout passes (no TimeoutError); a
                             state counts once the task is in it or past it
    register_callback        cb(task, state[, cb_data]) for TASK_STATE, on one task with uid=;
                             cb(tmgr, size[, cb_data]) for WAIT_QUEUE_SIZE (tasks waiting at the
                             client, told when task states change); with RADICAL_PILOT_BULK_CB
                             set, TASK_STATE callbacks get cb(tasks[, cb_data]): the tasks that
                             changed in one batch (pmgr/compat/rp1/task_events.py)
    timeout                  a task still running `timeout` s after it started is CANCELED
    tags order               a task waits at the client (SCHEDULING) until the tasks of the
                             orders before it in its ns ended
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast

from pilot.pmgr.compat.rp1 import raptor
from pilot.pmgr.compat.rp1.names import RAPTOR_MASTER, RAPTOR_WORKER
from pilot.pmgr.compat.rp1.pilots import RPPilot
from pilot.pmgr.compat.rp1.task import Task, wanted_states
from pilot.pmgr.compat.rp1.task_description import RawTaskDescription, TaskDescription
from pilot.pmgr.compat.rp1.task_events import TaskEvents
from pilot.pmgr.compat.rp1.task_form import unit_form
from pilot.pmgr.core import UnitHooks, UnitList, UnitManager

if TYPE_CHECKING:
    from pilot.pmgr.core import Unit

__all__ = ["Task", "TaskManager"]


class TaskManager(UnitManager):
    """RADICAL-Pilot 1.x's TaskManager: a UnitManager whose units are Tasks, submitted from
    TaskDescriptions, with RP 1.x's names and semantics (so an RP 1.x script runs with
    `import pilot as rp`).

    What differs from a UnitManager: `wait_tasks` and `Task.wait` return the states when the
    timeout passes (no TimeoutError), a state counting once the task is in it or past it;
    `register_callback` takes TASK_STATE (on one task with uid=) and WAIT_QUEUE_SIZE (with
    RADICAL_PILOT_BULK_CB set, TASK_STATE callbacks get the tasks that changed in a batch); a
    task still running `timeout` s after it started is CANCELED; tasks with a priority are
    sent higher first; `tags={"order": ...}` holds a task at the client until the orders
    before it in its namespace ended.  Task uids are task.NNNNNN unless a description names
    its own (unique in the session).

    Args:
        session (Session): the session the tasks belong to.
        cfg (str): RP's TaskManager config: "default" (the only one here; None too).
        scheduler (str | None): rp.SCHEDULER_ROUND_ROBIN (default) or
            rp.SCHEDULER_BACKFILLING, as for a UnitManager.

    Raises:
        ValueError: another `cfg`, or an unknown `scheduler`.
    """

    UNIT = Task
    DESCRIPTION = RawTaskDescription  # (unset fields None, as the system reads them)
    UID_PREFIX = "task"

    def __init__(self, session, cfg: str = "default", scheduler: str | None = None) -> None:
        # (the arguments: the class docstring)
        if cfg not in ("default", None):
            raise ValueError(f"TaskManager: cfg={cfg!r}: only 'default' is known here")
        # RP's callbacks, timeouts, ordered tasks: the core manager's hooks (unit_hooks.py)
        events = self._task_events = TaskEvents(self, session)
        hooks: UnitHooks = events  # (the core's one seam for a face: pmgr/core/unit_hooks.py)
        super().__init__(session, scheduler, hooks=hooks)
        self.uid = session.ids.next_uid("tmgr")
        self.client_dir = os.getcwd()  # RP's client sandbox
        self.colocation: dict[str, str] = {}  # colocate key -> the uid of its first task
        self.raptors: dict = {}  # uid -> Raptor (pmgr/compat/rp1/raptor.py)
        for uid in self.units:  # (an attached session's: new uids go on after theirs)
            session.ids.seen_uid(self.UID_PREFIX, uid)

    # -- callbacks (pmgr/compat/rp1/task_events.py) -------------------------------------------
    # (RP 1.x's argument order, not UnitManager's: the override is incompatible on purpose)
    def register_callback(  # type: ignore[override]
        self, cb, cb_data=None, metric=None, uid: str | None = None
    ) -> None:
        """RP 1.x's order: cb, cb_data, metric (TASK_STATE, WAIT_QUEUE_SIZE or a list), uid; a
        metric's name as the second argument is the metric (RP 0.90's order).

        TASK_STATE: `cb(task, state[, cb_data])` after every change (with RADICAL_PILOT_BULK_CB
        set, `cb(tasks[, cb_data])` once per batch); WAIT_QUEUE_SIZE: `cb(tmgr, size[,
        cb_data])` when the number of tasks waiting at the client changed.

        Args:
            cb (callable): the callback; it runs on the thread that delivers states.
            cb_data (object): passed to `cb` as its last argument when not None.
            metric (str | list[str] | None): rp.TASK_STATE (None too), rp.WAIT_QUEUE_SIZE, or
                a list of them.
            uid (str | None): TASK_STATE of this task only.

        Raises:
            ValueError: a `cb` that is not callable, another metric, or a uid that is no task
                of this manager.
        """
        self._task_events.register_callback(cb, cb_data, metric, uid)

    def unregister_callback(self, cb=None, metrics=None, uid: str | None = None) -> None:
        """Undo register_callback: of `cb` (all callbacks when None) for `metrics` (None:
        TASK_STATE) and `uid`.

        Args:
            cb (callable | None): the callback as registered; None: all of them.
            metrics (str | list[str] | None): the metric(s); None: rp.TASK_STATE.
            uid (str | None): the uid it was registered with (None: those registered without).
        """
        self._task_events.unregister_callback(cb, metrics, uid)

    def note_change(self, task) -> None:
        """(session lock held: Task.advance) `task` changed: it goes with the next batch of
        bulk callbacks."""
        self._task_events.note_change(task)

    # -- tasks --------------------------------------------------------------------------------
    def submit_tasks(self, descriptions, lazy: bool = False, window: int | None = None):
        """Submit one TaskDescription (returns a Task) or a list (returns a list, in order);
        RAPTOR_MASTER / RAPTOR_WORKER descriptions go to submit_raptors / submit_workers.  Any
        other iterable (a generator) is pulled while fewer than `window` tasks are in flight,
        as submit_units does: the list of its tasks, or with lazy=True a UnitStream at once.

        Args:
            descriptions (TaskDescription | dict | list | Iterable): the tasks; a dict is
                made a TaskDescription.
            lazy (bool): True: return a UnitStream at once (a list too); its errors are
                raised by `stream.wait()`.
            window (int | None): tasks of this manager in flight while an iterable is
                pulled; None: 20,000.

        Returns:
            Task | list[Task] | UnitStream: a Task for one description; the tasks in order
                for a list or an iterable; a UnitStream with lazy=True.

        Raises:
            ValueError: a description that is not a TaskDescription or that RP's rules or a
                unit's refuse (naming its index), a uid already taken, a named environment,
                Raptor or partition index this manager does not have, or something that is
                not an iterable; none of a list's tasks is made then.
            StoreUnavailable: the store could not hand out task ids for 60 s (a full disk).
        """
        if isinstance(descriptions, (TaskDescription, dict)):
            return self._submit_tasks([descriptions])[0]
        if isinstance(descriptions, (list, tuple)) and not lazy:
            return UnitList.of(self, self._submit_tasks(list(descriptions)))
        if not hasattr(descriptions, "__iter__"):
            raise ValueError(
                f"submit_tasks: {descriptions!r} must be a TaskDescription or an iterable of them"
            )
        return self.stream(descriptions, self._submit_tasks, lazy, window)

    def make_tasks(self, descriptions: list) -> list[Task]:
        """submit_tasks for the layers on top (EnTK): a list of descriptions submitted, the
        Task objects themselves back (the caller holds them).

        Args:
            descriptions (list[TaskDescription | dict]): the tasks.

        Returns:
            list[Task]: the tasks, in order.

        Raises:
            ValueError: as submit_tasks.
        """
        return self._submit_tasks(list(descriptions))

    def _submit_tasks(self, descs: list) -> list:
        """(submit_tasks) A list of descriptions, all checked before any task is made; read
        raw from here on (unset fields None: pmgr/compat/rp1/task_reads.py)."""
        for i, d in enumerate(descs):
            if isinstance(d, dict):
                d = TaskDescription(d)
            if not isinstance(d, TaskDescription):
                raise ValueError(f"submit_tasks: descriptions[{i}]={d!r} must be a TaskDescription")
            descs[i] = d.raw()
        if any(d.mode in (RAPTOR_MASTER, RAPTOR_WORKER) for d in descs):
            return [self._submit_raptor_task(d) for d in descs]
        forms = self._forms(descs)
        order = list(range(len(forms)))
        if any(f.priority for f in forms):  # higher first, else in order (a stable sort)
            order.sort(key=lambda i: -forms[i].priority)
        known = self._task_events.know_orders(forms)
        try:
            units = self.make_units([forms[i] for i in order])
        except ValueError:
            self._task_events.orders = known  # (none of them was made)
            raise
        tasks: list[Unit | None] = [None] * len(units)
        for i, unit in zip(order, units):
            tasks[i] = unit
        return tasks

    def _forms(self, descs: list) -> list:
        """The descriptions the tasks run with (pmgr/compat/rp1/task_form.py); colocation keys are
        kept once the call cannot fail any more."""
        call = _Call(self)
        self.session.ids.reserve_uids(self.UID_PREFIX, sum(d.uid is None for d in descs))
        forms = []
        for i, d in enumerate(descs):
            try:
                error = d.refused()
                if error:
                    raise ValueError(error)
                form = unit_form(d, call.uid_for(d), call)
                error = form.submit_error()  # (a unit's rules, on the form it runs in)
                if error:
                    raise ValueError(error)
            except ValueError as exc:
                raise ValueError(f"submit_tasks: descriptions[{i}]: {exc}") from None
            forms.append(form)
        self.colocation.update(call.colocation)
        return forms

    def _submit_raptor_task(self, d: TaskDescription):
        if d.mode == RAPTOR_MASTER:
            return self.submit_raptors([d], d.pilot)[0]
        return self.submit_workers([d])[0]

    def get_tasks(self, uids=None):
        """The tasks (all when uids is None); a released task is made again from the store.

        Args:
            uids (str | list[str] | None): one uid (returns its Task), a list, or None (all).

        Returns:
            Task | list[Task]: the task, or the tasks in the order asked.

        Raises:
            ValueError: a uid this manager does not know.
        """
        if isinstance(uids, str):
            return self.get_units([uids])[0]
        return self.get_units(uids)

    def list_tasks(self) -> list[str]:
        """The uids of this manager's tasks, in the order they were made."""
        return self.list_units()

    def wait_tasks(self, uids=None, state=None, timeout: float | None = None):
        """Until the tasks (all when uids is None) are in `state` or past it, or final; the
        states (one for a uid), also when `timeout` passed first.

        Args:
            uids (str | list[str] | None): one uid, a list, or None (all).
            state (str | list[str] | None): RP 1.x's state name(s) to wait for; None: a final
                one.
            timeout (float | None): seconds; None waits as long as it takes.

        Returns:
            str | list[str]: the task's state (for one uid) or the tasks' states, in order.

        Raises:
            ValueError: a uid this manager does not know.
        """
        many = not isinstance(uids, str)
        tasks = self.get_units(uids)
        try:
            self.wait_units([t.uid for t in tasks], wanted_states(state), timeout)
        except TimeoutError:
            pass
        states = [t.state for t in tasks]
        return states if many else states[0]

    def cancel_tasks(self, uids=None) -> None:
        """Cancel tasks (all when uids is None): `cancel_units`.

        Args:
            uids (str | list[str] | None): which tasks; None: all of this manager's.

        Raises:
            ValueError: a uid this manager does not know.
        """
        self.cancel_units(uids)

    def cancel_units(self, uids=None, reason: str = "canceled by the user") -> None:
        """As a UnitManager's; a Raptor (or its worker) named or included stops its partition.

        Args:
            uids (str | list[str] | None): which tasks; None: all of this manager's.
            reason (str): the tasks' `reason` in the CANCELED state.

        Raises:
            ValueError: a uid this manager does not know.
        """
        # (cast: this manager's units are its UNIT, Task)
        tasks = [t for t in cast("list[Task]", self.get_units(uids)) if not t.final]
        super().cancel_units([t.uid for t in tasks if not t.virtual], reason)
        for t in tasks:
            if t.virtual:
                t.cancel()

    # -- pilots and raptors -------------------------------------------------------------------
    def add_pilots(self, pilots) -> None:
        """Route tasks to these pilots too (UnitManager.add_pilots); an RP 1.x pilot
        (`rp.PilotManager`'s) knows this manager as its `tmgr` from then on.

        Args:
            pilots (Pilot | list[Pilot]): the pilots.

        Raises:
            ValueError: a pilot another manager uses.
        """
        super().add_pilots(pilots)
        for p in pilots if isinstance(pilots, (list, tuple)) else [pilots]:
            if isinstance(p, RPPilot):
                p.tmgr = self

    def submit_raptors(self, descriptions, pilot_id: str | None = None) -> list:
        """Raptor masters (pmgr/compat/rp1/raptor.py) on pilot `pilot_id` (None: the only pilot).

        Args:
            descriptions (TaskDescription | list[TaskDescription]): RAPTOR_MASTER
                descriptions.
            pilot_id (str | None): the pilot's uid; None: this manager's only pilot.

        Returns:
            list[Raptor]: a Raptor per description, in order.

        Raises:
            ValueError: `pilot_id` names none of this manager's pilots (or None with more
                than one); a description that is not a master's, sets fields that run code
                of its own, or a `named_env` other than "rp"; a uid already taken.
        """
        return raptor.submit_raptors(self, descriptions, pilot_id)

    def submit_workers(self, descriptions) -> list:
        """Raptor workers, each in the partition of the Raptor its `raptor_id` names
        (`Raptor.submit_workers`).

        Args:
            descriptions (TaskDescription | list[TaskDescription]): RAPTOR_WORKER
                descriptions, each with a `raptor_id`.

        Returns:
            list[Task]: a Task per worker, in order.

        Raises:
            ValueError: a `raptor_id` that is no Raptor of this manager (naming the known
                ones).
        """
        descs = descriptions if isinstance(descriptions, (list, tuple)) else [descriptions]
        out = []
        for d in descs:
            master = self.raptors.get(d.raptor_id)
            if master is None:
                raise ValueError(
                    f"submit_workers: raptor_id={d.raptor_id!r} is no Raptor of {self.uid}; "
                    f"known: {sorted(self.raptors)}"
                )
            out += master.submit_workers([d])
        return out

    def pilot_rpc(self, pid: str, cmd: str, *args, **kwargs):
        """RP 1.x's pilot RPC: not here (its commands are RP's own agent's); always raises.

        Args:
            pid (str): the pilot's uid.
            cmd (str): the command.
            *args (object): its arguments.
            **kwargs (object): its keyword arguments.

        Raises:
            ValueError: always, naming `cmd`.
        """
        raise ValueError(f"TaskManager.pilot_rpc({cmd!r}): a pilot's RPC commands are RP's own")


class _Call:
    """The TaskContext (pmgr/compat/rp1/task_form.py) of one submit_tasks call: the manager's, plus
    the call's own colocation keys and uids (named and generated) until the call is through."""

    def __init__(self, tmgr: TaskManager) -> None:
        self.tmgr = tmgr
        self.colocation: dict[str, str] = {}
        self.uids: set[str] = set()

    def uid_for(self, d: TaskDescription) -> str:
        """Its task's uid: the one it names (refused if taken), else the next generated one
        that no task has (a user may have named one `task.000007` before it came up)."""
        tmgr = self.tmgr
        uid = d.uid
        if uid is None:
            while True:
                uid = tmgr.session.ids.next_uid(tmgr.UID_PREFIX, 6)
                if uid not in self.uids and uid not in tmgr.units:
                    self.uids.add(uid)  # (a later one of this call may not name it)
                    return uid
        if uid in tmgr.units or uid in self.uids:
            raise ValueError(f"uid={uid!r} is taken: a task's uid is unique in its session")
        self.uids.add(uid)
        return uid

    def colocated(self, key: str, uid: str) -> str | None:
        first = self.tmgr.colocation.get(key) or self.colocation.setdefault(key, uid)
        return None if first == uid else first

    def partition_of(self, index: int, pilot: str | None) -> str:
        pilots = [p for p in self.tmgr.pilots if pilot is None or p.uid == pilot]
        if len(pilots) != 1:
            raise ValueError(
                f"partition={index} is an index of a pilot's partitions: give pilot= (this "
                f"manager has {len(self.tmgr.pilots)} pilots) or the partition's uid"
            )
        parts = pilots[0].partitions
        if index >= len(parts):
            raise ValueError(f"partition={index}: {pilots[0].uid} has {len(parts)} partition(s)")
        return parts[index].uid

    def env_lines(self, name: str, pilot: str | None) -> tuple[list[str], str | None]:
        pilots = [p for p in self.tmgr.pilots if pilot is None or p.uid == pilot]
        have = [p for p in pilots if isinstance(p, RPPilot) and p.env_lines(name) is not None]
        if not have:
            raise ValueError(
                f"named_env={name!r} is not prepared on {[p.uid for p in pilots]}; call "
                "pilot.prepare_env(name, spec) first ('rp' is the pilot's own Python)"
            )
        pin = None if len(have) == len(self.tmgr.pilots) else have[0].uid
        lines = have[0].env_lines(name)
        assert lines is not None  # (have: the pilots with lines for it)
        return lines, pin

    def raptor_partition(self, raptor_id: str) -> str:
        master = self.tmgr.raptors.get(raptor_id)
        if master is None:
            raise ValueError(f"raptor_id={raptor_id!r} is no Raptor of {self.tmgr.uid}")
        return master.partition_uid()
