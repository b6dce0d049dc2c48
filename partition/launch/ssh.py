"""The `ssh` launch method: one ssh per node, each starting that node's daemon.

    ssh [launcher_options] -o BatchMode=yes HOST_i
        'cd LOG_DIR && exec env K=V ... python -m pilot.agent.node_daemon ... --hint i
         --name NAME_i --watch-parent >>LOG_DIR/node.<i>.log 2>&1'

For sites whose nodes neither srun nor an mpiexec reaches (an LSF site whose starter is jsrun, a
PBS site without PALS or hydra): the nodes must take the user's ssh key, as on most clusters
inside a job.  The hosts and names are mpiexec's (`job_hosts`: the resource config's `hosts`,
else the job's node file).  A remote shell starts from a login environment, not the
bootstrap's: the bootstrap's environment is given on the command line (`env K=V ...`, but for
the variables of its own ssh session and shell), so a daemon, and the units it starts, see
what they would see started here.  The daemon halts when its parent (sshd's session) is gone,
which is when its ssh here ends (stop: SIGTERM, then SIGKILL).  The command is the resource
config's `launcher` (default ssh) with its `launcher_options` (say `-i KEY`, `-p PORT`).  The
NodeLaunch interface is in partition/launch/base.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess

from pilot.partition.launch.base import exit_codes, launched_pids, stop_processes
from pilot.partition.launch.mpiexec import job_hosts, node_names

# the variables of this host's shell and ssh session, which the remote one sets itself
LOCAL_ONLY = {"PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "HOST", "TERM", "TMUX", "DISPLAY"}
LOCAL_PREFIXES = ("SSH_", "BASH_FUNC_")


def remote_line(argv: list[str], env: dict, log_dir: str, hint: int, name: str) -> str:
    """The shell line the remote sshd runs for node `hint`."""
    keep = sorted(
        (k, v)
        for k, v in env.items()
        if k not in LOCAL_ONLY and not k.startswith(LOCAL_PREFIXES) and k.isidentifier()
    )
    words = [
        "exec",
        "env",
        *(f"{k}={v}" for k, v in keep),
        *argv,
        "--hint",
        str(hint),
        "--name",
        name,
        "--watch-parent",
    ]
    log = os.path.join(log_dir, f"node.{hint}.log")
    return f"cd {shlex.quote(log_dir)} && {shlex.join(words)} >>{shlex.quote(log)} 2>&1"


class SshLaunch:
    method = "ssh"

    @classmethod
    def for_nodes(cls, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        hosts = job_hosts(env, rcfg, n, cls.method)
        return cls(rcfg, n, argv, log_dir, env, hosts)

    def __init__(self, rcfg, n: int, argv: list[str], log_dir: str, env: dict, hosts) -> None:
        self.n = n
        self.argv = argv
        self.log_dir = log_dir
        self.env = env
        self.hosts = hosts
        self._names = node_names(rcfg, hosts)
        self.launcher = [rcfg.launcher or "ssh", *rcfg.launcher_options, "-o", "BatchMode=yes"]
        self.fd = None  # (the bootstrap's own children: exited() polls them)
        self.procs: dict[int, subprocess.Popen] = {}  # hint -> its ssh

    def names(self) -> list[str]:
        return self._names

    def command(self, hint: int) -> list[str]:
        line = remote_line(self.argv, self.env, self.log_dir, hint, self._names[hint])
        return [*self.launcher, self.hosts[hint], line]

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        for hint in range(self.n):
            with open(os.path.join(self.log_dir, f"ssh.{hint}.log"), "ab") as out:
                self.procs[hint] = subprocess.Popen(
                    self.command(hint),
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                )

    def pids(self) -> set[int]:
        return launched_pids(self.procs)

    def exited(self) -> dict[int, int]:
        return exit_codes(self.procs)

    def stop(self, grace: float = 3.0) -> None:
        stop_processes(list(self.procs.values()), grace)
