"""How each kind of fault is made (tests/chaos/schedule.py names them).

The victims are found by pid, never by name alone: every process of a session carries
PILOT_SESSION_ID=<session> in its environment (pmgr/core/reaper.py), and among those
    bootstrap      python -m pilot.partition.bootstrap <pilot sandbox>/bootstrap.json
    agent          the pid its partition's log says (`<partition>.agent.log`: "up, pid N")
    agent zygote   pilot.agent.zygote, a child of the bootstrap, and no agent (agents are
                   forked from it: they show its command line too)
    node daemon    the pids of `daemons.json` in the pilot sandbox (grown jobs' nodes too)
    node zygote    pilot.agent.node.zygote, and no node daemon (the fork launch method only:
                   srun starts the daemons itself)
Signals go to one pid (os.kill); a process that ended meanwhile is no error.

Links (the slurm-netns resource, root): a compute node's link in the login namespace drops
every packet (tests/netns.py `silence`), or only those between the login node (the client)
and the node the bootstrap runs on (`silence_between`); `mend` ends either.
Disks (root): a small tmpfs mounted on a directory of the seed's (the store's, the units'
sandboxes'), filled by one file until ENOSPC, that file removed to end it; unmounted at the
seed's end (`umount`, `umount -l` if busy).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

from pilot import processes
from pilot.pmgr.core import reaper


def _read(path: str, mode: str = "r") -> str | bytes | None:
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def cmdline(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline", "rb") or b""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def ppid(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat", "rb")
    return int(stat.rsplit(b")", 1)[1].split()[1]) if stat else None


def alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat", "rb")
    return bool(stat) and stat.rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")


def started_as(cmd: str, module: str) -> bool:
    """Command line `cmd` is `python -m module ...` (or a fork of one)."""
    words = cmd.split()
    return any(a == "-m" and b == module for a, b in zip(words, words[1:]))


def stopped(pid: int) -> bool:
    """Process `pid` is stopped (SIGSTOP)."""
    stat = _read(f"/proc/{pid}/stat", "rb")
    return bool(stat) and stat.rsplit(b")", 1)[1].split()[0] == b"T"


def describe(pid: int) -> str:
    return f"{pid} (ppid {ppid(pid)}): {cmdline(pid)[:160]}"


class Targets:
    """The processes of one pilot of a session, found as the module's header says."""

    def __init__(self, session: str, sandbox: str) -> None:
        self.session, self.sandbox = session, sandbox
        self.pids = reaper.session_processes(session)
        self.cmd = {pid: cmdline(pid) for pid in self.pids}

    def _with(self, module: str) -> list[int]:
        """The processes started as `python -m module` (or forked from one)."""
        return [pid for pid, cmd in self.cmd.items() if started_as(cmd, module)]

    def bootstrap(self) -> list[int]:
        return [p for p in self._with("pilot.partition.bootstrap") if self.sandbox in self.cmd[p]]

    def agent(self) -> list[int]:
        found = []
        for name in sorted(os.listdir(self.sandbox)) if os.path.isdir(self.sandbox) else []:
            if name.endswith(".agent.log"):
                m = re.search(r"up, pid (\d+)", _read(os.path.join(self.sandbox, name)) or "")
                if m and int(m.group(1)) in self.cmd:
                    found.append(int(m.group(1)))
        return found

    def agent_zygote(self) -> list[int]:
        boots, agents = set(self.bootstrap()), set(self.agent())
        return [p for p in self._with("pilot.agent.zygote") if p not in agents and ppid(p) in boots]

    def node_daemon(self) -> list[int]:
        text = _read(os.path.join(self.sandbox, "daemons.json"))
        try:
            daemons = json.loads(text) if text else {}
        except ValueError:
            return []
        pids = [d.get("pid") for d in daemons.values() if isinstance(d, dict)]
        return [p for p in pids if isinstance(p, int) and p in self.cmd]

    def node_zygote(self) -> list[int]:
        zygotes = self._with("pilot.agent.node.zygote")
        daemons = set(self.node_daemon())
        return [p for p in zygotes if p not in daemons and ppid(p) not in zygotes]

    def of(self, target: str) -> list[int]:
        return sorted(p for p in getattr(self, target)() if alive(p))


def signal_pid(pid: int, sig: int) -> bool:
    """Whether `pid` was there to get `sig`."""
    return processes.signal_process(pid, sig)


def stop(pid: int) -> bool:
    return signal_pid(pid, signal.SIGSTOP)


def cont(pid: int) -> bool:
    return signal_pid(pid, signal.SIGCONT)


class SmallDisk:
    """A tmpfs of `size` on `path` (root): filled and freed on demand, unmounted at the end."""

    def __init__(self, path: str, size: str = "32m") -> None:
        self.path, self.size = path, size
        self.filler = os.path.join(path, ".chaos-filler")
        self.mounted = False

    def mount(self) -> None:
        os.makedirs(self.path, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0700", "tmpfs", self.path],
            check=True, capture_output=True, timeout=20,
        )  # fmt: skip
        self.mounted = True

    def fill(self) -> int:
        """Fill it up (one file, until ENOSPC); the bytes written."""
        n = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for block in (1 << 20, 4096, 1):
                try:
                    while True:
                        n += os.write(fd, b"x" * block)
                except OSError:
                    pass
        finally:
            os.close(fd)
        return n

    def free(self) -> None:
        try:
            os.unlink(self.filler)
        except FileNotFoundError:
            pass

    def unmount(self) -> str | None:
        """Unmounted (lazily if still busy); what went wrong, or None."""
        if not self.mounted:
            return None
        self.free()
        out = subprocess.run(["umount", self.path], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            lazy = subprocess.run(["umount", "-l", self.path], capture_output=True, text=True)
            if lazy.returncode != 0:
                return f"umount {self.path}: {out.stderr.strip()} / {lazy.stderr.strip()}"
        self.mounted = False
        return None


def netns_of(pid: int, names: list[str]) -> str | None:
    """Which of the namespaces `names` (/run/netns/NAME) process `pid` is in."""
    try:
        ino = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None
    for name in names:
        try:
            if os.stat(f"/run/netns/{name}").st_ino == ino:
                return name
        except OSError:
            continue
    return None
