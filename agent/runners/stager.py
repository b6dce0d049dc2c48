"""The sandbox stager: unit sandboxes for the spawn loop, made ahead of it where that is slow.

A unit runs in its sandbox directory (the pilot sandbox / unit uid, or the `sandbox` it names).
Most units (their own sandbox, no input staging) get it at `take`, on the agent's main thread,
with one rename: of a spare (the sandbox of an earlier unit that left it empty, once
agent/runners/spares.py finds it safe) or else of a fresh directory the worker thread made
ahead in PILOT_SANDBOX/.fresh.<agent pid>/.  A new directory costs a new inode, 100-700 us of
kernel time on the disks measured here, a rename about 20 us; a hand-off to a thread per unit
cost more than the rename (three context switches a unit, measured).  Only units with
pilot-side input staging or a named (shared) sandbox are staged by the worker thread, ahead of
use, in the order they came; a unit directory that any unit names as its sandbox is never a
spare from then on (it would be moved or removed under that unit).  Spares left after IDLE
seconds without a take are removed, so a unit that leaves nothing in its sandbox leaves no
directory behind; one that wrote anything keeps its directory and files as they are.  Output
files are not made here: agent/runners/streams.py makes them when the unit writes.

Protocol (all but the worker run on the agent's main thread):
    submit(unit)   a unit arrived: one to stage is queued (at most DEPTH staged ahead of use)
    take(unit)     its sandbox path, waiting (bounded) if the worker has not got to it yet;
                   raises OSError when its sandbox could not be made (StagingError: input
                   staging failed)
    drop(unit)     the unit will not run here (canceled, or handed back): what the worker
                   made and staged for it stays (nothing was made for a unit that is not staged)
    recycle(path)  an empty sandbox of a unit that ended: a spare, if it is still empty
    untake(path)   a sandbox taken for a unit that will not run here: removed if empty
    tick(now)      (about once a second) the spares go when nothing was taken for IDLE s
Staged units are staged in the order submitted; the agent takes them in the same (FIFO) order.
The worker keeps FRESH_LOW..FRESH_HIGH fresh directories once a take found none, refilled when
asked (one wake-up per FRESH_HIGH - FRESH_LOW takes at most).
Interface: Stager (agent/runners/base.py).
"""

from __future__ import annotations

import errno
import os
import queue
import signal
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from pilot.agent.runners.spares import SparePool, remove_empty
from pilot.agent.unit_command import stage_in
from pilot.sandbox import sandbox_of
from pilot.staging import StagingError

if TYPE_CHECKING:
    from pilot.unit_record import UnitRecord

DEPTH = 64
TAKE_TIMEOUT = 30.0
IDLE = 1.0  # seconds without a take after which the spares are removed
FRESH_LOW, FRESH_HIGH = 16, 64
_REFILL = "refill"
_ASYNC_SIGNALS = {
    signal.SIGCHLD,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGALRM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGPIPE,
}


class _Job:
    """A unit the worker thread stages: what it made (`result`: the sandbox path or the
    OSError) once it has; `dropped` when the unit will not run here after all."""

    __slots__ = ("unit", "result", "dropped")

    def __init__(self, unit) -> None:
        self.unit, self.dropped = unit, False
        self.result: str | OSError | None = None


def _staged(unit: dict) -> bool:
    """Whether the unit's sandbox is made by the worker thread (slow or shared)."""
    return bool(unit.get("stage_in") or unit.get("sandbox"))


