"""Starting unit processes on this node: the spawn, binding, and the one non-blocking reap
loop.  Used by the agent's local runner (agent/runners/local.py) and by node daemons
(agent/node/daemon.py).  The environment a rank sees (every variable, and the placeholders of a
unit's `environment`) is agent/rank_env.py's.

Binding: the process is on the unit's cores before the program's first instruction.  The spawn
goes through agent/_spawn-src/vfork_spawn.c (built with the package), whose child sets its own
mask between vfork and exec.  Where that module was not built (no C compiler), posix_spawn
starts it from a thread that has taken the unit's mask for the spawn (the child inherits it),
which forces the spawning thread onto a busy core for every unit: 25-30% lower throughput on 2
cores, the price of the fallback.  (Binding the child once posix_spawn has returned is cheaper
but too late: a short program had read its own mask before the agent moved it, seen in CI.)
Logical core ids (a config may declare more cores than the machine has) map onto the real ones
round-robin.

Not waiting: `spawn` returns once the child has exec'd (vfork), and a child bound to a busy core
keeps the agent waiting for it (280-360 us a unit measured on 2 busy cores).  `start` (x86-64
Linux) returns as soon as the child exists; what went wrong before or at its exec is known once
it has settled, at the latest when waitpid reports its exit (code 127).  The unit runner starts
units this way; node daemons and agents are spawned (their errors are answered at once).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from types import MappingProxyType

from pilot.agent import native
from pilot.agent.native import spawn as _spawn  # None: posix_spawn, then bind (see above)

NATIVE = _spawn is not None  # whether agent/_spawn-src/ was built
NO_WAIT = NATIVE and hasattr(_spawn, "start")  # start() does not wait for the exec (x86-64)

_SPAWN_SIGDEF = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
FOUND_MAX = 1024  # PATH look-ups remembered
WNOTHREAD = 0x20000000  # (Linux __WNOTHREAD: only the calling thread's own children)


def exits(options: int = 0) -> Iterator[tuple[int, int]]:
    """(pid, exit code) of every child that has ended, without blocking (negative code =
    signal).  The one waitpid loop of the agent, its zygote and node daemons.  `options`:
    WNOTHREAD where a lane thread reaps its own (agent/runners/lanes.py)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG | options)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, os.waitstatus_to_exitcode(status)


