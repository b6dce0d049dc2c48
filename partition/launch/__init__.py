"""Launch methods: how the bootstrap starts one node daemon (agent/node_daemon.py) per node.

    fork    partition/launch/fork.py    a daemon process per node on this machine (logical
                                        nodes named by the resource config's node_names)
    netns   partition/launch/netns.py   a daemon per node, each inside the network namespace
                                        the resource config's `hosts` names (test hosts)
    srun    partition/launch/srun.py    one `srun` step over the SLURM allocation, one daemon
                                        task per node (SLURM_NODEID is the daemon's hint)

The interface they share (`NodeLaunch`) is in partition/launch/base.py.
"""

from __future__ import annotations

import os

from pilot.partition.launch.base import NodeLaunch, daemon_argv
from pilot.partition.launch.fork import ForkLaunch
from pilot.partition.launch.netns import NetnsLaunch
from pilot.partition.launch.srun import SrunLaunch

METHODS = {"fork": ForkLaunch, "netns": NetnsLaunch, "srun": SrunLaunch}


def for_resource(rcfg, n: int, endpoint: str, cfg: dict, log_dir: str) -> NodeLaunch:
    """The launch of `n` node daemons for resource config `rcfg`, reporting to `endpoint`."""
    argv = daemon_argv(rcfg, endpoint, cfg)
    env = dict(os.environ)
    method = rcfg.launch_method
    if method == "srun":
        return SrunLaunch(n, argv, log_dir, env)
    if cfg.get("network"):  # a network config file names the nodes
        names = [cfg["network"][str(i)]["name"] for i in range(n)]
    else:
        names = [rcfg.node_name(i) for i in range(n)]
    if method == "netns":
        return NetnsLaunch(n, argv, log_dir, env, names, rcfg.hosts)
    if method == "fork":
        return ForkLaunch(n, argv, log_dir, env, names)
    raise ValueError(f"launch_method={method!r} must be one of {sorted(METHODS)}")
