"""The `exec` launch method: one node daemon per (logical) node on this machine, each a fresh
interpreter (`python -m pilot.agent.node.daemon ...`).

What `fork` did before it forked daemons from a zygote (partition/launch/fork.py), kept as the
baseline bench/bringup.py measures `fork` against, and as the base of `netns`, whose daemons
start under nsenter.  Node i is a daemon started with `--hint i --name NAME --watch-parent` (it
halts when the bootstrap is gone); its output goes to LOG_DIR/node.<i>.log.  Each start costs
an interpreter and the daemon's imports (~0.1-0.3 s of CPU), all paid on this host.  The
NodeLaunch interface is in partition/launch/base.py.
"""

from __future__ import annotations

import os
import subprocess

from pilot.partition.launch.base import OwnProcesses


class ExecLaunch(OwnProcesses):
    method = "exec"

    @classmethod
    def for_nodes(cls, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        return cls(n, argv, log_dir, env, names)

    def __init__(self, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        self.n = n
        self.argv = argv
        self.log_dir = log_dir
        self.env = env
        self._names = list(names)
        self.procs: dict[int, subprocess.Popen] = {}  # hint -> its daemon

    def command(self, hint: int) -> list[str]:
        return [*self.argv, "--hint", str(hint), "--name", self._names[hint], "--watch-parent"]

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        for hint in range(self.n):
            with open(os.path.join(self.log_dir, f"node.{hint}.log"), "ab") as out:
                self.procs[hint] = subprocess.Popen(
                    self.command(hint),
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                )
