"""Batch submission of pilot jobs: one module per batch system, each with `submit(...)` returning a
job handle (`pid`, `poll()`, `wait(timeout)`, `cancel()`, `kill()`, `describe()`)."""

from __future__ import annotations


def submitter(batch_system: str):
    if batch_system == "local":
        from pilot.batch import local

        return local.submit
    if batch_system == "slurm":
        from pilot.batch import slurm

        return slurm.submit
    raise ValueError(f"batch_system={batch_system!r}: no submitter; accepted: local, slurm")
