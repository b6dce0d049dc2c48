"""The sandbox stager: unit sandboxes prepared ahead of the spawn loop, in a thread of the agent.

A unit runs in its sandbox directory (the pilot sandbox / unit uid, or the `sandbox` it names).
A sandbox its unit left empty (no output, no files, nothing of its process groups still running;
agent/runners/local.py decides) is handed back (`recycle`) and becomes a spare, which a later
unit's sandbox may be, renamed, once agent/runners/spares.py finds it safe: a new directory
costs a new inode, 100-700 us of kernel time on the disks measured here.  Spares left after
IDLE seconds without work are removed, so a unit that leaves nothing in its sandbox leaves no
directory behind; one that wrote anything keeps its directory and files as they are.  Output
files are not made here: agent/runners/streams.py makes them when the unit writes.

Protocol (all but the worker run on the agent's main thread):
    submit(unit)   queue the unit for staging; at most DEPTH units are staged ahead of use
    take(unit)     its sandbox path, waiting (bounded) if the worker has not got to it yet;
                   raises OSError when its sandbox could not be made (StagingError: input
                   staging failed)
    drop(unit, remove)  the unit will not run here (canceled: its empty sandbox is recycled;
                   handed back, remove=False: left, the partition it goes to may be making the
                   same directory now)
    recycle(path)  an empty sandbox of a unit that ended: a spare, if it is still empty
Units are staged in the order submitted; the agent takes them in the same (FIFO) order.
Interface: Stager (agent/runners/base.py).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque

from agent.command import sandbox_of, stage_in
from agent.runners.spares import SparePool
from pilot.staging import StagingError

DEPTH = 64
TAKE_TIMEOUT = 30.0
IDLE = 1.0  # seconds without work after which the spares are removed


class SandboxStager:
    def __init__(self, root: str) -> None:
        self.root = root
        self.cond = threading.Condition()
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.waiting: deque[dict] = deque()  # submitted, not handed to the worker yet
        self.ahead = 0  # handed to the worker and not taken or dropped yet
        self.made = self.reused = 0
        self.spares = SparePool(root)  # touched by the worker thread only
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

    def _make(self, sandbox: str, shared: bool) -> None:
        if shared:  # units may share a sandbox they name
            os.makedirs(sandbox, exist_ok=True)
            return
        if self.spares.take(sandbox):
            self.reused += 1
            return
        self.made += 1
        try:
            os.mkdir(sandbox)
        except FileExistsError:
            return
        except FileNotFoundError:
            os.makedirs(sandbox, exist_ok=True)
        if self.spares.mode is None:
            self.spares.mode = os.stat(sandbox).st_mode & 0o7777

    def _work(self) -> None:
        while True:
            try:
                unit = self.todo.get(timeout=IDLE)
            except queue.Empty:  # idle: the spares go, a quiet unit leaves no directory
                self.spares.trim()
                continue
            if unit is None:
                return
            if isinstance(unit, str):  # an empty sandbox of a unit that ended
                self.spares.add(unit)
                continue
            sandbox = sandbox_of(self.root, unit)
            try:
                self._make(sandbox, bool(unit.get("sandbox")))
                stage_in(self.root, sandbox, unit)  # its pilot-side input steps
                result = sandbox
            except OSError as exc:
                result = exc
            with self.cond:
                if not unit.get("_dropped"):
                    unit["_io"] = result
                elif isinstance(result, str) and unit.get("_remove") and not unit.get("sandbox"):
                    self.spares.add(result)
                self.cond.notify_all()

    def take(self, unit: dict) -> str:
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

    def drop(self, unit: dict, remove: bool = True) -> None:
        if not unit.get("_staging"):
            if unit in self.waiting:
                self.waiting.remove(unit)
            return
        with self.cond:
            unit["_dropped"] = True
            unit["_remove"] = remove
            result = unit.pop("_io", None)
        if isinstance(result, str) and remove and not unit.get("sandbox"):
            self.recycle(result)
        self.ahead -= 1
        self._feed()

    def recycle(self, sandbox: str) -> None:
        self.todo.put(sandbox)

    def summary(self) -> str:
        return f"made {self.made}, reused {self.reused} left empty by earlier units"

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(5.0)
        if not self.thread.is_alive():
            self.spares.close()
