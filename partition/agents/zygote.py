"""Agents forked by the agent zygote (agent/zygote.py, whose header has the protocol), from
the bootstrap's side.

`AgentLauncher.spawn()` sends the zygote one request line and returns a `ForkedAgent` at once;
its pid arrives with the zygote's answer.  The bootstrap registers `launcher.fd` in its poller
and calls `launcher.read()`; `ForkedAgent.poll()` then reports how the agent ended.  Waits are
bounded: `ForkedAgent.wait(timeout)` reads the zygote's reports until the agent exits or the
time is up.  If the zygote itself dies, it is started again on the next spawn.  Interface:
AgentProcess (partition/manager.py).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import time

from partition.manager import AgentExit
from pilot import processes

log = logging.getLogger("bootstrap.launch")


class ForkedAgent:
    def __init__(self, launcher: AgentLauncher, cfg_path: str) -> None:
        self.launcher = launcher
        self.cfg_path = cfg_path
        self.pid: int | None = None
        self.ended: AgentExit | None = None
        self.kill_when_started = False

    def poll(self) -> AgentExit | None:
        return self.ended

    def kill(self) -> None:
        if self.pid is None:
            self.kill_when_started = True
        elif self.ended is None:
            processes.signal_process(self.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> AgentExit | None:
        deadline = time.monotonic() + timeout
        while self.ended is None and time.monotonic() < deadline:
            self.launcher.read(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.ended


class AgentLauncher:
    def __init__(self, env: dict | None = None) -> None:
        self.env = env
        self.zygote: subprocess.Popen | None = None
        self.by_cfg: dict[str, ForkedAgent] = {}
        self.by_pid: dict[int, ForkedAgent] = {}
        self._buf = b""
        self._start()

    def _start(self) -> None:
        self.zygote = subprocess.Popen(
            processes.python_m(processes.ZYGOTE),
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

    def spawn(self, cfg_path: str, log_path: str) -> ForkedAgent:
        if self.zygote.poll() is not None:
            log.error("agent zygote exited with %s; starting another", self.zygote.returncode)
            self._start()
        proc = ForkedAgent(self, cfg_path)
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
                proc.ended = AgentExit.of_code(msg["code"])
        elif "error" in msg:
            log.error("agent zygote could not fork: %s", msg["error"])
            for proc in self.by_cfg.values():
                if proc.cfg_path in msg.get("cfg", ""):
                    proc.ended = AgentExit(None, f"could not be forked: {msg['error']}")

    def close(self) -> None:
        if self.zygote.poll() is None:
            self.zygote.stdin.close()
            try:
                self.zygote.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.zygote.kill()
                self.zygote.wait()
