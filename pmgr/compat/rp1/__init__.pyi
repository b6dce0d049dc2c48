"""What type checkers and editors see of pilot.pmgr.compat.rp1: the names its table imports on
first use (__init__.py), as they resolve. A stub, so that the package imports none of them until
asked (tests/test_layers.py: it and the table may not drift apart)."""

from pilot.pmgr.compat.rp1.names import CUDA as CUDA, ROCm as ROCm
from pilot.pmgr.compat.rp1.pilots import PilotManager as PilotManager
from pilot.pmgr.compat.rp1.task import Task as Task
from pilot.pmgr.compat.rp1.task_description import TaskDescription as TaskDescription
from pilot.pmgr.compat.rp1.tasks import TaskManager as TaskManager
