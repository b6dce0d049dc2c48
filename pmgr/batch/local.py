"""The `local` batch system: the pilot job is a process tree on this machine.

The bootstrap runs in a new session (its own process group), so cancel and kill reach it and
the agents it started; units run in process groups of their own and are ended by their agents.
The BatchJob interface is in pmgr/batch/__init__.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from pilot import processes


class LocalJob:
    def __init__(self, proc: subprocess.Popen, log_path: str) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def cancel(self) -> None:
        processes.signal_group(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        processes.signal_group(self.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def describe(self) -> str:
        """The end of the job's output: what a person needs when it failed."""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return ""
        return " | ".join(lines[-5:])


class FollowedJob:
    """A local pilot job another client process started (an attach): its process, by pid,
    taken for the pilot's while it lives and has the session in its environment (a pid used
    again by another process is not it).  Its exit code is its parent's to know: an ended job
    polls as 1, and `describe` says so."""

    def __init__(self, pid: int, session_uid: str, log_path: str) -> None:
        self.pid = pid
        self.marker = f"PILOT_SESSION_ID={session_uid}".encode()
        self.log_path = log_path

    def _alive(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    return False
            with open(f"/proc/{self.pid}/environ", "rb") as f:
                return self.marker in f.read().split(b"\0")
        except OSError:
            return False

    def poll(self) -> int | None:
        return None if self._alive() else 1

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self._alive():
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return 1

    def cancel(self) -> None:
        if self._alive():
            processes.signal_group(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self._alive():
            processes.signal_group(self.pid, signal.SIGKILL)

    def describe(self) -> str:
        state = "running" if self._alive() else "ended (its exit code is its parent's)"
        return f"process {self.pid}, started by another client, {state} | " + LocalJob.describe(
            self  # type: ignore[arg-type]
        )


def follow(job_id, sandbox: str, session_uid: str, rcfg=None) -> FollowedJob | None:
    """A Follower (pmgr/batch/__init__.py): the local job of pid `job_id` (None: no pid)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        return None
    return FollowedJob(job_id, session_uid, os.path.join(sandbox, "bootstrap.log"))


def submit(argv: list[str], env: dict, sandbox: str, **_batch) -> LocalJob:
    """A Submitter (pmgr/batch/__init__.py): nodes, runtime, queue, project are not used."""
    log_path = os.path.join(sandbox, "bootstrap.log")
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=sandbox,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return LocalJob(proc, log_path)
