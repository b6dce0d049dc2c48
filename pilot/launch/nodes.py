"""Launch methods for node daemons (agent/node_daemon.py), one daemon per node of the pilot.

    fork    a daemon process per node on this machine (logical nodes, named by the resource
            config's node_names); for tests, benchmarks and single-host runs
    netns   a daemon per node, each inside the network namespace the resource config's
            `hosts` names (test hosts made with `ip netns` and veth); the bootstrap and its
            agents stay in the namespace they were started in
    srun    one `srun` step over the allocation, one daemon task per node (SLURM numbers them;
            SLURM_NODEID is the daemon's hint)

`start()` returns at once; `names()` are the nodes expected (what an error names when one does
not report), `exited()` the hints whose process has ended, `stop()` ends whatever is still
running: SIGTERM, then SIGKILL after a grace period, every wait bounded.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

log = logging.getLogger("bootstrap.nodes")


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


class NodeLaunch:
    def __init__(self, method: str, n: int, argv: list[str], log_dir: str, names, hosts, env):
        self.method = method
        self.n = n
        self.argv = argv
        self.log_dir = log_dir
        self._names = list(names)
        self.hosts = list(hosts or [])
        self.env = env
        self.procs: dict[int, subprocess.Popen] = {}  # hint -> process (srun: hint -1)

    def names(self) -> list[str]:
        return self._names

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        if self.method == "srun":
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
            self.procs[-1] = subprocess.Popen(
                cmd, env=self.env, stdin=subprocess.DEVNULL, close_fds=True
            )
            return
        for hint in range(self.n):
            cmd = [*self.argv, "--hint", str(hint), "--name", self._names[hint], "--watch-parent"]
            if self.method == "netns":
                cmd = ["nsenter", f"--net=/run/netns/{self.hosts[hint]}", *cmd]
            with open(os.path.join(self.log_dir, f"node.{hint}.log"), "ab") as out:
                self.procs[hint] = subprocess.Popen(
                    cmd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                )

    def exited(self) -> dict[int, int]:
        """hint -> exit code of daemon processes that have ended (srun: the step, hint -1)."""
        return {h: p.returncode for h, p in self.procs.items() if p.poll() is not None}

    def stop(self, grace: float = 3.0) -> None:
        """Daemons that said bye exit on their own (and srun with them): give them `grace`
        seconds, then SIGTERM, then SIGKILL."""
        deadline = time.monotonic() + grace
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        live = [p for p in self.procs.values() if p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in live:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("down.nodes: daemon launch pid %d ignored SIGTERM; killed", p.pid)
                p.kill()
                try:
                    p.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    log.error("down.nodes: pid %d did not die within 5 s of SIGKILL", p.pid)


def for_resource(rcfg, n: int, endpoint: str, cfg: dict, log_dir: str) -> NodeLaunch:
    """The launch of `n` node daemons for resource config `rcfg`, reporting to `endpoint`."""
    python = rcfg.python or sys.executable
    argv = [
        python,
        "-m",
        "agent.node_daemon",
        "--bootstrap",
        endpoint,
        "--pilot",
        cfg["pilot"],
        "--session",
        cfg["session"],
        "--timeout",
        str(rcfg.node_timeout),
    ]
    if cfg.get("curve"):
        argv += ["--curve", cfg["curve"]]
    method = rcfg.launch_method
    if method == "srun":
        nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
        names = expand_hostlist(nodelist) if nodelist else []
        names = (names + [f"slurm node {i}" for i in range(len(names), n)])[:n]
    elif cfg.get("network"):  # a network config file names the nodes
        names = [cfg["network"][str(i)]["name"] for i in range(n)]
    else:
        names = [rcfg.node_name(i) for i in range(n)]
    hosts = rcfg.hosts
    if method == "netns" and len(hosts) < n:
        raise ValueError(f"launch_method=netns: {n} nodes but only {len(hosts)} hosts configured")
    return NodeLaunch(method, n, argv, log_dir, names, hosts, dict(os.environ))
