"""Find and kill, by pid, processes that belong to a session.

Every process the system starts for a session (bootstrap, agents, units) carries
PILOT_SESSION_ID=<session uid> in its environment; /proc/<pid>/environ tells which ones are
left.  Only processes of the current user can be read, which are the only ones we start.
"""

from __future__ import annotations

import os
import signal
import time

from pilot import processes


def session_processes(session_uid: str) -> list[int]:
    marker = f"PILOT_SESSION_ID={session_uid}".encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat.rsplit(b")", 1)[-1].split()[0] == b"Z":
            continue  # a zombie is gone already; its parent reaps it
        if marker in env.split(b"\0"):
            found.append(int(name))
    return found


def kill_session_processes(session_uid: str, grace: float = 1.0) -> list[int]:
    """SIGTERM what is left, SIGKILL after `grace` s; returns the pids that were found."""
    pids = session_processes(session_uid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            processes.signal_process(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and session_processes(session_uid):
            time.sleep(0.05)
        if not session_processes(session_uid):
            break
    return pids
