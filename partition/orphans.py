"""Unit processes whose owner died: the bootstrap adopts them and ends them.

The bootstrap makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER): when an agent or a
node daemon dies (kill -9), the unit processes it started are re-parented to the bootstrap, not
to init.  They would otherwise run on with nobody to report them, holding cores that the pilot
hands out again.  When a partition's agent (or a node's daemon) is lost, `end_orphans` finds
the bootstrap's children that belong to it (by their PILOT_* environment, read from /proc),
kills each one's process group (SIGKILL) and reaps it.  Processes the bootstrap started itself
(the zygote, node daemon launches) are never touched: their pids are passed as `keep`.
At teardown, last, `end_children` ends whatever is still a child of the bootstrap, so that
nothing the job started outlives it.

Only Linux has subreapers; elsewhere `become_subreaper` says False and orphans go to init.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time

from pilot import processes

log = logging.getLogger("bootstrap.orphans")
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children() -> list[int]:
    """Pids of this process's children (from /proc)."""
    me = str(os.getpid()).encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == me:
            out.append(int(name))
    return out


def environment(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key.startswith(b"PILOT_"):
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def end_orphans(match: dict[str, str], keep: set[int], timeout: float = 5.0) -> list[str]:
    """Kill and reap the children (not in `keep`) whose environment has every item of
    `match`; returns the PILOT_UNIT_ID of each (bounded: `timeout` s for all)."""
    found = []
    for pid in children():
        if pid in keep:
            continue
        env = environment(pid)
        if all(env.get(k) == v for k, v in match.items()):
            processes.signal_group(pid, signal.SIGKILL)
            processes.signal_process(pid, signal.SIGKILL)
            found.append((pid, env.get("PILOT_UNIT_ID", "?")))
    deadline = time.monotonic() + timeout
    for pid, _ in found:
        while True:
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    if found:
        log.warning("orphans: %d unit process(es) of %s ended: %s", len(found), match, found[:10])
    return [uid for _, uid in found]


def end_children(grace: float = 2.0) -> list[int]:
    """(teardown, last) End every process still a child of this one: agents whose partition
    ended without their bye, adopted units, a zygote.  A subreaper that exits before them
    hands them to init, outside the batch job (SLURM's process tracking no longer sees them
    and the job ends with them still running).  SIGTERM, SIGKILL (and the process group of
    a group leader) after `grace` s, each reaped; returns the pids that were still running."""
    left = [pid for pid in children() if not _ended(pid)]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        alive = [pid for pid in left if not _ended(pid)]
        if not alive:
            break
        for pid in alive:
            if sig == signal.SIGKILL and _leads_group(pid):
                processes.signal_group(pid, sig)
            processes.signal_process(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not all(_ended(pid) for pid in alive):
            time.sleep(0.02)
    if left:
        log.warning("teardown: %d process(es) still ran and were ended: %s", len(left), left)
    return left


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _ended(pid: int) -> bool:
    """The child `pid` has ended (reaped now, or not ours / gone)."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not os.path.exists(f"/proc/{pid}")
    return done != 0
