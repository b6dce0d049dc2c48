"""Run unit processes on this node: spawn, bind, capture output, reap, kill.

Each unit runs in its own sandbox directory (the pilot sandbox / unit uid; made ahead of time by
the Stager) with stdout and stderr in the files STDOUT and STDERR there, stdin from /dev/null,
in a process group of its own.  The process is started with posix_spawn and bound to the unit's
cores by the agent as soon as posix_spawn returns, i.e. once the new program has been exec'd
and is still in its dynamic loader, before its main() can start threads or children (which
inherit the binding).  (Binding the agent itself before the spawn, so that the child inherits
the mask, forces the agent to migrate onto a busy core for every unit: measured 25-30% lower
throughput on 2 cores.)  Logical core ids (a config may declare more cores than the machine
has) map onto the real ones round-robin.  Exits are collected with waitpid(-1, WNOHANG) when
SIGCHLD arrives.

Environment a unit sees, besides the agent's own and the unit's `environment`:
    PILOT_SESSION_ID PILOT_PILOT_ID PILOT_PARTITION_ID PILOT_UNIT_ID PILOT_UNIT_SANDBOX
    PILOT_NODE_NAME  PILOT_CPU_IDS (logical core ids)  PILOT_GPU_IDS
    CUDA_VISIBLE_DEVICES (the unit's GPU ids; empty for a unit without GPUs, on GPU partitions)
"""

from __future__ import annotations

import os
import shutil
import signal

_SPAWN_SIGDEF = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)


class Running:
    __slots__ = ("unit", "pid", "node", "cores", "gpus", "cancel_reason")

    def __init__(self, unit, pid, node, cores, gpus):
        self.unit, self.pid, self.node, self.cores, self.gpus = unit, pid, node, cores, gpus
        self.cancel_reason = None


class Executor:
    def __init__(self, cfg: dict) -> None:
        self.has_gpus = any(n["gpus"] for n in cfg["nodes"])
        self.allowed = sorted(os.sched_getaffinity(0))
        self.devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.base_env = dict(os.environ)
        self.base_env.update(
            {
                "PILOT_SESSION_ID": cfg["session"],
                "PILOT_PILOT_ID": cfg["pilot"],
                "PILOT_PARTITION_ID": cfg["uid"],
            }
        )
        self.running: dict[int, Running] = {}
        self._which: dict[str, str | None] = {}

    def spawn(self, unit: dict, io: tuple, node: dict, cores: list[int], gpus: list[int]):
        """Start `unit` with its staged (sandbox, out_fd, err_fd); the fds are closed here.
        Raises OSError (e.g. executable not found) with nothing left running."""
        sandbox, out, err = io
        uid = unit["uid"]
        env = self.base_env.copy()
        env.update(unit.get("environment") or ())
        gpu_ids = ",".join(map(str, gpus))
        env["PILOT_UNIT_ID"] = uid
        env["PILOT_UNIT_SANDBOX"] = sandbox
        env["PILOT_NODE_NAME"] = node["name"]
        env["PILOT_CPU_IDS"] = ",".join(map(str, cores))
        env["PILOT_GPU_IDS"] = gpu_ids
        if self.has_gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpu_ids
        argv = [unit["executable"], *unit.get("arguments", ())]
        actions = [
            (os.POSIX_SPAWN_DUP2, self.devnull, 0),
            (os.POSIX_SPAWN_DUP2, out, 1),
            (os.POSIX_SPAWN_DUP2, err, 2),
        ]
        try:
            os.chdir(sandbox)
            spawn = os.posix_spawn if "/" in argv[0] else os.posix_spawnp
            pid = spawn(
                argv[0],
                argv,
                env,
                file_actions=actions,
                setpgroup=0,
                setsigdef=_SPAWN_SIGDEF,
                setsigmask=(),
            )
        finally:
            os.close(out)
            os.close(err)
        allowed = self.allowed
        mask = {allowed[c % len(allowed)] for c in cores} if cores else set(allowed)
        if len(mask) < len(allowed):
            try:
                os.sched_setaffinity(pid, mask)
            except ProcessLookupError:
                pass  # it has exited already
        r = Running(unit, pid, node, cores, gpus)
        self.running[pid] = r
        return r

    def reap(self):
        """Yield (Running, exit code) for every child that has exited (negative = signal)."""
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            r = self.running.pop(pid, None)
            if r is not None:
                yield r, os.waitstatus_to_exitcode(status)

    def kill(self, r: Running, sig: int) -> None:
        try:
            os.killpg(r.pid, sig)
        except ProcessLookupError:
            pass  # already gone; the reaper will collect it

    def which(self, executable: str) -> str | None:
        """The program that runs for `executable`, or None; PATH look-ups are cached."""
        if "/" in executable:
            return executable
        if executable not in self._which:
            self._which[executable] = shutil.which(executable)
        return self._which[executable]
