"""File-system work off the bootstrap's loop: a write that hangs delays no message.

A pilot sandbox lives on whatever file system the site gives it (NFS, Lustre, GPFS), where a
write can take seconds, or a minute under load; the bootstrap's loop routes every message of
the pilot, and its nodes' heartbeats, so it must never wait on one.  Two threads do that work:

    LogWriter   the bootstrap's log handler: a line is formatted on the caller's thread and
                queued (a deque); a thread of its own writes the queue to the log (fd 2,
                PILOT_SANDBOX/bootstrap.log), as much as it has at a time.  At most
                MAX_LINES wait: past that the oldest are dropped and counted, and a line says
                how many once the file takes writes again.  `close(timeout)` waits, bounded,
                for the queue to be written.
    OffLoop     file jobs (the boot files control.json, network.json, daemons.json; data
                staging chunks, partition/client/data_port.py) run in order on a thread of its own;
                `run(job, done)`: `done(result)` is called back on the loop (its `fd` is
                polled: readable when results wait; `finish()` runs their callbacks).  A job
                that raises gives `done` the exception.  `wait(timeout)`, `close(timeout)`
                wait, bounded: bring-up gives the boot files BOOT_FILES_WAIT s before it says
                hello (the `pilot` CLI and the tests read them), the loop never waits.
What stays on the loop: reading an agent's start journal when it died
(partition/agents/channel.py), the zygote's log opened when a zygote is replaced, /proc reads (no
file system that blocks).  Agent configs are written by the forked child or the node daemon that
starts the agent (agent/zygote.py, agent/node/daemon.py).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time

MAX_LINES = 100_000  # log lines kept while the log cannot be written (~15 MB)


class LogWriter(logging.Handler):
    def __init__(self, fd: int = 2) -> None:
        super().__init__()
        self.fd = fd
        self.lines: collections.deque[str] = collections.deque()
        self.dropped = 0
        self.wake = threading.Condition()
        self.busy = False  # the thread is writing what it took
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="bootstrap-log", daemon=True)
        self.thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:  # noqa: BLE001 (logging's own rule: a bad record never raises)
            self.handleError(record)
            return
        with self.wake:
            if len(self.lines) >= MAX_LINES:
                self.lines.popleft()
                self.dropped += 1
            self.lines.append(line)
            self.wake.notify()

    def _run(self) -> None:
        while True:
            with self.wake:
                while not self.lines and not self.closed:
                    self.busy = False
                    self.wake.notify_all()
                    self.wake.wait()
                if not self.lines:
                    self.busy = False
                    self.wake.notify_all()
                    return
                text = "".join(self.lines)
                self.lines.clear()
                dropped, self.dropped = self.dropped, 0
                self.busy = True
            if dropped:
                text = f"[{dropped} log line(s) dropped: the log could not be written]\n" + text
            data = text.encode(errors="replace")
            try:
                while data:
                    data = data[os.write(self.fd, data) :]
            except OSError:  # (a full disk: the lines are lost, the pilot is not)
                pass

    def close(self, timeout: float = 2.0) -> None:
        """Write what waits (within `timeout` s: a log that hangs keeps nobody)."""
        deadline = time.monotonic() + timeout
        with self.wake:
            self.closed = True
            self.wake.notify_all()
            while (self.lines or self.busy) and time.monotonic() < deadline:
                self.wake.wait(max(0.0, deadline - time.monotonic()))
        super().close()


class OffLoop:
    def __init__(self) -> None:
        self.jobs: collections.deque = collections.deque()
        self.results: collections.deque = collections.deque()
        self.wake = threading.Condition()
        self.pending = 0  # jobs queued or running
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self.fd = self.r  # (polled by the loop)
        self.thread = threading.Thread(target=self._run, name="bootstrap-files", daemon=True)
        self.thread.start()

    def run(self, job, done=None) -> None:
        """`job()` on the file thread, in order; then `done(result)` on the loop (finish())."""
        with self.wake:
            self.jobs.append((job, done))
            self.pending += 1
            self.wake.notify()

    def _run(self) -> None:
        while True:
            with self.wake:
                while not self.jobs:
                    self.wake.wait()
                job, done = self.jobs.popleft()
            if job is None:
                return
            try:
                result = job()
            except Exception as exc:  # noqa: BLE001 (handed to `done`, which says what it means)
                result = exc
            with self.wake:
                self.pending -= 1
                if done is not None:
                    self.results.append((done, result))
                self.wake.notify_all()
            if done is not None:
                try:
                    os.write(self.w, b"x")
                except BlockingIOError:  # (the loop has bytes to read already)
                    pass

    def finish(self) -> None:
        """(the loop) The callbacks of the jobs done so far."""
        try:
            while os.read(self.r, 4096):
                pass
        except BlockingIOError:
            pass
        while self.results:
            done, result = self.results.popleft()
            done(result)

    def wait(self, timeout: float) -> bool:
        """Until the jobs queued so far are done (bounded); True if they are."""
        deadline = time.monotonic() + timeout
        with self.wake:
            while self.pending and time.monotonic() < deadline:
                self.wake.wait(max(0.0, deadline - time.monotonic()))
            return not self.pending

    def close(self, timeout: float = 2.0) -> bool:
        """Wait (bounded) for the jobs queued to be done, their callbacks run; True if all
        were.  The thread ends after them."""
        done = self.wait(timeout)
        with self.wake:
            self.jobs.append((None, None))
            self.wake.notify_all()
        self.finish()
        return done
