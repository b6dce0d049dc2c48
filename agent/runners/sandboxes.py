"""The sandbox stager: unit sandboxes prepared ahead of the spawn loop, in a thread of the agent.

A unit runs in its sandbox directory (the pilot sandbox / unit uid, or the `sandbox` it names).
Making a directory costs an inode, 100-700 us of kernel time on the disks measured here (about
what starting /bin/true costs) when the inode is new, and about 40 us when it reuses one freed
just before.  So a sandbox its unit left empty (no output, no files, nothing of it still
running; agent/runners/local.py decides) is removed as the unit ends (`remove`, done on this
thread), and the next directory made takes its inode.  A unit that leaves nothing in its sandbox
leaves no directory behind; one that wrote anything keeps its directory and files as they are.
(Directories are never renamed for reuse: whatever still holds one, a detached process working
in it or its mode, would follow it into a stranger's sandbox; removed, it is gone.)  Output
files are not made here: agent/runners/streams.py makes them when the unit writes.

Protocol (all but the worker run on the agent's main thread):
    submit(unit)   queue the unit for staging; at most DEPTH units are staged ahead of use
    take(unit)     its sandbox path, waiting (bounded) if the worker has not got to it yet;
                   raises OSError when its sandbox could not be made (StagingError: input
                   staging failed)
    drop(unit, remove)  the unit will not run here (canceled; handed back: remove=False, as the
                   partition it goes to may be making the same directory now)
    remove(path)   an empty sandbox of a unit that ended: removed if still empty
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


class SandboxStager:
    def __init__(self, root: str) -> None:
        self.root = root
        self.cond = threading.Condition()
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.waiting: deque[dict] = deque()  # submitted, not handed to the worker yet
        self.ahead = 0  # handed to the worker and not taken or dropped yet
        self.made = self.removed = 0
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
        self.made += 1
        try:
            os.mkdir(sandbox)
        except FileExistsError:
            pass
        except FileNotFoundError:
            os.makedirs(sandbox, exist_ok=True)

    def _work(self) -> None:
        while True:
            unit = self.todo.get()
            if unit is None:
                return
            if isinstance(unit, str):  # a sandbox to remove
                self.removed += _remove_empty(unit)
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
                    self.removed += _remove_empty(result)
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
            self.remove(result)
        self.ahead -= 1
        self._feed()

    def remove(self, sandbox: str) -> None:
        self.todo.put(sandbox)

    def summary(self) -> str:
        return f"made {self.made}, removed {self.removed} left empty"

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(5.0)


def _remove_empty(path: str) -> int:
    try:
        os.rmdir(path)  # only when empty: what anything put there stays
        return 1
    except OSError:
        return 0