class Spawner:
    """Start one process on this node: environment, spawn, binding.  Used by the agent's local
    runner and by node daemons (agent/node/daemon.py)."""

    def __init__(self, extra_env: dict) -> None:
        self.allowed = sorted(os.sched_getaffinity(0))
        self.devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        env = dict(os.environ)
        env.update(extra_env)
        self.base_env = MappingProxyType(env)  # (read-only: _base_entries is made from it)
        self._base_entries = {k: entry(k, v) for k, v in env.items()}
        self.found: dict[tuple, str] = {}  # (bare name, unit PATH or None) -> its path
        self.native = NATIVE

    def visible(self, var: str, gpu_ids: str) -> str:
        """GPU ids as the unit must see them: through the inherited mask when there is one."""
        inherited = self.base_env.get(var)
        if not inherited or not gpu_ids:
            return gpu_ids
        mask = [m.strip() for m in inherited.split(",") if m.strip()]
        out = []
        for g in gpu_ids.split(","):
            if int(g) >= len(mask):
                raise OSError(f"GPU {g} is not in the inherited {var}={inherited}")
            out.append(mask[int(g)])
        return ",".join(out)

    def spawn(
        self,
        argv: list[str],
        cwd: str,
        out: int,
        err: int,
        env: dict | None = None,
        gpu_var: str | None = None,
        cpu_ids=(),
    ) -> int:
        """Start `argv` in `cwd` (stdin /dev/null, stdout `out`, stderr `err`), in a process
        group of its own, with this process's environment plus `env` (`gpu_var` names its
        GPU variable, mapped through the inherited mask), bound to logical cores `cpu_ids`
        (none: all of this process's).  Returns once it has exec'd.  OSError when it cannot
        start (nothing is left running), ValueError for a NUL byte."""
        path, env, mask = self._prepare(argv, env, gpu_var, cpu_ids)
        if self.native:
            assert _spawn is not None  # (native: it was built)
            return _spawn.spawn(*self._native_args(path, argv, cwd, out, err, env, mask))
        return self._posix_spawn(path, argv, cwd, out, err, env, mask)

    def start(
        self,
        argv: list[str],
        cwd: str,
        out: int,
        err: int,
        env: dict | None = None,
        gpu_var: str | None = None,
        cpu_ids=(),
    ):
        """Like `spawn`, without waiting for the exec where agent/_spawn-src/start.c can (x86-64
        Linux): returns a handle with `pid`, `settled()` and `error()`.  A failure found before
        the child exists (a program not on PATH, a NUL byte) raises as in `spawn`; one of the
        child's own (exec, chdir, bind) makes it exit 127 and is `error()` once it settled,
        which it has by the time waitpid reports its exit.  Keep the handle until then."""
        if not (self.native and NO_WAIT):
            return Spawned(self.spawn(argv, cwd, out, err, env, gpu_var, cpu_ids))
        path, env, mask = self._prepare(argv, env, gpu_var, cpu_ids)
        assert _spawn is not None  # (native)
        return _spawn.start(*self._native_args(path, argv, cwd, out, err, env, mask))

    def prepare(self, argv: list[str], cwd: str, env: dict, gpu_var, cpu_ids, one_pipe: bool):
        """What `start` takes, encoded, not started: a handle for agent/_spawn-src/lanes.c's
        LaneThreads, whose thread makes its stdout and stderr pipes when it starts it
        (`one_pipe`: stderr into stdout's).  Raises as `start` does for what is wrong before a
        child exists."""
        path, env, mask = self._prepare(argv, env, gpu_var, cpu_ids)
        err = -2 if one_pipe else -1
        assert _spawn is not None  # (a lane's: there are lanes where it was built)
        return _spawn.prepare(*self._native_args(path, argv, cwd, -1, err, env, mask))

    def entries_without(self, names) -> list[bytes]:
        """This process's environment, encoded, without the variables `names`."""
        return [e for k, e in self._base_entries.items() if k not in names]

    def replaces_none(self, env: dict) -> bool:
        """Whether `env` adds to this process's environment without replacing any of it."""
        return self._base_entries.keys().isdisjoint(env)

    def prepare_envp(self, argv: list[str], cwd: str, envp: list, search, one_pipe: bool):
        """`prepare` for a unit whose whole environment is `envp` (encoded) and which runs where
        its lane says (no mask of its own); `search` is its own PATH, if any."""
        path = argv[0] if "/" in argv[0] else self.which(argv[0], search)
        err = -2 if one_pipe else -1
        assert _spawn is not None  # (a lane's, as `prepare`)
        return _spawn.prepare(*self._encoded(path, argv, cwd, -1, err, envp, None))

    def mode(self) -> str:
        """How units start here: clone3 / clone (agent/_spawn-src/start.c, clone.c: x86-64
        Linux), vfork (vfork_spawn.c elsewhere) or posix_spawn (it was not built)."""
        if not self.native:
            return f"posix_spawn ({native.why_not})"
        if not NO_WAIT:
            return "vfork"
        assert _spawn is not None  # (NO_WAIT: it was built)
        return "clone3" if _spawn.clone3_works() else "clone"

    def _prepare(self, argv, env, gpu_var, cpu_ids) -> tuple:
        """(program path, env with its GPU variable mapped, real cores or None)."""
        if env and gpu_var is not None:
            env = {**env, gpu_var: self.visible(gpu_var, env.get(gpu_var, ""))}
        path = argv[0]
        if "/" not in path:  # the unit's own PATH, when it sets one, as its shell would use
            path = self.which(path, env.get("PATH") if env else None)
        return path, env, self.mask(cpu_ids)

    def _native_args(self, path, argv, cwd, out, err, env, mask) -> tuple:
        entries = self._base_entries
        if not env:
            envp = list(entries.values())
        elif entries.keys().isdisjoint(env):  # (the usual case: nothing of the base replaced)
            envp = [*entries.values(), *(entry(k, v) for k, v in env.items())]
        else:
            entries = entries.copy()
            for k, v in env.items():
                entries[k] = entry(k, v)
            envp = list(entries.values())
        return self._encoded(path, argv, cwd, out, err, envp, mask)

    def _encoded(self, path, argv, cwd, out, err, envp: list, mask) -> tuple:
        """What agent/_spawn-src/ takes (args.c), with `envp` encoded already."""
        return (
            _fsencode(path),
            [_fsencode(a) for a in argv],
            envp,
            _fsencode(cwd),
            (self.devnull, out, err),
            None if mask is None else sorted(mask),
            _SPAWN_SIGDEF,
        )

    def _posix_spawn(self, path, argv, cwd, out, err, env, mask) -> int:
        full = dict(self.base_env)
        if env:
            full.update(env)
        moved = []  # a descriptor among 0-2 not in its own place: above 2 first (the actions
        fds = [self.devnull, out, err]  # run in order, and an earlier one would overwrite it)
        for t, fd in enumerate(fds):
            if fd < 3 and fd != t:
                moved.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3))
                fds = [moved[-1] if f == fd else f for f in fds]
        # the child inherits the mask of the thread that spawns it: this thread takes the
        # unit's mask for the spawn and gets its own back after (see the header)
        own = os.sched_getaffinity(0) if mask is not None else None
        try:
            if mask is not None:
                os.sched_setaffinity(0, mask)
            os.chdir(cwd)
            pid = os.posix_spawn(
                path,
                argv,
                full,
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, t) for t, fd in enumerate(fds)],
                setpgroup=0,
                setsigdef=_SPAWN_SIGDEF,
                setsigmask=(),
            )
        finally:
            if own is not None:
                os.sched_setaffinity(0, own)
            for fd in moved:
                os.close(fd)
        return pid

    def which(self, name: str, search: str | None = None) -> str:
        """A bare program name's path on `search` (a unit's own PATH; None: this process's
        PATH), as posix_spawnp finds it (no /bin/sh fallback for a file that is not a
        program); FileNotFoundError if none.  Of a unit's PATH only the absolute entries are
        searched here (a relative one is relative to the unit's sandbox: its shell finds what
        lies there).  Found names are remembered, missing ones looked up again."""
        path = self.found.get((name, search))
        if path is None:
            if search is None:
                where = os.environ.get("PATH", os.defpath)
            else:
                where = os.pathsep.join(d for d in search.split(os.pathsep) if d[:1] == "/")
            path = shutil.which(name, path=where) if where else None
            if path is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
            if len(self.found) >= FOUND_MAX:  # (units may each set a PATH of their own)
                self.found.clear()
            self.found[(name, search)] = path
        return path

    def real_core(self, cpu_id: int) -> int:
        """The real core of logical core `cpu_id` (this process's cores, round-robin)."""
        return self.allowed[cpu_id % len(self.allowed)]

    def mask(self, cpu_ids) -> set[int] | None:
        """The real cores for logical cores `cpu_ids`; None when that is all of this process's
        cores (nothing to bind)."""
        mask = {self.real_core(c) for c in cpu_ids} if cpu_ids else set(self.allowed)
        return mask if len(mask) < len(self.allowed) else None


class Spawned:
    """What `Spawner.start` returns where the spawn waited for the exec: settled, no error."""

    __slots__ = ("pid",)

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def settled(self) -> bool:
        return True

    def wait(self, timeout: float) -> bool:
        return True

    def error(self) -> None:
        return None


def entry(key: str, value: str) -> bytes:
    """One environment entry as exec takes it (b"KEY=VALUE"), encoded as os.fsencode does."""
    if type(key) is not str or type(value) is not str:
        raise TypeError(
            f"environment[{key!r}] = {value!r}: names and values must be strings, "
            f"not {type(key).__name__} / {type(value).__name__}"
        )
    if "=" in key or not key:
        raise ValueError(f"environment key {key!r}: a non-empty name without '='")
    return f"{key}={value}".encode(_FS_ENCODING, _FS_ERRORS)


_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def _fsencode(text: str) -> bytes:
    """os.fsencode of a str (paths and arguments here are str), one call cheaper."""
    if type(text) is str:
        return text.encode(_FS_ENCODING, _FS_ERRORS)
    return os.fsencode(text)
