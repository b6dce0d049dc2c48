"""Batch submission of pilot jobs: one module per batch system.

    local   pmgr/batch/local.py   the pilot job is a process tree on this machine
    slurm   pmgr/batch/slurm.py   through PSI/J's SLURM executor
    pbs     pmgr/batch/pbs.py     through PSI/J's PBS Pro executor
    lsf     pmgr/batch/lsf.py     through PSI/J's LSF executor
(named once, in pilot/config/plugins.py: BATCH_SYSTEMS)

Each module has `submit(argv, env, sandbox, *, nodes, runtime, queue, project, rcfg)` (a
`Submitter`) returning a `BatchJob`: the handle the client keeps to follow, cancel and explain
the job; and `follow(job_id, sandbox, session_uid, rcfg)` (a `Follower`): the handle of a job
another client process submitted, by its id (a client that attached to the session), or None
when the id is none it can follow.  The pilot's state comes from its bootstrap over ZeroMQ;
the job handle serves for what only the batch system knows (still queued, failed to start, its
exit code, ended).
"""

from __future__ import annotations

import sys
from typing import Protocol

from pilot.config import plugins


class BatchJob(Protocol):
    pid: int | str  # the process id (local) or the batch system's job id

    def poll(self) -> int | None: ...  # None while queued or running; then its exit code

    def wait(self, timeout: float) -> int | None: ...  # bounded; poll() afterwards

    def cancel(self) -> None: ...  # ask it to end (SIGTERM / scancel)

    def kill(self) -> None: ...  # end it now

    def describe(self) -> str: ...  # what a person needs when it failed: state, last output


class Submitter(Protocol):
    def __call__(
        self,
        argv: list[str],
        env: dict,
        sandbox: str,
        *,
        nodes: int,
        runtime: float,
        queue: str | None,
        project: str | None,
        rcfg,
        exclude: list[str] | None = None,
    ) -> BatchJob: ...


class Follower(Protocol):
    def __call__(self, job_id, sandbox: str, session_uid: str, rcfg=None) -> BatchJob | None: ...


def follower(batch_system: str) -> Follower:
    """The follower of `batch_system`'s jobs (the module of its submitter's `follow`)."""
    submit = plugins.load(plugins.BATCH_SYSTEMS, batch_system, "batch_system")
    return sys.modules[submit.__module__].follow


def submitter(batch_system: str) -> Submitter:
    """The submitter of `batch_system` (named in pilot/config/plugins.py; loaded when used: slurm
    imports PSI/J only when it submits)."""
    return plugins.load(plugins.BATCH_SYSTEMS, batch_system, "batch_system")
