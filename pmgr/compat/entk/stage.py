"""RADICAL-EnTK's Stage: a set of tasks that may run at the same time, and what runs when they
all ended (post_exec); plus this project's partitions per stage.

    s = Stage(); s.name = 'simulate'
    s.add_tasks(task) / s.add_tasks([t1, t2])   tasks: a set (no order among them)
    s.post_exec = callable                      called, with no arguments, in run()'s thread
                                                once every task of the stage ended; it may add
                                                stages or tasks, suspend or resume pipelines
Beyond EnTK (partitions of the pilot, README "Coming from EnTK"):
    s.partition = 'analyse'       its tasks run in the pilot's partition(s) of that name (a
                                  name, or a list of names: tasks spread over them by cores)
    s.reconfig = {'stop': 'simulate', 'start': [rp.ComputePartitionDescription(...)]}
                                  done when the stage starts, before its tasks are submitted:
                                  the live partitions of those names stop, the new ones start
Its states are pmgr/compat/entk/states.py's; pmgr/compat/entk/processor.py moves them.
"""

from __future__ import annotations

import itertools

from pilot.pmgr.compat.entk import partitions, states
from pilot.pmgr.compat.entk.errors import (
    EnTKMissingError,
    EnTKValueError,
    bad_type,
    bad_value,
    check_name,
)
from pilot.pmgr.compat.entk.task import Task

_COUNTER = itertools.count()


