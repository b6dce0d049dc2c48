"""The fork-server loop the two zygotes share (agent/zygote.py forks agents, agent/node/zygote.py
forks node daemons): a single-threaded process that has imported what its children run, creates
no ZeroMQ context (so forking it is safe) and forks one child per request.

Protocol (JSON lines over the server's stdin / stdout; the zygote names its request fields and
what a child becomes):
    parent -> server   {...}                       one request: fork a child for it
    server -> parent   {"started": NAME, "pid": PID}   the child's pid (NAME: the zygote's
                                                       name of what it started)
                       {"exited": PID, "code": CODE}   a child ended (CODE < 0: signal)
                       {"error": TEXT, ...}            the request did not decode or the fork
                                                       failed (the zygote adds what it names)
The server exits when its stdin closes (its parent is gone, or done with it).  SIGCHLD wakes
its loop through a self-pipe; children are reaped with agent/spawn.py's `exits`.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
from collections.abc import Callable

from pilot.agent.spawn import exits

READ_SIZE = 1 << 20  # raw reads of stdin: a buffered readline could hide lines


def serve(
    become: Callable[[dict], None],
    started_as: Callable[[dict], object],
    error_fields: Callable[[bytes, dict], dict],
) -> int:
    """Fork `become(request)` (which never returns) for each request line; say what happened
    on stdout.  `started_as(request)` is the name in its "started" line; `error_fields(line,
    request)` what an "error" line carries besides (request: {} when the line did not decode).
    Returns 0 when stdin closes."""
    out = sys.stdout
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(rfd, selectors.EVENT_READ)
    buf = b""

    def say(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    while True:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj == 0:
                data = os.read(0, READ_SIZE)
                if not data:
                    return 0
                *lines, buf = (buf + data).split(b"\n")
                for line in lines:
                    req: dict = {}
                    try:
                        req = json.loads(line)
                        pid = os.fork()
                    except (ValueError, OSError) as exc:
                        say({"error": str(exc), **error_fields(line, req)})
                        continue
                    if pid == 0:
                        sel.close()
                        os.close(rfd)
                        os.close(wfd)
                        become(req)
                        os._exit(1)  # (become never returns)
                    say({"started": started_as(req), "pid": pid})
            else:
                try:
                    os.read(rfd, 4096)
                except BlockingIOError:
                    pass
        for pid, code in exits():
            say({"exited": pid, "code": code})


def child_stdio(log_path: str, mode: int) -> None:
    """In a forked child: stdout and stderr append to `log_path` (made with `mode`), stdin is
    /dev/null, and Python's sys streams are on those descriptors; no wakeup fd is left."""
    signal.set_wakeup_fd(-1)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    nul = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nul, 0)
    os.close(nul)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
