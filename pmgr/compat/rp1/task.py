"""RADICAL-Pilot 1.x's Task: a unit (pmgr/core/handles.py) with RP 1.x's names and semantics, made
by the TaskManager (pmgr/compat/rp1/tasks.py).  What differs from a Unit: wait() returns the state
when its timeout passes (no TimeoutError) and a state counts once the task is in it or past it;
register_callback takes RP 1.x's order (cb, cb_data, metric); as_dict has RP 1.x's keys; `pilot` is
the Pilot (RP 1.x: its uid, as as_dict()['pilot'] is here); `partition` is the uid of the partition
it ran in (RP 1.x: an index).
"""

from __future__ import annotations

import os

import pilot.states as S
from pilot.pmgr.compat.rp1.names import TASK_STATE
from pilot.pmgr.core import Unit

_ORDER = S.UNIT_ORDER


def wanted_states(state) -> list[str] | None:
    """The states that count as `state` reached (RP 1.x: it or any later one)."""
    if state is None:
        return None
    given = [state] if isinstance(state, str) else list(state)
    least = min((_ORDER.get(s, len(_ORDER)) for s in given), default=len(_ORDER))
    return sorted({s for s, i in _ORDER.items() if i >= least} | set(given) | S.FINAL)


class Task(Unit):
    """RADICAL-Pilot 1.x's Task: a unit with RP 1.x's names.  Made by
    `TaskManager.submit_tasks` (not directly).

    What differs from a Unit: `wait()` returns the state when its timeout passes (no
    TimeoutError) and a state counts once the task is in it or past it; `register_callback`
    takes RP 1.x's order (cb, cb_data, metric); `as_dict` has RP 1.x's keys; `pilot` is the
    Pilot (RP 1.x: its uid, as `as_dict()['pilot']` is here); `partition` is the uid of the
    partition it ran in (RP 1.x: an index).
    """

    origin = "client"
    TOGETHER = False  # (its `advance` notes each change for bulk callbacks)
    virtual = False  # True: no process runs it (a Raptor or its worker, pmgr/compat/rp1/raptor.py)

    @property
    def mode(self) -> str:
        """Its description's `mode` (rp.TASK_EXECUTABLE, rp.TASK_FUNCTION, ...)."""
        return self.description.mode

    @property
    def tmgr(self):
        """Its TaskManager."""
        return self.umgr

    @property
    def task_sandbox(self) -> str | None:
        """Its sandbox (`Unit.sandbox`; RP 1.x's name); None until it was sent to a pilot."""
        return self.sandbox

    @property
    def partition(self) -> str | None:
        """The uid of the partition it was sent to (RP 1.x: an index)."""
        return self.part

    @property
    def exception_detail(self) -> str | None:
        """A failed function task's traceback (what it wrote on stderr)."""
        return self.stderr if self.exception else None

    @property
    def session_sandbox(self) -> str | None:
        """The directory its pilot's sandbox is in (None until it was sent to a pilot)."""
        return self.pilot.session_sandbox if self.pilot else None

    @property
    def resource_sandbox(self) -> str | None:
        """The directory the session sandbox is in (None until it was sent to a pilot)."""
        return self.pilot.resource_sandbox if self.pilot else None

    endpoint_fs = "file://localhost/"
    info: dict = {}

    @property
    def output_files(self) -> list[str] | None:
        """The files the task left in its sandbox besides its inputs and its stdout / stderr
        (RP's: found the same way, so files it changed in place are not told); None before
        it is final or when its sandbox is not on this machine's file systems."""
        box = self.sandbox
        if not self.final or box is None or self.description.function is not None:
            return None
        try:
            names = os.listdir(box)
        except OSError:
            return None
        inputs = {os.path.basename(d["target"].rstrip("/")) for d in self.description.input_staging}
        outputs = {self.description.stdout or "STDOUT", self.description.stderr or "STDERR"}
        left = [n for n in names if n not in inputs | outputs and not n.startswith(self.uid + ".")]
        return sorted(left)

    def advance(self, state: str, ts: float, reason: str | None) -> bool:
        """`Unit.advance` (the session's delivery thread calls it), and the change is noted
        for the TaskManager's bulk callbacks (pmgr/compat/rp1/task_events.py).

        Args:
            state (str): the state to move to (states skipped on the way are filled in).
            ts (float): when (time.time()).
            reason (str | None): why, for a final state.

        Returns:
            bool: False if it was in `state` already.

        Raises:
            IllegalTransition: a move the unit state machine does not allow (nothing
                changed).
        """
        moved = super().advance(state, ts, reason)
        if moved:
            self.umgr.note_change(self)  # (bulk callbacks: pmgr/compat/rp1/task_events.py)
        return moved

    # (RP 1.x's order of arguments, not the base's RP 0.90 one: the override is on purpose)
    def register_callback(self, cb, cb_data=None, metric=None) -> None:  # type: ignore[override]
        """RP 1.x's order: cb(task, state), or cb(task, state, cb_data).

        Args:
            cb (callable): the callback; it runs on the thread that delivers states.
            cb_data (object): passed to `cb` as its last argument when not None.
            metric (str | None): rp.TASK_STATE (or None), the one metric.

        Raises:
            ValueError: another `metric`, or a `cb` that is not callable.
        """
        super().register_callback(cb, None if metric in (None, TASK_STATE) else metric, cb_data)

    def wait(self, state=None, timeout: float | None = None) -> str:
        """Until the task is in `state` (or past it) or final; at `timeout`, its state then.

        Args:
            state (str | list[str] | None): the state(s) to wait for; None: a final one.
            timeout (float | None): seconds; None waits as long as it takes.

        Returns:
            str: its state when the wait ended (also when `timeout` passed).

        Raises:
            RuntimeError: called in a state callback (the thread that delivers states).
        """
        try:
            return super().wait(wanted_states(state), timeout)
        except TimeoutError:
            return self.state

    def as_dict(self) -> dict:
        """RP 1.x's keys."""
        out = super().as_dict()
        pilot = self.pilot
        return {
            "type": "task",
            "tmgr": self.umgr.uid,
            "uid": self.uid,
            "name": self.name,
            "state": self.state,
            "origin": self.origin,
            "exit_code": self.exit_code,
            "stdout": out["stdout"],
            "stderr": out["stderr"],
            "return_value": self.return_value,
            "exception": self.exception,
            "exception_detail": self.exception_detail,
            "pilot": pilot.uid if pilot else None,
            "endpoint_fs": self.endpoint_fs,
            "resource_sandbox": self.resource_sandbox,
            "session_sandbox": self.session_sandbox,
            "pilot_sandbox": self.pilot_sandbox,
            "task_sandbox": self.sandbox,
            "client_sandbox": self.client_sandbox,
            "info": dict(self.info),
            "slots": self.slots,
            "partition": self.part,
            "description": out["description"],
        }

    @property
    def client_sandbox(self) -> str:
        """The directory the TaskManager was made in (RP 1.x's client sandbox)."""
        return self.umgr.client_dir
