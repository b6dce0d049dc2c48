"""The sandbox stager: unit sandboxes prepared ahead of the spawn loop, in a thread of the agent.

A unit runs in its sandbox directory (the pilot sandbox / unit uid, or the `sandbox` it names).
Making a directory costs an inode, 100-700 us of kernel time on the disks measured here (about
what starting /bin/true costs), so directories are reused: a sandbox its unit left empty (no
output, no files, nothing of it still running; agent/runners/local.py decides) is `recycle`d,
and the next unit's sandbox is that directory renamed (about 10 us) instead of a new one.  So a
unit that leaves nothing in its sandbox leaves no directory behind; one that wrote anything keeps
its directory and files as they are.  Spares are removed when nothing was staged for IDLE
seconds, and when the agent ends.  Its output files are not made here: agent/runners/streams.py
makes them when the unit writes.

Protocol (all but the worker run on the agent's main thread):
    submit(unit)   queue the unit for staging; at most DEPTH units are staged ahead of use
    take(unit)     its sandbox path, waiting (bounded) if the worker has not got to it yet;
                   raises OSError when its sandbox could not be made (StagingError: input
                   staging failed)
    drop(unit)     the unit will not run (canceled, handed back): an empty sandbox is reused
    recycle(path)  an empty sandbox of a unit that ended: the next one made is this, renamed
Units are staged in the order submitted; the agent takes them in the same (FIFO) order.
Interface: Stager (agent/runners/base.py).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque

from agent.command import sandbox_of, stage_in
from pilot.staging import StagingError

DEPTH = 64
TAKE_TIMEOUT = 30.0
SPARE_MAX = 1024  # empty directories kept for reuse; more are removed
IDLE = 0.1  # seconds without a unit to stage after which the spares are removed


class SandboxStager:
    def __init__(self, root: str) -> None:
        self.root = root
        self.cond = threading.Condition()
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.waiting: deque[dict] = deque()  # submitted, not handed to the worker yet
        self.ahead = 0  # handed to the worker and not taken or dropped yet
        self.spares: deque[str] = deque()  # empty sandboxes to rename (appended by any thread)
        self.made = self.reused = 0
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
        if shared:  # units may share a sandbox they name: made once, never reused
            os.makedirs(sandbox, exist_ok=True)
            return
        while self.spares:
            try:
                os.rename(self.spares.popleft(), sandbox)
                self.reused += 1
                return
            except IndexError:
                break
            except OSError:
                continue  # gone, or the name is taken: try the next, or make one
        self.made += 1
        try:
            os.mkdir(sandbox)
        except FileExistsError:
            pass
        except FileNotFoundError:
            os.makedirs(sandbox, exist_ok=True)

    def _work(self) -> None:
        while True:
            try:
                unit = self.todo.get(timeout=IDLE)
            except queue.Empty:  # nothing to stage: spares are not kept waiting
                while self.spares:
                    try:
                        _remove_empty(self.spares.popleft())
                    except IndexError:
                        break
                continue
            if unit is None:
                return
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
                elif isinstance(result, str) and not (unit.get("sandbox") or unit.get("stage_in")):
                    self.recycle(result)
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

    def drop(self, unit: dict) -> None:
        if not unit.get("_staging"):
            if unit in self.waiting:
                self.waiting.remove(unit)
            return
        with self.cond:
            unit["_dropped"] = True
            result = unit.pop("_io", None)
        if isinstance(result, str) and not unit.get("sandbox") and not unit.get("stage_in"):
            self.recycle(result)
        self.ahead -= 1
        self._feed()

    def recycle(self, sandbox: str) -> None:
        if len(self.spares) < SPARE_MAX:
            self.spares.append(sandbox)
        else:
            _remove_empty(sandbox)

    def summary(self) -> str:
        return f"made {self.made}, reused {self.reused} (left empty by earlier units)"

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(5.0)
        while self.spares:  # named after units that ended and left nothing: not kept
            _remove_empty(self.spares.popleft())


def _remove_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass  # not empty after all (something wrote into it late): it stays
