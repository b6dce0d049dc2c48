"""What type checkers and editors see of pilot.pmgr.compat.entk: the names its table imports on
first use (__init__.py), as they resolve. A stub, so that the package imports none of them until
asked (tests/test_layers.py: it and the table may not drift apart)."""

from pilot.pmgr.compat.entk.appmanager import AppManager as AppManager
from pilot.pmgr.compat.entk.errors import (
    EnTKError as EnTKError,
    EnTKMissingError as EnTKMissingError,
    EnTKTypeError as EnTKTypeError,
    EnTKValueError as EnTKValueError,
)
from pilot.pmgr.compat.entk.pipeline import Pipeline as Pipeline
from pilot.pmgr.compat.entk.reqs import CpuReqs as CpuReqs, GpuReqs as GpuReqs
from pilot.pmgr.compat.entk.stage import Stage as Stage
from pilot.pmgr.compat.entk.task import Task as Task