class SandboxStager:
    def __init__(self, root: str) -> None:
        self.root = root
        self.cond = threading.Condition()
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.waiting: deque[dict] = deque()  # submitted, not handed to the worker yet
        self.jobs: dict[str, _Job] = {}  # uid -> handed to the worker, not taken or dropped
        self.ahead = 0  # handed to the worker and not taken or dropped yet
        self.made = self.reused = 0
        self.spares = SparePool(root)  # main thread only
        self.named: set[str] = set()  # unit directories a unit named as its sandbox
        self.fresh_dir = os.path.join(root, f".fresh.{os.getpid()}")
        self.fresh: deque[str] = deque()  # worker appends, main thread pops
        self.fresh_count = 0  # (worker) names given so far
        self.refilling = False
        self.last_take = time.monotonic()
        self.thread = threading.Thread(target=self._work, name="agent-stager", daemon=True)
        self.thread.start()  # (fresh directories only once a take found none: a partition
        # that runs a few units costs no inodes it does not use, at start or at its end)

    # -- main thread ----------------------------------------------------------------------------
    def submit(self, unit: dict) -> None:
        if _staged(unit):
            if unit.get("sandbox"):
                self._named(sandbox_of(self.root, unit))
            self.waiting.append(unit)
            self._feed()

    def _named(self, path: str) -> None:
        """A unit names `path` as its sandbox: the unit directory it is (or lies in) is never
        a spare from now on (it would be moved or removed under that unit)."""
        rel = os.path.relpath(path, self.root)
        if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
            return  # the pilot sandbox itself, or outside it: no spare is ever that
        top = os.path.join(self.root, rel.split(os.sep)[0])
        if top not in self.named:
            self.named.add(top)
            self.spares.forget(top)

    def take(self, unit: UnitRecord) -> str:
        self.last_take = time.monotonic()
        taken, unit.taken_sandbox = unit.taken_sandbox, None
        if taken is not None:  # taken ahead for a lane that ran dry (runners/lanes.py)
            return taken
        if not _staged(unit):
            return self._quick(sandbox_of(self.root, unit))
        job = self.jobs.get(unit["uid"])
        if job is None:  # not handed to the worker yet: stage it now
            if unit in self.waiting:
                self.waiting.remove(unit)
            job = self._hand(unit)
        with self.cond:
            if not self.cond.wait_for(lambda: job.result is not None, TAKE_TIMEOUT):
                job.dropped = True
                del self.jobs[unit["uid"]]
                self.ahead -= 1
                self._feed()
                raise OSError(f"sandbox not ready after {TAKE_TIMEOUT:g} s")
            result = job.result
        assert result is not None  # (the wait above ended on a result)
        del self.jobs[unit["uid"]]
        self.ahead -= 1
        self._feed()
        if isinstance(result, StagingError):
            raise result
        if isinstance(result, OSError):
            raise OSError(f"cannot make its sandbox: {result}")
        return result

    def _quick(self, sandbox: str) -> str:
        if sandbox in self.named:  # a unit named it (as this one's uid): never renamed onto
            self._make(sandbox)
            return sandbox
        try:
            if self.spares.take(sandbox):
                self.reused += 1
                return sandbox
        except FileExistsError:
            return sandbox  # there already, with what is in it (a unit run again): used as is
        while self.fresh:
            fresh = self.fresh.popleft()
            if len(self.fresh) < FRESH_LOW:
                self._refill()
            try:
                os.rename(fresh, sandbox)
            except FileNotFoundError:
                continue  # (the pilot sandbox itself was removed: mkdir below says so)
            except OSError as exc:
                self.fresh.appendleft(fresh)
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    return sandbox  # there already (see above)
                raise OSError(f"cannot make its sandbox: {exc}") from None
            self.made += 1
            return sandbox
        self._refill()
        try:
            self._make(sandbox)
        except OSError as exc:
            raise OSError(f"cannot make its sandbox: {exc}") from None
        return sandbox

    def _refill(self) -> None:
        if not self.refilling:
            self.refilling = True
            self.todo.put(_REFILL)

    def _feed(self) -> None:
        while self.waiting and self.ahead < DEPTH:
            self._hand(self.waiting.popleft())

    def _hand(self, unit) -> _Job:
        """Give the unit to the worker thread to stage."""
        job = self.jobs[unit["uid"]] = _Job(unit)
        self.ahead += 1
        self.todo.put(job)
        return job

    def drop(self, unit: dict) -> None:
        if not _staged(unit):
            return  # nothing was made for it yet
        job = self.jobs.pop(unit["uid"], None)
        if job is None:
            if unit in self.waiting:
                self.waiting.remove(unit)
            return
        with self.cond:
            job.dropped = True  # what the worker made and staged for it stays
        self.ahead -= 1
        self._feed()

    def recycle(self, sandbox: str) -> None:
        if sandbox not in self.named:
            self.spares.add(sandbox)

    def untake(self, sandbox: str) -> None:
        """A sandbox taken for a unit that will not run here after all (canceled, or handed
        back to run in another partition, which makes its own at the same path): removed if
        still empty, never a spare of this agent (it would be renamed under that unit)."""
        remove_empty(sandbox)

    def tick(self, now: float) -> None:
        if now - self.last_take > IDLE:
            self.spares.trim()

    def summary(self) -> str:
        return (
            f"made {self.made}, reused {self.reused} left empty by earlier units "
            f"({self.spares.scans} scans for processes working in them)"
        )

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(5.0)
        self.spares.trim()
        if not self.thread.is_alive():
            while self.fresh:
                remove_empty(self.fresh.popleft())
            remove_empty(self.fresh_dir)

    # -- worker thread --------------------------------------------------------------------------
    def _make(self, sandbox: str) -> None:
        self.made += 1
        try:
            os.mkdir(sandbox)
        except FileExistsError:
            return
        except FileNotFoundError:
            os.makedirs(sandbox, exist_ok=True)
        if self.spares.mode is None:
            self.spares.mode = os.stat(sandbox).st_mode & 0o7777

    def _fill(self) -> None:
        try:
            os.makedirs(self.fresh_dir, mode=0o700, exist_ok=True)
            while len(self.fresh) < FRESH_HIGH:
                path = os.path.join(self.fresh_dir, str(self.fresh_count))
                self.fresh_count += 1
                os.mkdir(path)
                if self.spares.mode is None:
                    self.spares.mode = os.stat(path).st_mode & 0o7777
                self.fresh.append(path)
        except OSError:
            pass  # (the main thread makes its own then, and says what failed)
        finally:
            self.refilling = False

    def _work(self) -> None:
        # signals go to the main thread: a SIGCHLD per unit that ends woke this one (measured:
        # 0.9 context switches and 22 us a unit)
        signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
        while True:
            job = self.todo.get()
            if job is None:
                return
            if job is _REFILL:
                self._fill()
                continue
            unit = job.unit
            sandbox = sandbox_of(self.root, unit)
            result: str | OSError
            try:
                os.makedirs(sandbox, exist_ok=True)  # units may share a sandbox they name
                stage_in(self.root, sandbox, unit)  # its pilot-side input steps
                result = sandbox
            except OSError as exc:
                result = exc
            with self.cond:
                if not job.dropped:
                    job.result = result
                self.cond.notify_all()
