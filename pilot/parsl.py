"""`pilot.parsl`: the Parsl executor (`pip install 'pilot-partitions[parsl]'`).

    from pilot.parsl import PilotExecutor
    parsl.load(Config(executors=[PilotExecutor(label="pilot")]))

The executor is pmgr/compat/parsl/executor.py; this module is its name in the user API.
"""

from pilot.pmgr.compat.parsl import PilotExecutor

__all__ = ["PilotExecutor"]
