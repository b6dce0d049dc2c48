"""`pilot.entk`: RADICAL-EnTK's API (Pipeline, Stage, Task, AppManager, its states and errors)
on this project's pilots, plus partitions per stage.  An EnTK script runs with one changed line:

    import pilot.entk as re          # was: import radical.entk as re
    from pilot.entk import Pipeline, Stage, Task, AppManager

The implementation is pmgr/compat/entk/ (README, "Coming from EnTK"); this module is its
name in the user API.
"""

from pilot.pmgr.compat.entk import (
    AppManager,
    CpuReqs,
    EnTKError,
    EnTKMissingError,
    EnTKTypeError,
    EnTKValueError,
    GpuReqs,
    Pipeline,
    Stage,
    Task,
    states,
)

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
