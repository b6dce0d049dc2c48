"""pilot.parsl.PilotExecutor: a Parsl executor whose tasks are units of a pilot (executor.py),
on rp.Executor (pmgr/compat/futures/)."""

from pilot.exports import declare

__getattr__, __dir__, __all__ = declare(
    __name__, {"PilotExecutor": "pilot.pmgr.compat.parsl.executor"}
)
