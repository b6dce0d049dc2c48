"""The processes a pilot is made of, named once, and the one way to signal them.

Every process the system starts with `python -m` is named here:
    BOOTSTRAP     partition.bootstrap   the pilot job's first process (partition/bootstrap.py)
    AGENT         agent                 one partition's agent (agent/agent.py)
    ZYGOTE        agent.zygote          forks agents that have their code imported already
    NODE_DAEMON   agent.node_daemon     one per node of a multi-node pilot
    CLI           pilot                 the `pilot` command line

`signal_group` / `signal_process` send a signal to a process group / process that may have
ended already: a gone target is not an error (its parent reaps it), and they say whether it
was still there.
"""

from __future__ import annotations

import os
import signal
import sys

BOOTSTRAP = "partition.bootstrap"
AGENT = "agent"
ZYGOTE = "agent.zygote"
NODE_DAEMON = "agent.node_daemon"
CLI = "pilot"


def python_m(module: str, *args: str, python: str | None = None) -> list[str]:
    """The argv that runs `module` with `python` (default: this interpreter)."""
    return [python or sys.executable, "-m", module, *args]


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
