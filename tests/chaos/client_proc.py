"""A client process of a seed (tests/chaos/client.py) as the runner sees it: its stdout's JSON
lines read as they come, its stdin for commands, its end noticed; killed by pid.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess

from pilot import processes


class Client:
    """A tests.chaos.client process: its stdout's JSON lines, its stdin for commands."""

    seq = itertools.count()

    def __init__(self, argv: list[str], env: dict, cwd: str, errors, role: str) -> None:
        self.n = next(Client.seq)
        self.role = role
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, cwd=cwd, env=env
        )
        self.buf = b""
        self.ready = False
        self.killed = False  # by the runner: its end is no finding
        self.released = False
        self.finished: dict | None = None
        self.errors: list[str] = []
        self.deposed_at: float | None = None  # taken over: by when it must have gone
        self.asked_to_finish = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def read(self) -> list[dict]:
        try:
            data = os.read(self.proc.stdout.fileno(), 65536)
        except OSError:
            data = b""
        if not data:
            return []
        *lines, self.buf = (self.buf + data).split(b"\n")
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"ev": "noise", "text": line.decode(errors="replace")[:300]})
        return out

    def send(self, cmd: dict) -> bool:
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def kill(self) -> None:
        self.killed = True
        if self.alive():
            processes.signal_process(self.pid, signal.SIGKILL)

    def reap(self, timeout: float = 30.0) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
