"""A Snakemake job (a rule instance, or a group job) as one unit of the pilot: what it asks.

    Snakemake                         the unit
    threads                           cores (a group job: what its layers need at once)
    resources.gpu | nvidia_gpu | gpus GPUs
    resources.tasks (with mpi, or > 1) x cpus_per_task (default: threads)
                                      cores, all on one node: the job's own MPI starter
                                      ({resources.mpi} -n {resources.tasks}, e.g. mpiexec)
                                      runs its ranks on them
    resources.runtime (minutes)       its time limit: the unit is canceled then, the job fails
                                      saying so
    resources.mem_mb                  checked against a node's memory (--pilot-memory, or this
                                      machine's for a local pilot); not held per unit: the
                                      pilot accounts cores and GPUs only

A job that asks more than any node of the pilot has is refused before it is submitted, with a
message naming the resource (`JobRefused`); it fails alone and the workflow goes on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

GPU_KEYS = ("gpu", "nvidia_gpu", "gpus")


class JobRefused(ValueError):
    """A job that can never run in this pilot: the message names the Snakemake resource."""


@dataclass(frozen=True)
class Request:
    """What one job asks of the pilot."""

    cores: int
    gpus: int
    runtime: float | None  # seconds, None: no limit
    mem_mb: int | None


@dataclass(frozen=True)
class NodeSize:
    """The largest node of the pilot: what a unit can hold at most."""

    cores: int
    gpus: int
    mem_mb: int | None  # None: not known (not checked)


def _count(resources, key: str, least: int = 0) -> int | None:
    value = resources.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise JobRefused(f"resources.{key}={value!r} must be an integer >= {least}")
    return value


def request(job) -> Request:
    """What `job` asks (a group job's resources are Snakemake's sums and maxima over it)."""
    res = job.resources
    threads = job.threads
    gpus = {k: v for k in GPU_KEYS if (v := _count(res, k)) is not None}
    if len(set(gpus.values())) > 1:
        said = ", ".join(f"resources.{k}={v}" for k, v in gpus.items())
        raise JobRefused(f"{said}: they name the same GPUs, give one")
    tasks = _count(res, "tasks", 1) or 1
    cores = threads
    if tasks > 1 or res.get("mpi"):
        cores = tasks * (_count(res, "cpus_per_task", 1) or threads)
    runtime = res.get("runtime")
    if runtime is not None:
        if isinstance(runtime, bool) or not isinstance(runtime, (int, float)) or runtime <= 0:
            raise JobRefused(f"resources.runtime={runtime!r} must be minutes > 0")
        runtime = 60.0 * runtime
    return Request(
        cores=max(1, cores),
        gpus=next(iter(gpus.values()), 0),
        runtime=runtime,
        mem_mb=_count(res, "mem_mb"),
    )


def refusal(job, asked: Request, node: NodeSize, pilot: str) -> str | None:
    """Why `job` can never run on a node of `pilot`, naming the resource; None if it fits."""
    res = job.resources
    if asked.cores > node.cores:
        tasks = res.get("tasks") or 1
        if tasks > 1 or res.get("mpi"):
            what = f"resources.tasks={tasks} x cpus_per_task = {asked.cores} cores on one node"
        else:
            what = f"threads={asked.cores}"
        return f"{what}: more than any node of {pilot} has ({node.cores} cores)"
    if asked.gpus > node.gpus:
        key = next(k for k in GPU_KEYS if res.get(k) is not None)
        return f"resources.{key}={asked.gpus}: more than any node of {pilot} has ({node.gpus} GPUs)"
    if asked.mem_mb is not None and node.mem_mb is not None and asked.mem_mb > node.mem_mb:
        return (
            f"resources.mem_mb={asked.mem_mb}: more than any node of {pilot} has ({node.mem_mb} MB)"
        )
    return None


def local_mem_mb() -> int:
    """This machine's memory in MB (a local pilot's nodes are this machine)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def log_path(logdir: str, job) -> str:
    """Where the job's output goes: <logdir>/<rule_R or group_G>/<wildcards>/<jobid>.log."""
    kind = f"group_{job.name}" if job.is_group() else f"rule_{job.name}"
    wildcards = "" if job.is_group() else _wildcards(job)
    return os.path.join(logdir, kind, wildcards, f"{job.jobid}.log")


def _wildcards(job) -> str:
    """The job's wildcard values as one path component (a/b -> a_b), as the SLURM plugin
    names its logs; "" without any."""
    try:
        return "_".join(job.wildcards).replace(os.sep, "_") if job.wildcards else ""
    except AttributeError:
        return ""
