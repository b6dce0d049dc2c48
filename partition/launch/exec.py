"""The `fork` launch method: one node daemon process per (logical) node on this machine.

For tests, benchmarks and single-host runs: node i is a daemon started with `--hint i --name
NAME --watch-parent` (it halts when the bootstrap is gone); its output goes to
LOG_DIR/node.<i>.log.  The NodeLaunch interface is in partition/launch/base.py.
"""

from __future__ import annotations

import os
import subprocess

from pilot.partition.launch.base import exit_codes, stop_processes


class ForkLaunch:
    method = "fork"

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

    def names(self) -> list[str]:
        return self._names

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

    def exited(self) -> dict[int, int]:
        return exit_codes(self.procs)

    def stop(self, grace: float = 3.0) -> None:
        stop_processes(list(self.procs.values()), grace)
