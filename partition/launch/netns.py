"""The `netns` launch method: one node daemon per node, each inside a network namespace.

The resource config's `hosts` names one namespace per node (test hosts made with `ip netns`
and veth, tests/netns.py); the daemon of node i runs under `nsenter --net=/run/netns/HOST_i`,
otherwise as with `exec` (a fresh interpreter per daemon: the node zygote of `fork` forks in
the bootstrap's namespace).  The bootstrap and its agents stay in the namespace they were
started in.  The NodeLaunch interface is in partition/launch/base.py.
"""

from __future__ import annotations

from pilot.partition.launch.exec import ExecLaunch


class NetnsLaunch(ExecLaunch):
    method = "netns"

    @classmethod
    def for_nodes(cls, rcfg, n: int, argv: list[str], log_dir: str, env: dict, names: list[str]):
        return cls(n, argv, log_dir, env, names, rcfg.hosts)

    def __init__(self, n, argv, log_dir, env, names, hosts) -> None:
        if len(hosts) < n:
            raise ValueError(
                f"launch_method=netns: {n} nodes but only {len(hosts)} hosts configured"
            )
        super().__init__(n, argv, log_dir, env, names)
        self.hosts = list(hosts)

    def command(self, hint: int) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.hosts[hint]}", *super().command(hint)]
