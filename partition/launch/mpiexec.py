"""The `mpiexec` launch method: one mpiexec over the job's nodes, one node daemon rank per node.

    mpiexec [launcher_options] -n N --ppn 1 --hostfile LOG_DIR/nodes.hosts
            /bin/sh -c WRAP sh python -m pilot.agent.node.daemon ...

For PBS Pro sites whose MPI starter is Cray's PALS (Polaris, Aurora), and any site with an MPICH
(hydra) or PALS mpiexec: both read `-n`, `--ppn` and `--hostfile`, and place rank i on the
file's i-th host.  WRAP gives each daemon its hint (the rank: PMI_RANK under hydra, PALS_RANKID
under PALS, PMIX_RANK / OMPI_COMM_WORLD_RANK elsewhere) and its node's name, and sends its
output to LOG_DIR/node.<rank>.log; the daemon halts when its parent (mpiexec's proxy) is gone.
The command is the resource config's `launcher` (default mpiexec), with its `launcher_options`
before the rest (hydra across hosts: `-launcher ssh -launcher-exec ...`).

The hosts, one per node in order (`job_hosts`): the resource config's `hosts` when it names them,
else the batch job's node file ($PBS_NODEFILE; $LSB_DJOB_HOSTFILE but for its first entry,
LSF's launch node; repeated names count once); the node names are `node_names`, else the
hosts.  mpiexec is one process for all nodes: its end is reported under the hint ALL_NODES.
The NodeLaunch interface is in partition/launch/base.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess

from pilot.partition.launch.base import ALL_NODES, OwnProcesses

NODE_FILES = ("PBS_NODEFILE", "LSB_DJOB_HOSTFILE", "PSIJ_NODEFILE")
RANK = "${PMI_RANK:-${PALS_RANKID:-${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-0}}}}"


def job_hosts(env: dict, rcfg, n: int, method: str) -> list[str]:
    """The host of each of `n` nodes: rcfg.hosts, else the batch job's node file; ValueError
    naming what is missing."""
    hosts = list(rcfg.hosts)
    if not hosts:
        for var in NODE_FILES:
            if env.get(var):
                try:
                    with open(env[var]) as f:
                        listed = [line.split()[0] for line in f if line.split()]
                except OSError as exc:
                    raise ValueError(f"launch_method={method}: {var}={env[var]}: {exc}") from None
                if var == "LSB_DJOB_HOSTFILE":
                    listed = without_launch_node(listed)
                hosts = list(dict.fromkeys(listed))
                break
    if len(hosts) < n:
        raise ValueError(
            f"launch_method={method}: {n} nodes, but only {len(hosts)} host(s) known "
            f"({hosts[:8]}): from the resource config's `hosts` or the job's node file "
            f"({' / '.join('$' + v for v in NODE_FILES)})"
        )
    return hosts[:n]


def without_launch_node(listed: list[str]) -> list[str]:
    """LSF's node file lists the job's launch (batch) node first, once, then each compute
    node once per slot (Summit, Lassen: `batch3`, then `a01n01` x 42, ...): the bootstrap runs
    there, no daemon of ours.  The first host is skipped when it is listed once and others
    follow (as RADICAL-Pilot leaves out the batch node); one listed again is a compute node."""
    if len(set(listed)) > 1 and listed.count(listed[0]) == 1:
        return listed[1:]
    return listed


def node_names(rcfg, hosts: list[str]) -> list[str]:
    n = len(hosts)
    return list(rcfg.node_names[:n]) if len(rcfg.node_names) >= n else list(hosts)


def wrap(names: list[str], log_dir: str) -> str:
    """The shell line each rank runs: its daemon with --hint RANK --name NAME, output to its log."""
    listed = " ".join(shlex.quote(x) for x in names)
    log = shlex.quote(os.path.join(log_dir, "node."))
    return (
        f"r={RANK}; i=0; for n in {listed}; do "
        '[ "$i" = "$r" ] && set -- "$@" --name "$n"; i=$((i+1)); done; '
        f'exec "$@" --hint "$r" --watch-parent >>{log}"$r".log 2>&1'
    )


class OnHosts(OwnProcesses):
    """The common part of a launch that reaches each node by its host name (mpiexec, ssh):
    the hosts (`job_hosts`), their node names and the resource config's launcher."""

    method = ""

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
        self.launcher = [rcfg.launcher or self.method, *rcfg.launcher_options]
        self.procs: dict[int, subprocess.Popen] = {}  # hint (ALL_NODES: one for all) -> it


class MpiexecLaunch(OnHosts):
    method = "mpiexec"

    def command(self) -> list[str]:
        hostfile = os.path.join(self.log_dir, "nodes.hosts")
        wrapped = ["/bin/sh", "-c", wrap(self._names, self.log_dir), "sh", *self.argv]
        return [*self.launcher, "-n", str(self.n), "--ppn", "1", "--hostfile", hostfile, *wrapped]

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        with open(os.path.join(self.log_dir, "nodes.hosts"), "w") as f:
            f.write("".join(f"{h}\n" for h in self.hosts))
        with open(os.path.join(self.log_dir, "mpiexec.log"), "ab") as out:
            self.procs[ALL_NODES] = subprocess.Popen(
                self.command(),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                close_fds=True,
            )
