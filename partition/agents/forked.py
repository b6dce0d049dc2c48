"""Agents forked by the agent zygote (agent/zygote.py, whose header has the protocol), from
the bootstrap's side.

`AgentForker.spawn()` sends the zygote one request line and returns a `ForkedAgent` at once;
its pid arrives with the zygote's answer.  The bootstrap registers `forker.fd` in its poller
and calls `forker.read()`; `ForkedAgent.poll()` then reports how the agent ended.  Waits are
bounded: `ForkedAgent.wait(timeout)` reads the zygote's reports until the agent exits or the
time is up.  Interface: AgentProcess (partition/manager.py).

If the zygote itself dies (killed; or it could not import the agent's code: its stderr goes to
ZYGOTE_LOG in the pilot sandbox), the bootstrap sees end-of-file on `fd`: every agent asked for
and not yet forked ends at once, the zygote's last words its reason (its partition FAILED,
never left STARTING); agents it had forked are the bootstrap's children now (it is a child
subreaper), waited for directly, and go on running.  The next spawn starts another zygote
(`fd` changes: the bootstrap registers the new one).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import time

from pilot import processes
from pilot.partition.manager import AgentExit

log = logging.getLogger("bootstrap.launch")


ZYGOTE_LOG = "agent_zygote.log"  # in the pilot sandbox


class ForkedAgent:
    def __init__(self, forker: AgentForker, cfg_path: str) -> None:
        self.forker = forker
        self.cfg_path = cfg_path
        self.pid: int | None = None
        self.ended: AgentExit | None = None
        self.kill_when_started = False
        self.adopted = False  # its zygote died: the bootstrap waits for it itself

    def poll(self) -> AgentExit | None:
        if self.ended is None and self.adopted:
            assert self.pid is not None  # (adopted: one the zygote said it started)
            self.ended = _reaped(self.pid)
        return self.ended

    def kill(self) -> None:
        if self.pid is None:
            self.kill_when_started = True
        elif self.ended is None:
            processes.signal_process(self.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> AgentExit | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            if self.adopted:
                time.sleep(0.02)
            else:
                self.forker.read(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.ended


def _reaped(pid: int) -> AgentExit | None:
    """How an adopted agent ended, or None while it runs."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # someone else's child after all: gone once /proc says so
        if os.path.exists(f"/proc/{pid}"):
            return None
        return AgentExit(None, "ended after its agent zygote died (exit code unknown)")
    return None if got == 0 else AgentExit.of_code(os.waitstatus_to_exitcode(status))


class AgentForker:
    def __init__(self, sandbox: str, env: dict | None = None) -> None:
        self.env = env
        self.log_path = os.path.join(sandbox, ZYGOTE_LOG)
        self.zygote: subprocess.Popen  # (_start's, below)
        self.by_cfg: dict[str, ForkedAgent] = {}
        self.by_pid: dict[int, ForkedAgent] = {}
        self.adopted: dict[int, ForkedAgent] = {}  # forked by a zygote that died since
        self._buf = b""
        self.fd: int | None = None  # the zygote's answers (None: it is gone)
        self._start()

    def _start(self) -> None:
        with open(self.log_path, "ab") as err:
            self.zygote = subprocess.Popen(
                processes.python_m(processes.ZYGOTE),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=self.env,
                close_fds=True,
            )
        assert self.zygote.stdout is not None  # (a PIPE)
        self.fd = self.zygote.stdout.fileno()
        os.set_blocking(self.fd, False)
        self._buf = b""
        log.info("agent zygote started, pid %d", self.zygote.pid)

    def _gone(self) -> None:
        """The zygote closed its end: it died.  Nothing more comes from it."""
        try:
            code = self.zygote.wait(timeout=2.0)
        except subprocess.TimeoutExpired:  # (closed its stdout yet lives on: not ours)
            self.zygote.kill()
            code = self.zygote.wait()
        assert self.zygote.stdout is not None  # (a PIPE)
        self.zygote.stdout.close()
        self.fd = None
        why = f"could not be forked: the agent zygote {AgentExit.of_code(code).why}"
        last = last_line(self.log_path)
        if last:
            why += f": {last}"
        log.error("%s; %d agent(s) not forked", why, len(self.by_cfg))
        for proc in self.by_cfg.values():
            proc.ended = AgentExit(None, why)
        self.by_cfg.clear()
        for proc in self.by_pid.values():
            proc.adopted = True
            assert proc.pid is not None  # (by_pid: started ones)
            self.adopted[proc.pid] = proc
        self.by_pid.clear()

    def pids(self) -> set[int]:
        """The processes the bootstrap must not reap as orphans: the zygote, adopted agents."""
        for pid in [p for p, proc in self.adopted.items() if proc.ended is not None]:
            del self.adopted[pid]
        return {self.zygote.pid, *self.adopted}

    def spawn(self, cfg_path: str, log_path: str, body: str | None = None) -> ForkedAgent:
        """Ask the zygote for an agent of config `cfg_path`, which the forked child writes from
        `body` first when given (no file is written here)."""
        if self.fd is None or self.zygote.poll() is not None:
            if self.fd is not None:
                self.read()  # what it said before it died; its end-of-file
            if self.fd is not None:
                self._gone()
            log.error("agent zygote exited with %s; starting another", self.zygote.returncode)
            self._start()
        proc = ForkedAgent(self, cfg_path)
        self.by_cfg[cfg_path] = proc
        line = json.dumps({"cfg": cfg_path, "log": log_path, "body": body}) + "\n"
        assert self.zygote.stdin is not None  # (a PIPE)
        try:
            self.zygote.stdin.write(line.encode())
            self.zygote.stdin.flush()
        except BrokenPipeError as exc:
            raise OSError(f"agent zygote is gone: {exc}") from None
        return proc

    def read(self, timeout: float = 0.0) -> None:
        """Take whatever the zygote has said (waiting up to `timeout` for something)."""
        if self.fd is None:
            return
        if timeout > 0:
            select.select([self.fd], [], [], timeout)
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self._gone()
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
            assert self.zygote.stdin is not None  # (a PIPE)
            self.zygote.stdin.close()
            try:
                self.zygote.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.zygote.kill()
                self.zygote.wait()


def last_line(path: str) -> str:
    """The last non-empty line of a (small) log file, or ""."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else ""
