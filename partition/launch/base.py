"""The launch-method interface (`NodeLaunch`) and what the methods share.

Every launch method is a `NodeLaunch`: `start()` returns once the daemons' processes are
started (not once they report up); `names()` are the nodes expected, by hint (what an error
names when one does not report); `exited()` maps the hints whose process has ended to its exit
code (a launch of one process for all nodes, srun, reports hint ALL_NODES); `pids()` are the
processes the launch started (never taken for orphans); `fd`, when not None, is a descriptor the
bootstrap polls: readable when `exited()` may have news (fork: its zygote's reports; it may
change, to None when the zygote is gone); `stop()` ends whatever still runs:
SIGTERM, then SIGKILL after a grace period, every wait bounded.
`partition.launch.for_resource()` picks the method a resource names.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Protocol, cast

from pilot import processes

log = logging.getLogger("bootstrap.nodes")
ALL_NODES = -1  # the hint of a launch process that runs the daemons of every node (srun)


class Launched(Protocol):  # one launch process: a subprocess.Popen, or a forked daemon
    @property
    def pid(self) -> int | None: ...  # (None: not forked yet)

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...


class NodeLaunch(Protocol):
    method: str
    fd: int | None  # readable when exited() may have news (None: nothing to poll)
    procs: dict[int, Launched]  # by hint (ALL_NODES for one process for all)

    @classmethod
    def for_nodes(
        cls, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]
    ) -> NodeLaunch: ...  # the launch of daemon `argv` on `n` nodes named `names`

    def start(self) -> None: ...

    def names(self) -> list[str]: ...

    def exited(self) -> dict[int, int]: ...

    def pids(self) -> set[int]: ...

    def stop(self, grace: float = 3.0) -> None: ...


class OwnProcesses:
    """The common part of a launch whose processes are the bootstrap's own children (exec,
    mpiexec, ssh): `procs` by hint, polled by exited() (no fd to watch)."""

    fd = None
    procs: dict[int, subprocess.Popen]
    _names: list[str]

    def names(self) -> list[str]:
        return self._names

    def pids(self) -> set[int]:
        return launched_pids(self.procs)

    def exited(self) -> dict[int, int]:
        return exit_codes(self.procs)

    def stop(self, grace: float = 3.0) -> None:
        stop_processes(list(self.procs.values()), grace)


def daemon_argv(rcfg, endpoint: str, cfg: dict) -> list[str]:
    """The node daemon's command line, for every launch method."""
    args = [
        "--bootstrap",
        endpoint,
        "--pilot",
        cfg["pilot"],
        "--session",
        cfg["session"],
        "--timeout",
        str(rcfg.node_timeout),
        # the table comes after both bring-up gathers: wait for as long as they may take
        "--table-timeout",
        str(2 * rcfg.bringup_timeout + rcfg.node_timeout),
    ]
    if cfg.get("pulse"):  # the bootstrap's pulse channel (pilot/wire/liveness.py)
        args += ["--pulse", cfg["pulse"]]
    if cfg.get("pulse_s"):  # its period (liveness.period), unless the daemons' default
        args += ["--pulse-s", repr(float(cfg["pulse_s"]))]
    if cfg.get("curve"):
        args += ["--curve", cfg["curve"]]
    if cfg.get("hint_base"):  # the daemons of a job growing the pilot: partition/nodes/join_job.py
        args += ["--hint-base", str(cfg["hint_base"])]
    return processes.python_m(processes.NODE_DAEMON, *args, python=rcfg.python)


def launched_pids(procs: Mapping[int, Launched]) -> set[int]:
    """The pids of the launch processes (those started so far)."""
    return {p.pid for p in procs.values() if p.pid is not None}


def exit_codes(procs: Mapping[int, Launched]) -> dict[int, int]:
    """hint -> exit code of the launch processes that have ended."""
    # (poll() not None: returncode is set)
    return {h: cast(int, p.returncode) for h, p in procs.items() if p.poll() is not None}


def stop_processes(procs: list[subprocess.Popen], grace: float) -> None:
    """Daemons that said bye exit on their own (and srun with them): give them `grace`
    seconds, then SIGTERM, then SIGKILL; every wait bounded."""
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("down.nodes: daemon launch pid %d ignored SIGTERM; killed", p.pid)
            p.kill()
            try:
                p.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                log.error("down.nodes: pid %d did not die within 5 s of SIGKILL", p.pid)
