"""The `srun` launch method: one SLURM job step, one node daemon task per node.

    srun --nodes=N --ntasks=N --ntasks-per-node=1 --kill-on-bad-exit=0 --cpu-bind=none
         --output=LOG_DIR/node.%t.log  python -m pilot.agent.node.daemon ...

SLURM numbers the tasks: a daemon takes SLURM_NODEID as its hint.  `--cpu-bind=none` leaves
the daemon free to bind units itself.  The step is one process for all nodes: its end is
reported under the hint ALL_NODES.  Node names come from SLURM_JOB_NODELIST (compact form,
`node[1-3,7]`).  The NodeLaunch interface is in partition/launch/base.py.
"""

from __future__ import annotations

import os
import subprocess

from pilot.partition.launch.base import ALL_NODES, exit_codes, launched_pids, stop_processes


def expand_hostlist(spec: str) -> list[str]:
    """SLURM's compact host list ("node[1-3,7],gpu2") as names."""
    names, depth, cur = [], 0, ""
    parts = []
    for ch in spec:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    for part in parts:
        if "[" not in part:
            names.append(part)
            continue
        prefix, rest = part.split("[", 1)
        ranges, suffix = rest.split("]", 1)
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{width}d}{suffix}")
    return names


class SrunLaunch:
    method = "srun"

    @classmethod
    def for_nodes(cls, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        return cls(n, argv, log_dir, env)  # (SLURM names its nodes)

    def __init__(self, n: int, argv: list[str], log_dir: str, env: dict) -> None:
        self.n = n
        self.argv = argv
        self.log_dir = log_dir
        self.env = env
        self.fd = None  # (the bootstrap's own children: exited() polls them)
        self.procs: dict[int, subprocess.Popen] = {}  # ALL_NODES -> the srun step
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        names = expand_hostlist(nodelist) if nodelist else []
        self._names = (names + [f"slurm node {i}" for i in range(len(names), n)])[:n]

    def names(self) -> list[str]:
        return self._names

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        cmd = [
            "srun",
            f"--nodes={self.n}",
            f"--ntasks={self.n}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=0",
            "--cpu-bind=none",
            f"--output={self.log_dir}/node.%t.log",
            *self.argv,
        ]
        self.procs[ALL_NODES] = subprocess.Popen(
            cmd, env=self.env, stdin=subprocess.DEVNULL, close_fds=True
        )

    def pids(self) -> set[int]:
        return launched_pids(self.procs)

    def exited(self) -> dict[int, int]:
        return exit_codes(self.procs)

    def stop(self, grace: float = 3.0) -> None:
        stop_processes(list(self.procs.values()), grace)
