"""`pilot.entk`: RADICAL-EnTK's API (Pipeline, Stage, Task, AppManager, its states and errors)
on this project's pilots, plus partitions per stage.  An EnTK script runs with one changed line:

    import pilot.entk as re          # was: import radical.entk as re
    from pilot.entk import Pipeline, Stage, Task, AppManager

The implementation is pmgr/entk/ (README, "Coming from EnTK"); this module is its name in the
user API.
"""

from pilot.pmgr.entk import states
from pilot.pmgr.entk.appmanager import AppManager
from pilot.pmgr.entk.errors import EnTKError, EnTKMissingError, EnTKTypeError, EnTKValueError
from pilot.pmgr.entk.pipeline import Pipeline
from pilot.pmgr.entk.reqs import CpuReqs, GpuReqs
from pilot.pmgr.entk.stage import Stage
from pilot.pmgr.entk.task import Task

__all__ = [
    "AppManager",
    "CpuReqs",
    "EnTKError",
    "EnTKMissingError",
    "EnTKTypeError",
    "EnTKValueError",
    "GpuReqs",
    "Pipeline",
    "Stage",
    "Task",
    "states",
]
