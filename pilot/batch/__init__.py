"""Batch submission of pilot jobs: one module per batch system, each with `submit(...)` returning a
job handle (`pid`, `poll()`, `cancel()`, `kill()`, `describe()`)."""

from __future__ import annotations


def submitter(batch_system: str):
    if batch_system == "local":
        from pilot.batch import local

        return local.submit
    raise ValueError(f"batch_system={batch_system!r}: no submitter; accepted: local")
