"""Agents started by the node daemon of their own node (resources whose agents need nodes of
their own: agent_overhead.nodes, the RFC's Cray case).

The bootstrap's NodeSet (partition/nodes/node_set.py) sends that daemon `agent {uid, argv, log}`;
the daemon reports `agent_exit {uid, code}` when the agent ends, and the NodeSet records it
here (`exited`).  When the node is lost, or the message cannot be sent because the node is
down, the agent is over without an exit code (`lost`).  Interface: AgentProcess
(partition/manager.py).
"""

from __future__ import annotations

import time

from pilot.partition.manager import AgentExit
from pilot.wire.protocol import msg


class HostedAgent:
    def __init__(self, nodes, index: int, uid: str) -> None:
        self.nodes, self.index, self.uid = nodes, index, uid  # nodes: the NodeSet
        self.pid: int | None = None  # known to its daemon only
        self.ended: AgentExit | None = None

    def exited(self, code: int) -> None:
        if self.ended is None:
            self.ended = AgentExit.of_code(code)

    def lost(self, why: str) -> None:
        if self.ended is None:
            self.ended = AgentExit(None, why)

    def poll(self) -> AgentExit | None:
        return self.ended

    def kill(self) -> None:
        if self.ended is None:
            self.nodes.send_index(self.index, msg(b"agent_kill", {"uid": self.uid}))

    def wait(self, timeout: float) -> AgentExit | None:
        deadline = time.monotonic() + timeout
        while self.ended is None and time.monotonic() < deadline:
            self.nodes.read(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.ended
