"""Starting agents through the agent zygote (agent/zygote.py), from the bootstrap's side.

`AgentLauncher.spawn()` sends the zygote one request line and returns an `AgentProc` at once;
its pid arrives with the zygote's answer.  The bootstrap registers `launcher.fd` in its poller
and calls `launcher.on_readable()`; `AgentProc.poll()` then reports the agent's exit code.
Waits are bounded: `AgentProc.wait(timeout)` reads the zygote's reports until the agent exits
or the time is up.  If the zygote itself dies, it is started again on the next spawn.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time

log = logging.getLogger("bootstrap.launch")


class AgentProc:
    def __init__(self, launcher: AgentLauncher, cfg_path: str) -> None:
        self.launcher = launcher
        self.cfg_path = cfg_path
        self.pid: int | None = None
        self.code: int | None = None
        self.kill_when_started = False

    def poll(self) -> int | None:
        return self.code

    def kill(self) -> None:
        if self.pid is None:
            self.kill_when_started = True
        elif self.code is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.code is None and time.monotonic() < deadline:
            self.launcher.read(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.code


class AgentLauncher:
    def __init__(self, env: dict | None = None) -> None:
        self.env = env
        self.zygote: subprocess.Popen | None = None
        self.by_cfg: dict[str, AgentProc] = {}
        self.by_pid: dict[int, AgentProc] = {}
        self._buf = b""
        self._start()

    def _start(self) -> None:
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "agent.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            close_fds=True,
        )
        os.set_blocking(self.zygote.stdout.fileno(), False)
        log.info("agent zygote started, pid %d", self.zygote.pid)

    @property
    def fd(self) -> int:
        return self.zygote.stdout.fileno()

    def spawn(self, cfg_path: str, log_path: str) -> AgentProc:
        if self.zygote.poll() is not None:
            log.error("agent zygote exited with %s; starting another", self.zygote.returncode)
            self._start()
        proc = AgentProc(self, cfg_path)
        self.by_cfg[cfg_path] = proc
        line = json.dumps({"cfg": cfg_path, "log": log_path}) + "\n"
        try:
            self.zygote.stdin.write(line.encode())
            self.zygote.stdin.flush()
        except BrokenPipeError as exc:
            raise OSError(f"agent zygote is gone: {exc}") from None
        return proc

    def read(self, timeout: float = 0.0) -> None:
        """Take whatever the zygote has said (waiting up to `timeout` for something)."""
        if timeout > 0:
            select.select([self.fd], [], [], timeout)
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        if not data:
            return
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            self._on_line(json.loads(line))

    on_readable = read

    def _on_line(self, msg: dict) -> None:
        if "started" in msg:
            proc = self.by_cfg.pop(msg["started"], None)
            if proc is not None:
                proc.pid = msg["pid"]
                self.by_pid[proc.pid] = proc
                if proc.kill_when_started:
                    proc.kill()
        elif "exited" in msg:
            proc = self.by_pid.pop(msg["exited"], None)
            if proc is not None:
                proc.code = msg["code"]
        elif "error" in msg:
            log.error("agent zygote could not fork: %s", msg["error"])
            for proc in self.by_cfg.values():
                if proc.cfg_path in msg.get("cfg", ""):
                    proc.code = -1

    def close(self) -> None:
        if self.zygote.poll() is None:
            self.zygote.stdin.close()
            try:
                self.zygote.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.zygote.kill()
                self.zygote.wait()
