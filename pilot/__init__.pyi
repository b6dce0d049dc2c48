"""What type checkers and editors see of pilot: the names its table imports on first use
(__init__.py), as they resolve. A stub, so that the package imports none of them until asked
(tests/test_layers.py: it and the table may not drift apart)."""

from pilot.adapt_policy import Adapt as Adapt
from pilot.descriptions import ALL as ALL
from pilot.errors import (
    PilotError as PilotError,
    PilotIncompatible as PilotIncompatible,
    PilotOwned as PilotOwned,
    StoreUnavailable as StoreUnavailable,
)
from pilot.functions import pythontask as pythontask
from pilot.groups import UnitGroup as UnitGroup, UnitTemplate as UnitTemplate
from pilot.partition_description import (
    FILL as FILL,
    ComputePartitionDescription as ComputePartitionDescription,
)
from pilot.pilot_description import (
    ComputePilotDescription as ComputePilotDescription,
    PilotDescription as PilotDescription,
)
from pilot.pmgr.compat.futures.executor import (
    Executor as Executor,
    ExecutorError as ExecutorError,
)
from pilot.pmgr.compat.rp1.names import (
    AGENT_SERVICE as AGENT_SERVICE,
    BUSY as BUSY,
    CUDA as CUDA,
    DEFAULT_ACTION as DEFAULT_ACTION,
    DEFAULT_FLAGS as DEFAULT_FLAGS,
    DEFAULT_PRIORITY as DEFAULT_PRIORITY,
    DOWN as DOWN,
    DOWNLOAD as DOWNLOAD,
    FINAL as FINAL,
    FREE as FREE,
    PENDING_ACTIVE as PENDING_ACTIVE,
    PENDING_LAUNCH as PENDING_LAUNCH,
    RAPTOR_MASTER as RAPTOR_MASTER,
    RAPTOR_WORKER as RAPTOR_WORKER,
    TASK_EVAL as TASK_EVAL,
    TASK_EXEC as TASK_EXEC,
    TASK_EXECUTABLE as TASK_EXECUTABLE,
    TASK_FUNC as TASK_FUNC,
    TASK_FUNCTION as TASK_FUNCTION,
    TASK_METH as TASK_METH,
    TASK_METHOD as TASK_METHOD,
    TASK_PROC as TASK_PROC,
    TASK_SERVICE as TASK_SERVICE,
    TASK_SHELL as TASK_SHELL,
    TASK_STATE as TASK_STATE,
    TMGR_METRICS as TMGR_METRICS,
    TMGR_SCHEDULING as TMGR_SCHEDULING,
    TMGR_SCHEDULING_PENDING as TMGR_SCHEDULING_PENDING,
    TMGR_STAGING_INPUT as TMGR_STAGING_INPUT,
    TMGR_STAGING_INPUT_PENDING as TMGR_STAGING_INPUT_PENDING,
    TMGR_STAGING_OUTPUT as TMGR_STAGING_OUTPUT,
    TMGR_STAGING_OUTPUT_PENDING as TMGR_STAGING_OUTPUT_PENDING,
    WAIT_QUEUE_SIZE as WAIT_QUEUE_SIZE,
    ROCm as ROCm,
)
from pilot.pmgr.compat.rp1.nodes import (
    RO as RO,
    Node as Node,
    NodeList as NodeList,
    RankRequirements as RankRequirements,
    ResourceOccupation as ResourceOccupation,
    Slot as Slot,
)
from pilot.pmgr.compat.rp1.pilots import PilotManager as PilotManager
from pilot.pmgr.compat.rp1.raptor import (
    Raptor as Raptor,
    RaptorMaster as RaptorMaster,
    RaptorWorker as RaptorWorker,
)
from pilot.pmgr.compat.rp1.task import Task as Task
from pilot.pmgr.compat.rp1.task_description import TaskDescription as TaskDescription
from pilot.pmgr.compat.rp1.tasks import TaskManager as TaskManager
from pilot.pmgr.core import (
    PILOT_STATE as PILOT_STATE,
    UNIT_STATE as UNIT_STATE,
    Partition as Partition,
    Pilot as Pilot,
    Session as Session,
    Unit as Unit,
    UnitManager as UnitManager,
    UnitStream as UnitStream,
)
from pilot.policy import GLOBAL_POLICY as GLOBAL_POLICY, Policy as Policy
from pilot.rp import utils as utils
from pilot.rp.names import (
    AGENT_EXECUTING as AGENT_EXECUTING,
    AGENT_EXECUTING_PENDING as AGENT_EXECUTING_PENDING,
    AGENT_SCHEDULING as AGENT_SCHEDULING,
    AGENT_SCHEDULING_PENDING as AGENT_SCHEDULING_PENDING,
    AGENT_STAGING_INPUT as AGENT_STAGING_INPUT,
    AGENT_STAGING_INPUT_PENDING as AGENT_STAGING_INPUT_PENDING,
    AGENT_STAGING_OUTPUT as AGENT_STAGING_OUTPUT,
    AGENT_STAGING_OUTPUT_PENDING as AGENT_STAGING_OUTPUT_PENDING,
    COPY as COPY,
    CREATE_PARENTS as CREATE_PARENTS,
    INITIAL as INITIAL,
    LINK as LINK,
    MOVE as MOVE,
    MPI as MPI,
    NON_FATAL as NON_FATAL,
    PMGR_ACTIVE as PMGR_ACTIVE,
    PMGR_ACTIVE_PENDING as PMGR_ACTIVE_PENDING,
    PMGR_LAUNCHING as PMGR_LAUNCHING,
    PMGR_LAUNCHING_PENDING as PMGR_LAUNCHING_PENDING,
    POSIX as POSIX,
    RECURSIVE as RECURSIVE,
    SCHEDULER_BACKFILLING as SCHEDULER_BACKFILLING,
    SCHEDULER_DEFAULT as SCHEDULER_DEFAULT,
    SCHEDULER_ROUND_ROBIN as SCHEDULER_ROUND_ROBIN,
    SKIP_FAILED as SKIP_FAILED,
    TARBALL as TARBALL,
    TRANSFER as TRANSFER,
    UMGR_SCHEDULING as UMGR_SCHEDULING,
    UMGR_SCHEDULING_PENDING as UMGR_SCHEDULING_PENDING,
    UMGR_STAGING_INPUT as UMGR_STAGING_INPUT,
    UMGR_STAGING_INPUT_PENDING as UMGR_STAGING_INPUT_PENDING,
    UMGR_STAGING_OUTPUT as UMGR_STAGING_OUTPUT,
    UMGR_STAGING_OUTPUT_PENDING as UMGR_STAGING_OUTPUT_PENDING,
    OpenMP as OpenMP,
)
from pilot.states import (
    ACTIVE as ACTIVE,
    CANCELED as CANCELED,
    DONE as DONE,
    EXECUTING as EXECUTING,
    FAILED as FAILED,
    LAUNCHING as LAUNCHING,
    NEW as NEW,
    PENDING as PENDING,
    QUEUED as QUEUED,
    SCHEDULING as SCHEDULING,
    STARTING as STARTING,
    IllegalTransition as IllegalTransition,
)
from pilot.unit_description import ComputeUnitDescription as ComputeUnitDescription

__version__: str
version: str
