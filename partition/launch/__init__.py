"""Launch methods: how the bootstrap starts one node daemon (agent/node/daemon.py) per node.

    fork    partition/launch/fork.py    a daemon process per node on this machine (logical
                                        nodes named by the resource config's node_names),
                                        each forked from one node zygote (agent/node/zygote.py)
    exec    partition/launch/exec.py    the same, each daemon a fresh interpreter (the
                                        baseline of bench/bringup.py)
    netns   partition/launch/netns.py   a daemon per node, each inside the network namespace
                                        the resource config's `hosts` names (test hosts)
    srun    partition/launch/srun.py    one `srun` step over the SLURM allocation, one daemon
                                        task per node (SLURM_NODEID is the daemon's hint)

The methods are named once, in pilot/config/plugins.py (LAUNCH_METHODS).  The interface they share
(`NodeLaunch`, with its constructor `for_nodes`) is in partition/launch/base.py.
"""

from __future__ import annotations

import dataclasses
import os

from pilot.config import plugins
from pilot.partition.launch.base import NodeLaunch, daemon_argv


def for_resource(rcfg, n: int, endpoint: str, cfg: dict, log_dir: str) -> NodeLaunch:
    """The launch of `n` node daemons for resource config `rcfg`, reporting to `endpoint`.
    A job that grows the pilot (partition/nodes/join_job.py): cfg["hint_base"] B, the daemons take
    hints B..; cfg["positions"], which of the resource's nodes (node_names, hosts) they are (the
    bootstrap picks ones the pilot does not hold; SLURM's srun names its own)."""
    argv = daemon_argv(rcfg, endpoint, cfg)
    env = dict(os.environ)
    positions = cfg.get("positions") or list(range(n))
    if cfg.get("network"):  # a network config file names the nodes
        names = [cfg["network"][str(i)]["name"] for i in range(n)]
    else:
        names = [rcfg.node_name(p) for p in positions]
    if cfg.get("positions") and rcfg.hosts:
        rcfg = dataclasses.replace(rcfg, hosts=[rcfg.hosts[p] for p in positions])
    method = plugins.load(plugins.LAUNCH_METHODS, rcfg.launch_method, "launch_method")
    return method.for_nodes(rcfg, n, argv, log_dir, env, names)
