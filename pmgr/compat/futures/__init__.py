"""rp.Executor: a concurrent.futures.Executor whose calls are function units of a pilot
(executor.py), fed by one thread that bundles short calls (executor_feed.py).  pilot.parsl's
executor is built on it through the names declared here."""

from pilot.exports import declare

__getattr__, __dir__, __all__ = declare(
    __name__,
    {
        "Executor": "pilot.pmgr.compat.futures.executor",
        "ExecutorError": "pilot.pmgr.compat.futures.executor",
        "call_outcome": "pilot.pmgr.compat.futures.executor",
    },
)
