"""The processes a pilot is made of, named once, and the one way to signal them.

Every process the system starts with `python -m` is named here (the folders are subpackages of
`pilot` as installed: agent/ is pilot.agent):
    BOOTSTRAP        pilot.partition.bootstrap   the pilot job's first process
    AGENT            pilot.agent                 one partition's agent (agent/agent.py)
    ZYGOTE           pilot.agent.zygote          forks agents that have their code imported
    NODE_DAEMON      pilot.agent.node_daemon     one per node of a multi-node pilot
    FUNCTION_WORKER  pilot.agent.function_worker a partition's Python worker for function units
    CLI              pilot                       the `pilot` command line

`signal_group` / `signal_process` send a signal to a process group / process that may have
ended already: a gone target is not an error (its parent reaps it), and they say whether it
was still there.
"""

from __future__ import annotations

import os
import signal
import sys

BOOTSTRAP = "pilot.partition.bootstrap"
AGENT = "pilot.agent"
ZYGOTE = "pilot.agent.zygote"
NODE_DAEMON = "pilot.agent.node_daemon"
FUNCTION_WORKER = "pilot.agent.function_worker"
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
