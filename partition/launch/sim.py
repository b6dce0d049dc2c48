"""The `sim` launch method: simulated nodes, many node daemons to a process on this machine.

    python -m pilot.agent.node.sim LOG_DIR/sim.<k>.json <the node daemon's arguments>

Host k runs the daemons of nodes k*PER_HOST .. (k+1)*PER_HOST-1 in one loop (agent/node/sim.py:
each a real NodeDaemon, its protocol, keys, pulse, table, bring-up and halt; what runs a unit
is simulated); its output goes to LOG_DIR/sim.<k>.log.  A host's end is the end of every node
it ran (`exited()` reports each of its hints).  The NodeLaunch interface is in
partition/launch/base.py.
"""

from __future__ import annotations

import json
import os
import subprocess

from pilot import processes
from pilot.partition.launch.base import exit_codes, launched_pids, stop_processes

PER_HOST = 256  # simulated nodes a host process runs
# memory, measured by bench/nodes.py (RSS, 64 -> 1,024 nodes): what a simulated node costs its
# host (its daemon, three sockets with CURVE: ~280 KB), the bootstrap (its two connections and
# entries: ~140 KB) and its partition's agent (its connection to it, its pool: ~80 KB), and
# what each process costs before any node
NODE_BYTES = 512 * 1024
HOST_BYTES = 40 * 2**20
AGENT_BYTES = 60 * 2**20
BOOTSTRAP_BYTES = 80 * 2**20


def memory_estimate(nodes: int, partitions: int) -> int:
    """Bytes a simulated pilot of `nodes` nodes and `partitions` partitions needs, in all."""
    hosts = -(-nodes // PER_HOST)
    return nodes * NODE_BYTES + hosts * HOST_BYTES + partitions * AGENT_BYTES + BOOTSTRAP_BYTES


class SimLaunch:
    method = "sim"
    fd = None  # (the bootstrap's own children: exited() polls them)

    @classmethod
    def for_nodes(cls, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        return cls(rcfg, n, argv, log_dir, env, names)

    def __init__(self, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        daemon = argv.index(processes.NODE_DAEMON)  # (python -m MODULE args...)
        self.python, self.args = argv[: daemon - 1], argv[daemon + 1 :]
        self.args += ["--cores", str(rcfg.cores_per_node), "--gpus", str(rcfg.gpus_per_node)]
        self.n = n
        self.log_dir = log_dir
        self.env = env
        self._names = list(names)
        self.hosts: list[subprocess.Popen] = []
        self.procs: dict[int, subprocess.Popen] = {}  # hint -> the host that runs its daemon

    def names(self) -> list[str]:
        return self._names

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        for k, first in enumerate(range(0, self.n, PER_HOST)):
            hints = range(first, min(first + PER_HOST, self.n))
            nodes = os.path.join(self.log_dir, f"sim.{k}.json")
            with open(nodes, "w") as f:
                json.dump([[h, self._names[h]] for h in hints], f)
            argv = [*self.python, "-m", processes.NODE_SIM, nodes, *self.args]
            with open(os.path.join(self.log_dir, f"sim.{k}.log"), "ab") as out:
                host = subprocess.Popen(
                    argv,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                )
            self.hosts.append(host)
            self.procs.update(dict.fromkeys(hints, host))

    def exited(self) -> dict[int, int]:
        return exit_codes(self.procs)

    def pids(self) -> set[int]:
        return launched_pids(self.procs)

    def stop(self, grace: float = 3.0) -> None:
        stop_processes(self.hosts, grace)
