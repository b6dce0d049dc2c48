"""The namespace SLURM of the slurm-netns resource: tests/slurm.sh with PILOT_SLURM_NETNS=1.

slurmctld and the clients on the login node (namespace `cxlogin`, 10.214.1.1 on a bridge),
compute node K in namespace `cxnodeK` (10.214.1.(10+K)) on link vK of that bridge; state
under /tmp/pilot-chaos-slurm (its own tag and directory: tests/test_cluster.py's cluster, tag
`pc`, may run beside it).  The client of a seed runs in the login namespace (`wrap`); squeue
and scancel too.  Root only.  Brought up once per run and down at its end (`down` cancels
every job of it and stops its daemons by pid; see tests/slurm.sh for the pitfalls it handles).
"""

from __future__ import annotations

import os
import subprocess

import yaml

from tests import netns
from tests.chaos import inject

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "slurm.sh")
TAG = "cx"
NODES = 4
LOGIN = f"{TAG}login"
LOGIN_ADDR = "10.214.1.1"
NODE_TIMEOUT = 15


def unavailable() -> str | None:
    from tests.test_slurm import _why_not

    return netns.unavailable() or _why_not()


class Cluster:
    def __init__(self) -> None:
        self.env = dict(
            os.environ,
            PILOT_SLURM_NETNS="1",
            PILOT_SLURM_NODES=str(NODES),
            PILOT_SLURM_TAG=TAG,
            PILOT_SLURM_DIR="/tmp/pilot-chaos-slurm",
        )
        self.conf: str | None = None

    def up(self) -> None:
        out = subprocess.run(
            ["bash", SCRIPT, "up"], capture_output=True, text=True, timeout=600, env=self.env
        )
        if out.returncode != 0:
            raise RuntimeError(f"tests/slurm.sh up failed: {out.stderr[-2000:]}")
        exports = dict(
            line[len("export ") :].split("=", 1)
            for line in out.stdout.splitlines()
            if line.startswith("export ")
        )
        self.conf = exports["SLURM_CONF"]

    def down(self) -> str | None:
        out = subprocess.run(
            ["bash", SCRIPT, "down"], capture_output=True, text=True, timeout=300, env=self.env
        )
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        mine = [line.split()[0] for line in left.splitlines() if line.startswith(TAG)]
        if out.returncode != 0 or mine:
            return f"tests/slurm.sh down: rc {out.returncode}, namespaces left {mine}"
        return None

    def resource(self, path: str) -> str:
        """slurm.localhost (configs/slurm.yaml) as a config file at `path`, with node_timeout
        NODE_TIMEOUT: a node daemon killed under srun is noticed by its silence only (the
        bootstrap is not its parent), 60 s + 3 s with the shipped config."""
        with open(os.path.join(ROOT, "configs", "slurm.yaml")) as f:
            cfg = yaml.safe_load(f)["localhost"]
        with open(path, "w") as f:
            yaml.safe_dump(dict(cfg, node_timeout=NODE_TIMEOUT), f)
        return path

    def client_env(self, env: dict) -> dict:
        return dict(env, SLURM_CONF=self.conf)

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run on the login node (nsenter execs it: the pid is argv's own)."""
        return ["nsenter", f"--net=/run/netns/{LOGIN}", *argv]

    def _slurm(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.wrap(list(argv)), capture_output=True, text=True, timeout=30,
            env=dict(os.environ, SLURM_CONF=self.conf or ""),
        )  # fmt: skip

    def jobs(self) -> list[str]:
        """Every job of this cluster not ended (pending, running, completing)."""
        out = self._slurm("squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i %j %T")
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]

    def scancel(self, job: str) -> str:
        out = self._slurm("scancel", str(job))
        return (out.stdout + out.stderr).strip()

    def node_of(self, pid: int) -> int | None:
        """K of the compute node namespace process `pid` runs in."""
        name = inject.netns_of(pid, [f"{TAG}node{k}" for k in range(1, NODES + 1)])
        return int(name[len(TAG) + 4 :]) if name else None

    def cut_node(self, k: int) -> None:
        netns.silence(LOGIN, k)

    def cut_client(self, k: int) -> None:
        """Node k's traffic with the login node (the client) dropped, its other traffic not."""
        netns.silence_between(LOGIN, k, LOGIN_ADDR)

    def mend(self, k: int) -> None:
        netns.mend(LOGIN, k)
