"""The sandbox stager: unit sandboxes prepared ahead of the spawn loop, in a thread of the agent.

Creating a unit's sandbox directory and its STDOUT/STDERR files costs file-system round trips
(measured here: 0.1-1 ms per unit, depending on what the disk is doing).  Done inside
posix_spawn, it would stall the agent for every unit; done here, it overlaps with spawning.

Protocol (all but the worker run on the agent's main thread):
    submit(unit)   queue the unit for staging; at most DEPTH units are staged ahead of use
    take(unit)     (sandbox, out_fd, err_fd), waiting (bounded) if the worker has not got to
                   it yet; raises OSError when its sandbox could not be made
    drop(unit)     the unit will not run (canceled, handed back): its fds are closed
Units are staged in the order submitted; the agent takes them in the same (FIFO) order.
Interface: Stager (agent/runners/base.py).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque

from agent.command import output_names, sandbox_of, stage_in
from pilot.staging import StagingError

DEPTH = 256
TAKE_TIMEOUT = 30.0
# O_APPEND: the ranks of a unit share these files; every write lands whole at the end
_OUT = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC


class SandboxStager:
    def __init__(self, root: str) -> None:
        self.root = root
        self.cond = threading.Condition()
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.waiting: deque[dict] = deque()  # submitted, not handed to the worker yet
        self.ahead = 0  # handed to the worker and not taken or dropped yet
        self.thread = threading.Thread(target=self._work, name="agent-stager", daemon=True)
        self.thread.start()

    def submit(self, unit: dict) -> None:
        self.waiting.append(unit)
        self._feed()

    def _feed(self) -> None:
        while self.waiting and self.ahead < DEPTH:
            unit = self.waiting.popleft()
            unit["_staging"] = True
            self.ahead += 1
            self.todo.put(unit)

    def _work(self) -> None:
        while True:
            unit = self.todo.get()
            if unit is None:
                return
            sandbox = sandbox_of(self.root, unit)
            out_name, err_name = output_names(unit)
            try:
                os.makedirs(sandbox, exist_ok=True)
                stage_in(self.root, sandbox, unit)  # its pilot-side input steps
                out = os.open(os.path.join(sandbox, out_name), _OUT, 0o666)  # the umask decides
                try:
                    err = os.open(os.path.join(sandbox, err_name), _OUT, 0o666)
                except OSError:
                    os.close(out)
                    raise
                result = (sandbox, out, err)
            except OSError as exc:
                result = exc
            with self.cond:
                if unit.get("_dropped"):
                    _close(result)
                else:
                    unit["_io"] = result
                self.cond.notify_all()

    def take(self, unit: dict):
        if not unit.get("_staging"):  # not handed to the worker yet: stage it now
            if unit in self.waiting:
                self.waiting.remove(unit)
            unit["_staging"] = True
            self.ahead += 1
            self.todo.put(unit)
        with self.cond:
            if not self.cond.wait_for(lambda: "_io" in unit, TAKE_TIMEOUT):
                unit["_dropped"] = True
                self.ahead -= 1
                self._feed()
                raise OSError(f"sandbox not ready after {TAKE_TIMEOUT:g} s")
            result = unit.pop("_io")
        self.ahead -= 1
        self._feed()
        if isinstance(result, StagingError):
            raise result
        if isinstance(result, OSError):
            raise OSError(f"cannot make its sandbox: {result}")
        return result

    def drop(self, unit: dict) -> None:
        if not unit.get("_staging"):
            if unit in self.waiting:
                self.waiting.remove(unit)
            return
        with self.cond:
            unit["_dropped"] = True
            result = unit.pop("_io", None)
        if result is not None:
            _close(result)
        self.ahead -= 1
        self._feed()

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(5.0)


def _close(result) -> None:
    if isinstance(result, tuple):
        os.close(result[1])
        os.close(result[2])
