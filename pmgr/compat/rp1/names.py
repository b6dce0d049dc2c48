"""RADICAL-Pilot 1.x's names (its TaskManager API, 2020 on) beside RP 0.90's (pilot/rp/names.py),
so a script written for `import radical.pilot as rp` runs with `import pilot as rp`.

A task is a unit here; RP 1.x's task states are aliases of the unit states that hold a task at
that point, as RP 0.90's are (TMGR_ is UMGR_ renamed).  Task modes are RP's strings; the README
("Coming from RADICAL-Pilot 1.x") says what each one maps to.
"""

from __future__ import annotations

from pilot.rp.names import (
    UMGR_SCHEDULING,
    UMGR_SCHEDULING_PENDING,
    UMGR_STAGING_INPUT,
    UMGR_STAGING_INPUT_PENDING,
    UMGR_STAGING_OUTPUT,
    UMGR_STAGING_OUTPUT_PENDING,
)
from pilot.staging import CREATE_PARENTS
from pilot.states import CANCELED, DONE, FAILED, LAUNCHING, PENDING


class StateSet(frozenset):
    """A set of states that RP scripts may also add a list to, as RP's are lists
    (`rp.FINAL + [rp.AGENT_EXECUTING]`): the sum is a list."""

    def __add__(self, other) -> list:
        return [*self, *other]

    def __radd__(self, other) -> list:
        return [*other, *self]


FINAL = StateSet((DONE, FAILED, CANCELED))  # rp.FINAL (pilot.states.FINAL, addable)

# task states at the client (RP 1.x's TMGR_ = RP 0.90's UMGR_)
TMGR_SCHEDULING_PENDING = UMGR_SCHEDULING_PENDING
TMGR_SCHEDULING = UMGR_SCHEDULING
TMGR_STAGING_INPUT_PENDING = UMGR_STAGING_INPUT_PENDING
TMGR_STAGING_INPUT = UMGR_STAGING_INPUT
TMGR_STAGING_OUTPUT_PENDING = UMGR_STAGING_OUTPUT_PENDING
TMGR_STAGING_OUTPUT = UMGR_STAGING_OUTPUT
# pilot states some RP scripts name
PENDING_LAUNCH = LAUNCHING
PENDING_ACTIVE = PENDING

# callback metrics (TaskManager.register_callback)
TASK_STATE = "TASK_STATE"
WAIT_QUEUE_SIZE = "WAIT_QUEUE_SIZE"
TMGR_METRICS = (TASK_STATE, WAIT_QUEUE_SIZE)

# task modes (TaskDescription.mode)
TASK_EXECUTABLE = "task.executable"
TASK_FUNCTION = TASK_FUNC = "task.function"
TASK_METHOD = TASK_METH = "task.method"
TASK_EVAL = "task.eval"
TASK_EXEC = "task.exec"
TASK_PROC = "task.proc"
TASK_SHELL = "task.shell"
TASK_SERVICE = "task.service"
RAPTOR_MASTER = "raptor.master"
RAPTOR_WORKER = "raptor.worker"
AGENT_SERVICE = "agent.service"
MODES = (
    TASK_EXECUTABLE,
    TASK_FUNCTION,
    TASK_METHOD,
    TASK_EVAL,
    TASK_EXEC,
    TASK_PROC,
    TASK_SHELL,
    TASK_SERVICE,
    RAPTOR_MASTER,
    RAPTOR_WORKER,
    AGENT_SERVICE,
)

# GPU types (TaskDescription.gpu_type) and the variable that names a rank's GPUs for each
CUDA = "CUDA"
ROCm = "ROCm"  # noqa: N816 (RP's spelling)
GPU_ENV = {CUDA: "CUDA_VISIBLE_DEVICES", ROCm: "ROCR_VISIBLE_DEVICES"}

# staging: RP 1.x's DOWNLOAD action (an http(s) URL fetched where the task runs), its
# default flags, and its integer flag bits (RP 1.x writes flags as RECURSIVE | CREATE_PARENTS;
# rp.RECURSIVE and friends stay RP 0.90's names here, which staging lists take as they are)
DOWNLOAD = "Download"
DEFAULT_FLAGS = [CREATE_PARENTS]
DEFAULT_ACTION = "Transfer"
DEFAULT_PRIORITY = 0
FLAG_BITS = {1: "Recursive", 2: "CreateParents", 4: "NonFatal"}

# resource occupation of RP's node lists (rp.Node, rp.NodeList: pmgr/compat/rp1/nodes.py)
FREE = 0.0
BUSY = 1.0
DOWN = None
