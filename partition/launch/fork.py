"""The `fork` launch method: one node daemon per (logical) node on this machine, each forked
from the node zygote (agent/node/zygote.py, whose header has the protocol).

For tests, benchmarks and single-host runs.  A fresh interpreter per daemon (launch method
`exec`, partition/launch/exec.py) pays its start and imports N times on this host's cores;
here one zygote pays them once and forks N daemons.  Each runs with the arguments an `exec`
daemon gets, `--watch-pid BOOTSTRAP` in place of `--watch-parent` (its parent is the zygote),
its output in LOG_DIR/node.<i>.log; the zygote's own in LOG_DIR/node_zygote.log.

`start()` sends every request and returns once the zygote has answered each (pids known),
reading its answers as it writes (no pipe fills up on either side); within ZYGOTE_TIMEOUT.
`exited()` reads the zygote's exit reports.  If the zygote dies, its daemons go on, children
of the bootstrap now (a child subreaper), which waits for them itself (`adopted`); a daemon
it had not forked yet counts as exited (code NOT_FORKED), the zygote's last words logged.
The NodeLaunch interface is in partition/launch/base.py.
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
from pilot.partition.agents.forked import last_line
from pilot.partition.launch.base import exit_codes, launched_pids

log = logging.getLogger("bootstrap.nodes")
ZYGOTE_LOG = "node_zygote.log"  # in the log directory
ZYGOTE_TIMEOUT = 120.0  # seconds for the zygote to fork every daemon (~1 ms each)
NOT_FORKED = 127  # the exit code of a daemon the zygote could not fork


class ForkedDaemon:
    """One daemon forked by the zygote: what a subprocess.Popen is to `exec`."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.returncode: int | None = None
        self.adopted = False  # its zygote died: the bootstrap waits for it itself

    def poll(self) -> int | None:
        if self.returncode is None and self.adopted:
            assert self.pid is not None  # (adopted: one the zygote said it started)
            try:
                got, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (not ours after all)
                if not os.path.exists(f"/proc/{self.pid}"):
                    self.returncode = -signal.SIGKILL
                return self.returncode
            if got:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class ForkLaunch:
    method = "fork"

    @classmethod
    def for_nodes(cls, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        return cls(n, argv, log_dir, env, names, rcfg.python)

    def __init__(
        self, n: int, argv: list[str], log_dir: str, env: dict, names: list[str], python=None
    ) -> None:
        prefix = processes.python_m(processes.NODE_DAEMON, python=python)
        if argv[: len(prefix)] != prefix:
            raise ValueError(f"launch_method=fork: {argv[:3]} does not start a node daemon")
        self.n = n
        self.args = argv[len(prefix) :]  # the daemon's arguments
        self.python = python
        self.log_dir = log_dir
        self.env = env
        self._names = list(names)
        self.procs: dict[int, ForkedDaemon] = {}  # hint -> its daemon
        self.by_pid: dict[int, ForkedDaemon] = {}
        self.zygote: subprocess.Popen | None = None
        self.fd: int | None = None  # the zygote's answers (None: it is gone)
        self._buf = b""

    def names(self) -> list[str]:
        return self._names

    def request(self, hint: int) -> dict:
        argv = [*self.args, "--hint", str(hint), "--name", self._names[hint]]
        argv += ["--watch-pid", str(os.getpid())]
        return {"hint": hint, "argv": argv, "log": os.path.join(self.log_dir, f"node.{hint}.log")}

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        with open(os.path.join(self.log_dir, ZYGOTE_LOG), "ab") as err:
            self.zygote = subprocess.Popen(
                processes.python_m(processes.NODE_ZYGOTE, python=self.python),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=self.env,
                close_fds=True,
            )
        log.info("boot.nodes.launch: node zygote started, pid %d", self.zygote.pid)
        assert self.zygote.stdout is not None and self.zygote.stdin is not None  # (PIPEs)
        self.fd = self.zygote.stdout.fileno()
        os.set_blocking(self.fd, False)
        to = self.zygote.stdin.fileno()
        os.set_blocking(to, False)
        for hint in range(self.n):
            self.procs[hint] = ForkedDaemon()
        data = b"".join(json.dumps(self.request(h)).encode() + b"\n" for h in range(self.n))
        deadline = time.monotonic() + ZYGOTE_TIMEOUT
        while self.fd is not None and time.monotonic() < deadline:
            if not data and all(p.pid or p.returncode is not None for p in self.procs.values()):
                break
            readable, writable, _ = select.select([self.fd], [to] if data else [], [], 0.2)
            if writable:
                try:
                    data = data[os.write(to, data[: 1 << 16]) :]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    data = b""  # it died: read() below sees its end
            if readable:
                self.read()
        os.set_blocking(to, True)
        waiting = [h for h, p in self.procs.items() if p.pid is None and p.returncode is None]
        for h in waiting:  # (the bring-up gather names them, with this code)
            self.procs[h].returncode = NOT_FORKED
        if waiting:
            log.error(
                "boot.nodes.launch: the node zygote forked no daemon for hint(s) %s within %g s",
                waiting,
                ZYGOTE_TIMEOUT,
            )

    def read(self) -> None:
        """Take whatever the zygote has said, without blocking."""
        if self.fd is None:
            return
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                self._gone()
                return
            *lines, self._buf = (self._buf + data).split(b"\n")
            for line in lines:
                self._on_line(json.loads(line))

    def _on_line(self, msg: dict) -> None:
        proc: ForkedDaemon | None
        if "started" in msg:
            proc = self.procs[int(msg["started"])]
            proc.pid = int(msg["pid"])
            self.by_pid[proc.pid] = proc
        elif "exited" in msg:
            proc = self.by_pid.pop(int(msg["exited"]), None)
            if proc is not None:
                proc.returncode = int(msg["code"])
        elif "error" in msg:
            log.error("boot.nodes.launch: the node zygote could not fork: %s", msg["error"])
            if msg.get("hint") in self.procs:
                self.procs[msg["hint"]].returncode = NOT_FORKED

    def _gone(self) -> None:
        """The zygote closed its end: it died (or was closed).  Its daemons are ours now."""
        # (read's, with an fd: the zygote's stdout, a PIPE)
        assert self.zygote is not None and self.zygote.stdout is not None
        try:
            code = self.zygote.wait(timeout=2.0)
        except subprocess.TimeoutExpired:  # (closed its stdout yet lives on)
            self.zygote.kill()
            code = self.zygote.wait(timeout=5.0)
        self.zygote.stdout.close()
        self.fd = None
        for proc in self.by_pid.values():
            proc.adopted = True
        self.by_pid.clear()
        for proc in self.procs.values():
            if proc.pid is None and proc.returncode is None:
                proc.returncode = NOT_FORKED
        if code != 0:
            log.error(
                "node zygote exited with %s; its daemons are the bootstrap's to wait for: %s",
                code,
                last_line(os.path.join(self.log_dir, ZYGOTE_LOG)),
            )

    def pids(self) -> set[int]:
        pids = launched_pids(self.procs)
        if self.zygote is not None:
            pids.add(self.zygote.pid)
        return pids

    def exited(self) -> dict[int, int]:
        self.read()
        return exit_codes(self.procs)

    def _live(self) -> list[ForkedDaemon]:
        self.read()
        return [p for p in self.procs.values() if p.pid is not None and p.poll() is None]

    def _wait(self, seconds: float) -> list[ForkedDaemon]:
        """The daemons still running after up to `seconds` (reading the zygote's reports)."""
        deadline = time.monotonic() + seconds
        while (live := self._live()) and time.monotonic() < deadline:
            if self.fd is not None:
                select.select([self.fd], [], [], min(0.05, max(0.0, deadline - time.monotonic())))
            else:
                time.sleep(0.02)
        return live

    def stop(self, grace: float = 3.0) -> None:
        """Daemons that said bye exit on their own: `grace` s, then SIGTERM, `grace` s, then
        SIGKILL (5 s); then the zygote's stdin closes and it exits."""
        live = self._wait(grace)
        for p in live:
            assert p.pid is not None  # (_live: started ones)
            processes.signal_process(p.pid, signal.SIGTERM)
        live = self._wait(grace)
        for p in live:
            log.error("down.nodes: daemon pid %d ignored SIGTERM; killed", p.pid)
            assert p.pid is not None  # (_live: started ones)
            processes.signal_process(p.pid, signal.SIGKILL)
        for p in self._wait(5.0):
            log.error("down.nodes: pid %d did not die within 5 s of SIGKILL", p.pid)
        if self.zygote is not None and self.zygote.poll() is None:
            assert self.zygote.stdin is not None  # (a PIPE)
            self.zygote.stdin.close()
            try:
                self.zygote.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.zygote.kill()
                self.zygote.wait(timeout=5.0)
        if self.fd is not None:
            # (fd: the zygote's stdout, a PIPE)
            assert self.zygote is not None and self.zygote.stdout is not None
            self.zygote.stdout.close()
            self.fd = None
