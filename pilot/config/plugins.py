"""The plugin families, each named once: a name -> the "module:attribute" that implements it.

    LAUNCH_METHODS  how the bootstrap starts a node daemon per node (partition/launch/, the
                    `NodeLaunch` interface); a resource config's `launch_method`
    BATCH_SYSTEMS   how a pilot job is submitted (pmgr/batch/, the `Submitter` interface); a
                    resource config's `batch_system`
    RUNNERS         how a partition's agent runs its units (agent/runners/, `UnitRunner`)
    STORES          where the client persists state, by database URL scheme (pmgr/store/,
                    `StateStore`)

Validation reads the names here (a resource config naming another is refused with these as the
accepted ones); each layer loads the implementations it uses with `load`, so nothing is
imported before it is needed (PSI/J only when a SLURM pilot is submitted, pymongo only for a
mongodb:// store).  A new backend is a module with the family's interface and one line here.
"""

from __future__ import annotations

import importlib

LAUNCH_METHODS = {
    "fork": "pilot.partition.launch.fork:ForkLaunch",
    "exec": "pilot.partition.launch.exec:ExecLaunch",
    "netns": "pilot.partition.launch.netns:NetnsLaunch",
    "srun": "pilot.partition.launch.srun:SrunLaunch",
    "mpiexec": "pilot.partition.launch.mpiexec:MpiexecLaunch",
    "ssh": "pilot.partition.launch.ssh:SshLaunch",
    "sim": "pilot.partition.launch.sim:SimLaunch",
}
BATCH_SYSTEMS = {
    "local": "pilot.pmgr.batch.local:submit",
    "slurm": "pilot.pmgr.batch.slurm:submit",
    "pbs": "pilot.pmgr.batch.pbs:submit",
    "lsf": "pilot.pmgr.batch.lsf:submit",
}
RUNNERS = {
    "local": "pilot.agent.runners.local:LocalRunner",
    "daemons": "pilot.agent.runners.daemons:DaemonRunner",
    "zero": "pilot.agent.runners.zero:ZeroRunner",
}
STORES = {
    "sqlite": "pilot.pmgr.store.sqlite:SqliteStore",
    "mongodb": "pilot.pmgr.store.mongo:MongoStore",
    "mongodb+srv": "pilot.pmgr.store.mongo:MongoStore",
    "null": "pilot.pmgr.store.null:NullStore",
}


def load(family: dict, name: str, field: str):
    """The implementation of `name` in `family`; ValueError naming `field` and the accepted
    names when there is none."""
    where = family.get(name) if isinstance(name, str) else None
    if where is None:
        raise ValueError(f"{field}={name!r} must be one of {sorted(family)}")
    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr)
