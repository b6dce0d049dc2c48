"""RADICAL-EnTK's Pipeline: stages that run one after the other.

    p = Pipeline(); p.name = 'sim'
    p.add_stages(stage) / p.add_stages([s1, s2])   appended; a stage's post_exec may add more
    p.suspend()    no stage of it starts until resume(); what runs goes on (a stage that ends
                   meanwhile ends, and its post_exec runs)
    p.resume()     back to the state it had; it goes on with the stage it was in
Stage i starts only when stage i-1 ended (pmgr/compat/entk/processor.py).  `current_stage` is
1-based, as EnTK's.  Suspend and resume may be called from any thread (a post_exec, a thread of the
script): the workflow processor that runs the pipeline is told at once (`watch`).
"""

from __future__ import annotations

import itertools
import threading

from pilot.pmgr.compat.entk import states
from pilot.pmgr.compat.entk.errors import (
    EnTKError,
    EnTKMissingError,
    EnTKValueError,
    bad_type,
    bad_value,
    check_name,
)
from pilot.pmgr.compat.entk.stage import Stage

_COUNTER = itertools.count()


class Pipeline:
    """RADICAL-EnTK's Pipeline: stages that run one after the other (see the module's
    header).  Stage i starts only when stage i-1 ended; a stage's post_exec may add more.
    Its states: DESCRIBED -> SCHEDULING -> DONE | FAILED | CANCELED, SUSPENDED in between.
    """

    def __init__(self) -> None:
        self._uid = f"pipeline.{next(_COUNTER):04d}"
        self._name: str | None = None
        self._stages: list[Stage] = []
        self._state = states.INITIAL
        self._state_history = [states.INITIAL]
        self._index = 0  # the stage it is in (0-based); == len(stages): past the last one
        self._lock = threading.RLock()
        self._completed = threading.Event()
        self._watchers: list = []

    def __repr__(self) -> str:
        return f"<Pipeline {self.luid} {self._state}, {len(self._stages)} stages>"

    # -- EnTK's attributes -------------------------------------------------------------------
    @property
    def uid(self) -> str:
        """Its id, `pipeline.NNNN` (numbered in this process)."""
        return self._uid

    @property
    def name(self):
        """Its name (None until set): letters, digits, spaces and '.' (EnTKValueError
        otherwise, EnTKTypeError for a non-str); $Pipeline_<name>_... references use it."""
        return self._name

    @name.setter
    def name(self, value) -> None:
        self._name = check_name(f"Pipeline {self._uid}", "name", value)
        for s in self._stages:
            s.parent_pipeline = {"uid": self._uid, "name": value}

    @property
    def luid(self) -> str:
        """Its name, else its uid (what messages name it by)."""
        return self._name or self._uid

    @property
    def stages(self) -> list[Stage]:
        """Its stages, in order; setting it replaces them (as `add_stages`)."""
        return self._stages

    @stages.setter
    def stages(self, value) -> None:
        self._stages = []
        self.add_stages(value)

    @property
    def state(self) -> str:
        """Its state (pilot.entk.states: DESCRIBED, SCHEDULING, SUSPENDED, DONE, FAILED,
        CANCELED); the workflow processor sets it (EnTKValueError for another value)."""
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        if value not in states.PIPELINE_STATES:
            raise bad_value(
                f"Pipeline {self._uid}", "state", value, f"one of {states.PIPELINE_STATES}"
            )
        with self._lock:
            self._state = value
            self._state_history.append(value)
            if value in states.FINAL:
                self._completed.set()

    @property
    def state_history(self) -> list:
        """Every state it was in, in order, DESCRIBED first."""
        return self._state_history

    @property
    def lock(self):
        """Its lock (a threading.RLock), held while its state or stages change."""
        return self._lock

    @property
    def completed(self) -> bool:
        """Whether it reached a final state (DONE, FAILED or CANCELED)."""
        return self._completed.is_set()

    @property
    def current_stage(self) -> int:
        """The stage it is in, counted from 1 (EnTK's)."""
        return min(self._index + 1, len(self._stages))

    def add_stages(self, value) -> None:
        """Append a Stage, or a list of them.

        Also while it runs (from a post_exec, or another thread): the workflow processor is
        told at once.

        Args:
            value (Stage | list[Stage] | tuple[Stage, ...]): the stages.

        Raises:
            EnTKValueError: an empty list, a Stage added before (here or to another
                pipeline), or a pipeline that has ended.
            EnTKTypeError: something that is not a Stage.
        """
        stages = list(value) if isinstance(value, (list, tuple)) else [value]
        if not stages:
            raise bad_value(f"Pipeline {self._uid}", "add_stages", value, "a Stage or Stages")
        for i, s in enumerate(stages):
            if not isinstance(s, Stage):
                raise bad_type(f"Pipeline {self._uid}", f"add_stages[{i}]", s, "a Stage")
        with self._lock:
            if self._completed.is_set():  # (it would never run: the pipeline has ended)
                raise bad_value(
                    f"Pipeline {self._uid}", "add_stages", stages[0].uid,
                    f"a Stage of a pipeline that has not ended (it is {self._state})",
                )  # fmt: skip
            for i, s in enumerate(stages):  # (a Stage object runs once, in one place: again,
                owner = s.parent_pipeline.get("uid")  # its pipeline waited for ever)
                if (owner is not None and owner != self._uid) or any(
                    s is x for x in [*self._stages, *stages[:i]]
                ):
                    raise bad_value(
                        f"Pipeline {self._uid}", "add_stages", s.uid,
                        f"a Stage not added before (it is in {owner or self._uid}; a Stage "
                        "object runs once: make another)",
                    )  # fmt: skip
            for s in stages:
                s.parent_pipeline = {"uid": self._uid, "name": self._name}
                self._stages.append(s)
        self._tell()

    def suspend(self) -> None:
        """No stage of it starts until resume(); its running tasks go on.

        May be called from any thread (a post_exec, a thread of the script).

        Raises:
            EnTKError: it is suspended already, or final.
        """
        with self._lock:
            if self._state == states.SUSPENDED:
                raise EnTKError(f"suspend() called on suspended Pipeline {self._uid}")
            if self._state in states.FINAL:
                raise EnTKError(f"suspend() called on Pipeline {self._uid} in {self._state}")
            self.state = states.SUSPENDED
        self._tell()

    def resume(self) -> None:
        """Back to the state it had before suspend(); it goes on with the stage it was in.

        Raises:
            EnTKError: it is not suspended.
        """
        with self._lock:
            if self._state != states.SUSPENDED:
                raise EnTKError(
                    f"Cannot resume Pipeline {self._uid}: not suspended [{self._state}]"
                )
            before = [s for s in self._state_history if s != states.SUSPENDED]
            self.state = before[-1] if before else states.INITIAL
        self._tell()

    def as_dict(self) -> dict:
        """EnTK's dict of a pipeline.

        Returns:
            dict: `uid`, `name`, `state`, `state_history`, `completed`.
        """
        return {
            "uid": self._uid,
            "name": self._name,
            "state": self._state,
            "state_history": list(self._state_history),
            "completed": self.completed,
        }

    # -- used by the workflow processor ------------------------------------------------------
    def watch(self, callback) -> None:
        """callback() after each suspend(), resume() and add_stages() (from any thread)."""
        with self._lock:
            self._watchers.append(callback)

    def unwatch(self, callback) -> None:
        with self._lock:
            if callback in self._watchers:
                self._watchers.remove(callback)

    def _tell(self) -> None:
        with self._lock:
            watchers = list(self._watchers)
        for cb in watchers:
            cb()

    def stage_now(self) -> Stage | None:
        """The stage it is in (None: past its last one)."""
        with self._lock:
            return self._stages[self._index] if self._index < len(self._stages) else None

    def next_stage(self) -> None:
        """The stage it was in ended: on to the next one."""
        with self._lock:
            self._index += 1

    def check_runnable(self) -> None:
        if self._state != states.INITIAL:
            raise EnTKValueError(
                f"Pipeline {self._uid}: state={self._state!r} must be {states.INITIAL!r} to be "
                "run (a pipeline runs once: make a new one)"
            )
        if not self._stages:
            raise EnTKMissingError(f"Pipeline {self.luid}: stages is empty (add_stages)")
        for s in self._stages:
            s.check_runnable()
