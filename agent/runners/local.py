"""The local runner: units of a single-node partition, spawned by the agent itself.

Each unit runs in its own sandbox directory (the pilot sandbox / unit uid; made ahead of time by
the SandboxStager, agent/runners/sandboxes.py) with stdout and stderr in the files STDOUT and
STDERR there, stdin from /dev/null, in a process group of its own, bound to its cores
(agent/spawn.py).  Exits are collected with waitpid(-1, WNOHANG) when SIGCHLD arrives.

A unit of R ranks is R processes (one per rank, each bound to its own cores, all writing to
the unit's STDOUT/STDERR); it ends when all have ended, with the first non-zero exit code.
Interface: UnitRunner (agent/runners/base.py).
"""

from __future__ import annotations

import os
import shutil
import signal

from agent import command
from agent.runners.base import Run
from agent.spawn import Spawner, exits, grant_ids, rank_env
from pilot import processes


class LocalRunner:
    """Units on this node, spawned by the agent itself."""

    def __init__(self, cfg: dict) -> None:
        self.has_gpus = any(n["gpus"] for n in cfg["nodes"])
        self.spawner = Spawner(
            {
                "PILOT_SESSION_ID": cfg["session"],
                "PILOT_PILOT_ID": cfg["pilot"],
                "PILOT_PARTITION_ID": cfg["uid"],
                "RP_SESSION_ID": cfg["session"],
                "RP_PILOT_ID": cfg["pilot"],
                "RP_PILOT_SANDBOX": cfg["pilot_sandbox"],
            }
        )
        self.mpi_launcher = cfg.get("mpi_launcher")
        self.running: dict[int, Run] = {}  # pid -> its unit's Run
        self._which: dict[str, str | None] = {}
        self.output: list = []  # units here write to their files only: nothing is forwarded

    def sockets(self) -> list:
        return []  # no node daemons to listen to

    def on_readable(self, sock) -> None:
        raise AssertionError("the local runner has no sockets")

    def node_lost(self, index: int, reason: str) -> None:
        pass  # its only node is the agent's own

    def close(self) -> None:
        pass

    def spawn(self, unit: dict, io: tuple, alloc) -> Run:
        """Start every rank of `unit` with its staged (sandbox, out_fd, err_fd); the fds are
        closed here.  Raises OSError (e.g. executable not found) with nothing left running."""
        sandbox, out, err = io
        run = Run(unit, alloc)
        argv = command.argv(unit)  # directly, or through /bin/sh (agent/command.py)
        ranks = len(alloc.ranks)
        if unit.get("mpi"):  # one launcher process over all its ranks
            try:
                return self._spawn_mpi(unit, run, sandbox, out, err)
            finally:
                os.close(out)
                os.close(err)
        try:
            for rank, (node, grant) in enumerate(alloc.ranks):
                ids = grant_ids(node.cap, grant)
                env = self.spawner.env(
                    *rank_env(unit, sandbox, node.name, ids, rank, ranks, self.has_gpus)
                )
                pid = self.spawner.spawn(argv, env, sandbox, out, err)
                run.pids.append(pid)
                self.running[pid] = run
                self.spawner.bind(pid, [c for c, _ in grant.get("cpus", ())])
        except (OSError, ValueError):
            for pid in run.pids:
                self.running.pop(pid, None)
                processes.signal_group(pid, signal.SIGKILL)
            raise
        finally:
            os.close(out)
            os.close(err)
        return run

    def _spawn_mpi(self, unit: dict, run: Run, sandbox: str, out: int, err: int) -> Run:
        if not self.mpi_launcher:
            raise OSError("an rp.MPI unit, but the resource config sets no mpi_launcher")
        node = run.alloc.ranks[0][0]
        grant: dict = {}
        for _, g in run.alloc.ranks:  # the launcher holds every rank's slots
            for t, got in g.items():
                grant.setdefault(t, []).extend(got)
        ids = grant_ids(node.cap, grant)
        ranks = len(run.alloc.ranks)
        env = self.spawner.env(*rank_env(unit, sandbox, node.name, ids, 0, ranks, self.has_gpus))
        argv = command.mpi_argv(unit, self.mpi_launcher, [("localhost", ranks)])
        pid = self.spawner.spawn(argv, env, sandbox, out, err)
        run.pids.append(pid)
        self.running[pid] = run
        self.spawner.bind(pid, sorted({c for c, _ in grant.get("cpus", ())}))
        return run

    def reap(self):
        """Yield (Run, exit code) for every unit whose ranks have all exited (the first
        non-zero code by rank; negative = signal)."""
        if not self.running:
            return
        for pid, code in exits():
            run = self.running.pop(pid, None)
            if run is None:
                continue
            run.codes[pid] = code
            if len(run.codes) == len(run.pids):
                codes = [run.codes[p] for p in run.pids]
                yield run, next((c for c in codes if c != 0), 0)

    def has_exited(self, run: Run) -> bool:
        """Whether every rank has exited (and waits to be reaped): a cancel comes too late."""
        for pid in run.pids:
            if pid in run.codes:
                continue
            try:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                    return False
            except ChildProcessError:
                continue
        return True

    def kill(self, run: Run, sig: int) -> None:
        for pid in run.pids:
            if pid not in run.codes:
                processes.signal_group(pid, sig)

    def runs(self) -> list[Run]:
        return list({id(r): r for r in self.running.values()}.values())

    def which(self, executable: str) -> str | None:
        """The program that runs for `executable`, or None; PATH look-ups are cached."""
        if executable.startswith("/"):
            return executable if os.access(executable, os.X_OK) else None
        if "/" in executable:
            return executable  # relative to its sandbox: the spawn (or its shell) finds it
        if executable not in self._which:
            self._which[executable] = shutil.which(executable)
        return self._which[executable]