class Stage:
    """RADICAL-EnTK's Stage: a set of tasks that may run at the same time, and what runs
    when they all ended (post_exec); plus this project's partitions per stage (see the
    module's header).  Its states: DESCRIBED -> SCHEDULING -> SCHEDULED -> DONE | FAILED |
    CANCELED.
    """

    def __init__(self) -> None:
        self._uid = f"stage.{next(_COUNTER):04d}"
        self._name: str | None = None
        self._tasks: set[Task] = set()
        self._state = states.INITIAL
        self._state_history = [states.INITIAL]
        self._p_pipeline = {"uid": None, "name": None}
        self._post_exec = None
        self._partition: list[str] | None = None
        self._reconfig: dict | None = None

    def __repr__(self) -> str:
        return f"<Stage {self.luid} {self._state}, {len(self._tasks)} tasks>"

    # -- EnTK's attributes -------------------------------------------------------------------
    @property
    def uid(self) -> str:
        """Its id, `stage.NNNN` (numbered in this process)."""
        return self._uid

    @property
    def name(self):
        """Its name (None until set): letters, digits, spaces and '.' (EnTKValueError
        otherwise, EnTKTypeError for a non-str); $Pipeline_..._Stage_<name>_... references
        use it."""
        return self._name

    @name.setter
    def name(self, value) -> None:
        self._name = check_name(f"Stage {self._uid}", "name", value)
        for t in self._tasks:
            t.parent_stage = {"uid": self._uid, "name": value}

    @property
    def luid(self) -> str:
        """`<pipeline name or uid>.<its name or uid>` (what messages name it by)."""
        p = self._p_pipeline
        return f"{p['name'] or p['uid']}.{self._name or self._uid}"

    @property
    def tasks(self) -> set:
        """Its tasks (a set: no order among them); setting it replaces them (as
        `add_tasks`)."""
        return self._tasks

    @tasks.setter
    def tasks(self, value) -> None:
        self._tasks = set()
        self.add_tasks(value)

    @property
    def state(self) -> str:
        """Its state (pilot.entk.states: DESCRIBED, SCHEDULING, SCHEDULED, DONE, FAILED,
        CANCELED); the workflow processor sets it (EnTKValueError for another value)."""
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        if value not in states.STAGE_STATES:
            raise bad_value(f"Stage {self._uid}", "state", value, f"one of {states.STAGE_STATES}")
        self._state = value
        self._state_history.append(value)

    @property
    def state_history(self) -> list:
        """Every state it was in, in order, DESCRIBED first."""
        return self._state_history

    @property
    def parent_pipeline(self) -> dict:
        """{'uid', 'name'} of its pipeline (both None until it is added to one); set by
        Pipeline.add_stages (EnTKTypeError for a non-dict)."""
        return self._p_pipeline

    @parent_pipeline.setter
    def parent_pipeline(self, value: dict) -> None:
        if not isinstance(value, dict):
            raise bad_type(f"Stage {self._uid}", "parent_pipeline", value, "{'uid', 'name'}")
        self._p_pipeline = value
        for t in self._tasks:
            t.parent_pipeline = dict(value)

    @property
    def post_exec(self):
        """A callable (or None), called with no arguments in run()'s thread once every
        task of the stage ended; it may add stages or tasks, suspend or resume pipelines,
        reconfigure partitions.  What it raises ends run() with EnTKError.  Set to a
        non-callable: EnTKTypeError."""
        return self._post_exec

    @post_exec.setter
    def post_exec(self, value) -> None:
        if value is not None and not callable(value):
            raise bad_type(f"Stage {self._uid}", "post_exec", value, "a callable (or None)")
        self._post_exec = value

    def add_tasks(self, value) -> None:
        """Add a Task, or a list or set of them (a task already here is kept once).

        Args:
            value (Task | list[Task] | tuple[Task, ...] | set[Task]): the tasks.

        Raises:
            EnTKValueError: an empty collection, a Task of another stage, or two Tasks of one
                uid.
            EnTKTypeError: something that is not a Task.
        """
        tasks = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
        if not tasks:
            raise bad_value(f"Stage {self._uid}", "add_tasks", value, "a Task or Tasks")
        for i, t in enumerate(tasks):
            if not isinstance(t, Task):
                raise bad_type(f"Stage {self._uid}", f"add_tasks[{i}]", t, "a Task")
        mine = {t.uid: t for t in self._tasks}
        for t in tasks:  # (a Task object runs once, in one stage: in two, the second stage
            owner = t.parent_stage.get("uid")  # waited for it for ever)
            if owner is not None and owner != self._uid:
                raise bad_value(
                    f"Stage {self._uid}", "add_tasks", t.uid,
                    f"a Task of no other stage (it is in {owner}; a Task object runs once: "
                    "make another)",
                )  # fmt: skip
            if mine.setdefault(t.uid, t) is not t:  # (two of one uid: one was dropped)
                raise bad_value(
                    f"Stage {self._uid}", "add_tasks", t.uid, "Tasks of unique uids in a stage"
                )
        for t in tasks:
            self._tasks.add(t)
            t.parent_stage = {"uid": self._uid, "name": self._name}
            t.parent_pipeline = dict(self._p_pipeline)

    def as_dict(self) -> dict:
        """EnTK's dict of a stage.

        Returns:
            dict: `uid`, `name`, `state`, `state_history`, `parent_pipeline`.
        """
        return {
            "uid": self._uid,
            "name": self._name,
            "state": self._state,
            "state_history": list(self._state_history),
            "parent_pipeline": dict(self._p_pipeline),
        }

    # -- partitions (this project's) ---------------------------------------------------------
    @property
    def partition(self):
        """The partition name(s) its tasks run in (None: any partition of the pilot).

        Set to a name or a list of names (this project's, beyond EnTK): its tasks spread
        over the pilot's live partitions of those names by their cores; a name no live
        partition has when the stage starts is an EnTKValueError then.
        """
        p = self._partition
        return p[0] if p is not None and len(p) == 1 else p

    @partition.setter
    def partition(self, value) -> None:
        self._partition = partitions.names(f"Stage {self._uid}", "partition", value)

    @property
    def partition_names(self) -> list[str] | None:
        return self._partition

    @property
    def reconfig(self) -> dict | None:
        """{'stop': [names], 'start': [ComputePartitionDescription]}, done as the stage starts.

        Done when the stage starts, before its tasks are submitted: the live partitions of
        those names stop, the new ones start (a dict of a description's fields is taken
        too).  None: nothing.
        """
        return self._reconfig

    @reconfig.setter
    def reconfig(self, value) -> None:
        self._reconfig = partitions.reconfig_spec(f"Stage {self._uid}", value)

    # -- used by the workflow processor ------------------------------------------------------
    def ordered_tasks(self) -> list[Task]:
        """Its tasks in the order they were made (the order they are submitted in)."""
        return sorted(self._tasks, key=lambda t: t.seq)

    def ended(self) -> bool:
        return all(t.state in states.FINAL for t in self._tasks)

    def check_runnable(self) -> None:
        if self._state != states.INITIAL:
            raise EnTKValueError(
                f"Stage {self._uid}: state={self._state!r} must be {states.INITIAL!r} to be run"
            )
        if not self._tasks:
            raise EnTKMissingError(f"Stage {self.luid}: tasks is empty (add_tasks)")
        for t in self._tasks:
            t.check_runnable()
