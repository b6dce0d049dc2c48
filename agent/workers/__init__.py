"""Function workers: the processes that run a partition's function units (calls of
rp.Executor, Parsl's apps, RP's Raptor tasks).  function_worker.py is the long-lived worker a
partition's local runner feeds (agent/runners/functions.py); function_once.py runs one call as
a process of its own on a node daemon's node; worker_env.py is the per-call environment both
set."""
