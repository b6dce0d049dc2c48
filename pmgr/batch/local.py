"""The `local` batch system: the pilot job is a process tree on this machine.

The bootstrap runs in a new session (its own process group), so cancel and kill reach it and
the agents it started; units run in process groups of their own and are ended by their agents.
The BatchJob interface is in pmgr/batch/__init__.py.
"""

from __future__ import annotations

import os
import signal
import subprocess

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
