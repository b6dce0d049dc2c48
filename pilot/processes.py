"""The processes a pilot is made of, named once, and the one way to signal them.

Every process the system starts with `python -m` is named here (the folders are subpackages of
`pilot` as installed: agent/ is pilot.agent):
    BOOTSTRAP        pilot.partition.bootstrap   the pilot job's first process
    AGENT            pilot.agent                 one partition's agent (agent/agent.py)
    ZYGOTE           pilot.agent.zygote          forks agents that have their code imported
    NODE_DAEMON      pilot.agent.node.daemon     one per node of a multi-node pilot
    NODE_ZYGOTE      pilot.agent.node.zygote     forks node daemons (launch method fork)
    NODE_SIM         pilot.agent.node.sim        many simulated nodes' daemons (launch method
                                                 sim: the `local.sim` resource)
    FUNCTION_WORKER  pilot.agent.workers.function_worker
                                                 a partition's Python worker for function units
    FUNCTION_ONCE    pilot.agent.workers.function_once
                                                 one function unit's call on a node daemon's node
    CLI              pilot                       the `pilot` command line

`signal_group` / `signal_process` send a signal to a process group / process that may have
ended already: a gone target is not an error (its parent reaps it), and they say whether it
was still there.

An interpreter's path may name $VARS (an RP config's virtenv `/scratch/gpfs/$USER/ve.rp`): they
are the target's, expanded by the shell that runs it (`expanding`: the path as a shell word).
"""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import sys
import time

BOOTSTRAP = "pilot.partition.bootstrap"
AGENT = "pilot.agent"
ZYGOTE = "pilot.agent.zygote"
NODE_DAEMON = "pilot.agent.node.daemon"
JOIN = "pilot.partition.nodes.join_job"  # what a job that grows a pilot runs
NODE_ZYGOTE = "pilot.agent.node.zygote"
NODE_SIM = "pilot.agent.node.sim"
FUNCTION_WORKER = "pilot.agent.workers.function_worker"
FUNCTION_ONCE = "pilot.agent.workers.function_once"  # one call, on a node daemon's node
CLI = "pilot"
VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")  # $NAME or ${NAME}: what a path may name


def python_m(module: str, *args: str, python: str | None = None) -> list[str]:
    """The argv that runs `module` with `python` (default: this interpreter)."""
    return [python or sys.executable, "-m", module, *args]


def expanding(text: str) -> tuple[str, list[str]]:
    """`text` as one shell word in which $NAME, ${NAME} and a leading ~ expand where it is run,
    all else taken literally; and the names of the variables it needs."""
    if text == "~" or text.startswith("~/"):
        text = "${HOME}" + text[1:]
    words: list[str] = []
    names: list[str] = []
    at = 0
    for m in VAR.finditer(text):
        if m.start() > at:
            words.append(shlex.quote(text[at : m.start()]))
        names.append(m.group(1) or m.group(2))
        words.append(f'"${{{names[-1]}}}"')
        at = m.end()
    if at < len(text) or not words:
        words.append(shlex.quote(text[at:]))
    return "".join(words), names


def names_vars(path: str | None) -> bool:
    """`path` names variables (or ~) that the shell where it is run is to expand."""
    return path is not None and bool(path) and bool(expanding(path)[1])


def signal_group(pgid: int, sig: int) -> bool:
    """Signal process group `pgid`; False when it is gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def signal_process(pid: int, sig: int) -> bool:
    """Signal process `pid`; False when it is gone."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def signal_name(n: int) -> str:
    """SIGTERM, ... or "40" (real-time signals have no name in `signal.Signals`)."""
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


class Watched:
    """Whether process `pid`, not necessarily this one's parent, has ended: its pidfd polls
    readable when it does (Linux 5.3+); without pidfds, the pid's absence says so."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        self.ended = False
        try:
            self.fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.ended = True
        except (AttributeError, OSError):  # no pidfds here: kill(pid, 0) below
            pass

    def wait(self, timeout: float) -> bool:
        """Whether it ended within `timeout` s."""
        deadline = time.monotonic() + timeout
        while not self.gone() and (left := deadline - time.monotonic()) > 0:
            if self.fd is not None:
                select.select([self.fd], [], [], left)
            else:
                time.sleep(min(left, 0.05))
        return self.ended

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def gone(self) -> bool:
        if not self.ended and self.fd is not None:
            self.ended = bool(select.select([self.fd], [], [], 0)[0])
        elif not self.ended:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.ended = True
            except PermissionError:  # someone else's process has it: not ours
                self.ended = True
        return self.ended
