"""The `ssh` launch method: one ssh per node, each starting that node's daemon.

    ssh [launcher_options] -o BatchMode=yes HOST_i bash -s   <  (its stdin, the script:)
        export K='V'                 (one line per variable of the bootstrap's environment)
        ...
        cd LOG_DIR || exit 1
        exec python -m pilot.agent.node.daemon ... --hint i --name NAME_i --watch-parent
            </dev/null >>LOG_DIR/node.<i>.log 2>&1

For sites whose nodes neither srun nor an mpiexec reaches (an LSF site whose starter is jsrun, a
PBS site without PALS or hydra): the nodes must take the user's ssh key, as on most clusters
inside a job.  The hosts and names are mpiexec's (`job_hosts`: the resource config's `hosts`,
else the job's node file).  A remote shell starts from a login environment, not the
bootstrap's: the bootstrap's environment (but for the variables of its own ssh session and
shell) is exported by the script, so a daemon, and the units it starts, see what they would
see started here.  The script goes on ssh's stdin, never on its command line: the command
line of every process is public (`ps`), and the environment holds secrets
(PILOT_DATABASE_URL, tokens); one argument may not exceed 128 KiB (E2BIG), the environment
may.  Its stdin is a temporary file without a name (mode 0600): ssh sends it, then EOF; the
remote bash reads it up to the `exec`, and the daemon's own stdin is /dev/null, so the
daemon's life is not tied to its stdin.  The daemon halts when its parent (sshd's session)
is gone, which is when its ssh here ends (stop: SIGTERM, then SIGKILL).  The command is the
resource config's `launcher` (default ssh) with its `launcher_options` (say `-i KEY`, `-p
PORT`).  The NodeLaunch interface is in partition/launch/base.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

from pilot.partition.launch.mpiexec import OnHosts

REMOTE = ["bash", "-s"]  # the remote command: a bash reading its script from ssh's stdin
# the variables of this host's shell and ssh session, which the remote one sets itself (bash's
# read-only ones among them: exporting them would fail)
LOCAL_ONLY = {"PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "HOST", "TERM", "TMUX", "DISPLAY"}
LOCAL_ONLY |= {"SHELLOPTS", "BASHOPTS", "UID", "EUID", "PPID"}
LOCAL_PREFIXES = ("SSH_", "BASH_")


def remote_script(argv: list[str], env: dict, log_dir: str, hint: int, name: str) -> str:
    """The script the remote bash reads on its stdin for node `hint`."""
    lines = [
        f"export {k}={shlex.quote(v)}"
        for k, v in sorted(env.items())
        if k not in LOCAL_ONLY
        and not k.startswith(LOCAL_PREFIXES)
        and k.isascii()
        and k.isidentifier()
    ]
    words = [*argv, "--hint", str(hint), "--name", name, "--watch-parent"]
    log = os.path.join(log_dir, f"node.{hint}.log")
    lines.append(f"cd {shlex.quote(log_dir)} || exit 1")
    lines.append(f"exec {shlex.join(words)} </dev/null >>{shlex.quote(log)} 2>&1")
    return "\n".join(lines) + "\n"


class SshLaunch(OnHosts):
    method = "ssh"

    def __init__(self, rcfg, n: int, argv: list[str], log_dir: str, env: dict, hosts) -> None:
        super().__init__(rcfg, n, argv, log_dir, env, hosts)
        self.launcher += ["-o", "BatchMode=yes"]

    def command(self, hint: int) -> list[str]:
        return [*self.launcher, self.hosts[hint], *REMOTE]

    def script(self, hint: int) -> str:
        return remote_script(self.argv, self.env, self.log_dir, hint, self._names[hint])

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        for hint in range(self.n):
            log = os.path.join(self.log_dir, f"ssh.{hint}.log")
            with open(log, "ab") as out, tempfile.TemporaryFile() as script:
                script.write(os.fsencode(self.script(hint)))
                script.seek(0)
                self.procs[hint] = subprocess.Popen(
                    self.command(hint),
                    env=self.env,
                    stdin=script,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                )
