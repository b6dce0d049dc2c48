"""The user API: `import pilot as rp` gives everything a workflow script needs.

pd  = rp.ComputePilotDescription(resource="local.localhost",
                                 parts=[rp.ComputePartitionDescription(cores=1)] * 2)
with rp.Session() as session:
    pilot = rp.PilotManager(session).submit_pilots(pd)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/date")] * 10)
    umgr.wait_units()
"""

import os as _os
import sys as _sys

# In a source checkout (an editable install, a test run) the folders agent/, partition/, pmgr/
# and configs/ are this folder's siblings, not its children.  A finder maps exactly those four
# import names to them, as setup.cfg's package_dir does when it installs (their subpackages are
# then found in them as usual); nothing else of the checkout is importable as pilot.* .
# setuptools' own editable finder does the same from a .pth file, which costs every Python
# process of the environment ~20 ms at start-up (`python -c pass`: 38 against 18 ms, measured),
# and the pilot starts many: the client, the bootstrap, zygotes, function workers.
_FOLDERS = ("agent", "partition", "pmgr", "configs")  # setup.cfg: package_dir


class _CheckoutFolders:
    """pilot.<folder> -> the checkout's <folder>/ (a meta path finder)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if parent != "pilot" or name not in _FOLDERS:
            return None
        # (the import system's own, always loaded: importlib.util would cost ~4 ms to import)
        from _frozen_importlib_external import spec_from_file_location

        folder = _os.path.join(self.root, name)
        init = _os.path.join(folder, "__init__.py")
        return spec_from_file_location(fullname, init, submodule_search_locations=[folder])


_here = _os.path.dirname(__file__)
if not _os.path.isdir(_os.path.join(_here, "agent")):
    _root = _os.path.dirname(_here)
    if _os.path.isfile(_os.path.join(_root, "agent", "__init__.py")) and not any(
        isinstance(f, _CheckoutFolders) for f in _sys.meta_path
    ):
        _sys.meta_path.append(_CheckoutFolders(_root))

# Names are imported on first use (PEP 562), so processes that only need a submodule (node
# daemons, agents, the CLI) do not pay for the whole client API at start-up.
_WHERE = {
    "ComputePartitionDescription": "pilot.partition_description",
    "ALL": "pilot.descriptions",
    "FILL": "pilot.partition_description",
    "ComputePilotDescription": "pilot.pilot_description",
    "Adapt": "pilot.adapt_policy",
    "ComputeUnitDescription": "pilot.unit_description",
    "UnitGroup": "pilot.groups",
    "UnitTemplate": "pilot.groups",
    "GLOBAL_POLICY": "pilot.policy",
    "PilotError": "pilot.errors",
    "PilotOwned": "pilot.errors",
    "PilotIncompatible": "pilot.errors",
    "StoreUnavailable": "pilot.errors",
    "Policy": "pilot.policy",
    "Partition": "pilot.pmgr.core",
    "Unit": "pilot.pmgr.core",
    "Pilot": "pilot.pmgr.core",
    # (RP 0.90's and 1.x's: takes both descriptions)
    "PilotManager": "pilot.pmgr.compat.rp1.pilots",
    "Session": "pilot.pmgr.core",
    "UnitManager": "pilot.pmgr.core",
    "UnitStream": "pilot.pmgr.core",  # submit_units(iterable, lazy=True)
    # a concurrent.futures.Executor (pilot.parsl: Parsl's)
    "Executor": "pilot.pmgr.compat.futures.executor",
    "ExecutorError": "pilot.pmgr.compat.futures.executor",
    # RADICAL-Pilot 1.x (README, "Coming from RADICAL-Pilot 1.x")
    "PilotDescription": "pilot.pilot_description",
    "TaskDescription": "pilot.pmgr.compat.rp1.task_description",
    "TaskManager": "pilot.pmgr.compat.rp1.tasks",
    "Task": "pilot.pmgr.compat.rp1.task",
    "Raptor": "pilot.pmgr.compat.rp1.raptor",
    "RaptorWorker": "pilot.pmgr.compat.rp1.raptor",
    "pythontask": "pilot.functions",
    "Node": "pilot.pmgr.compat.rp1.nodes",
    "NodeList": "pilot.pmgr.compat.rp1.nodes",
    "RankRequirements": "pilot.pmgr.compat.rp1.nodes",
    "RO": "pilot.pmgr.compat.rp1.nodes",
    "ResourceOccupation": "pilot.pmgr.compat.rp1.nodes",
    "Slot": "pilot.pmgr.compat.rp1.nodes",
}
_WHERE["RaptorMaster"] = _WHERE["Raptor"]
_STATES = (
    "ACTIVE CANCELED DONE EXECUTING FAILED FINAL LAUNCHING NEW PENDING QUEUED SCHEDULING "
    "STARTING IllegalTransition"
).split()
_WHERE.update(dict.fromkeys(_STATES, "pilot.states"))
# RADICAL-Pilot's names (pilot/rp/names.py): its state names as aliases of ours, constants
_RP = (
    "PMGR_LAUNCHING_PENDING PMGR_LAUNCHING PMGR_ACTIVE_PENDING PMGR_ACTIVE "
    "UMGR_SCHEDULING_PENDING UMGR_SCHEDULING UMGR_STAGING_INPUT_PENDING UMGR_STAGING_INPUT "
    "AGENT_STAGING_INPUT_PENDING AGENT_STAGING_INPUT AGENT_SCHEDULING_PENDING AGENT_SCHEDULING "
    "AGENT_EXECUTING_PENDING AGENT_EXECUTING AGENT_STAGING_OUTPUT_PENDING AGENT_STAGING_OUTPUT "
    "UMGR_STAGING_OUTPUT_PENDING UMGR_STAGING_OUTPUT INITIAL SCHEDULER_ROUND_ROBIN "
    "SCHEDULER_BACKFILLING SCHEDULER_DEFAULT POSIX MPI OpenMP TRANSFER COPY LINK MOVE TARBALL "
    "CREATE_PARENTS SKIP_FAILED NON_FATAL RECURSIVE"
).split()
_WHERE.update(dict.fromkeys(_RP, "pilot.rp.names"))
_RP1 = (
    "TMGR_SCHEDULING_PENDING TMGR_SCHEDULING TMGR_STAGING_INPUT_PENDING TMGR_STAGING_INPUT "
    "TMGR_STAGING_OUTPUT_PENDING TMGR_STAGING_OUTPUT PENDING_LAUNCH PENDING_ACTIVE TASK_STATE "
    "WAIT_QUEUE_SIZE TMGR_METRICS TASK_EXECUTABLE TASK_FUNCTION TASK_FUNC TASK_METHOD TASK_METH "
    "TASK_EVAL TASK_EXEC TASK_PROC TASK_SHELL TASK_SERVICE RAPTOR_MASTER RAPTOR_WORKER "
    "AGENT_SERVICE CUDA ROCm DOWNLOAD DEFAULT_FLAGS DEFAULT_ACTION DEFAULT_PRIORITY FREE BUSY DOWN"
).split()
_WHERE.update(dict.fromkeys(_RP1, "pilot.pmgr.compat.rp1.names"))
_WHERE["FINAL"] = (
    "pilot.pmgr.compat.rp1.names"  # (pilot.states.FINAL, to which a list may be added)
)
_WHERE.update({"UNIT_STATE": "pilot.pmgr.core", "PILOT_STATE": "pilot.pmgr.core"})

from pilot.release import RELEASE as __version__  # noqa: E402  (pilot/release.py)

version = __version__  # rp.version, as RADICAL-Pilot scripts print it


def __getattr__(name: str):
    import importlib

    if name == "utils":  # rp.utils: RP 1.x's resource-config look-ups (pilot/rp/utils.py)
        return importlib.import_module("pilot.rp.utils")
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'pilot' has no attribute {name!r}")

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE) | {"utils"})


__all__ = [
    *_RP,
    *_RP1,
    "PilotDescription",
    "TaskDescription",
    "TaskManager",
    "Task",
    "Raptor",
    "RaptorMaster",
    "RaptorWorker",
    "pythontask",
    "Node",
    "NodeList",
    "RankRequirements",
    "RO",
    "ResourceOccupation",
    "Slot",
    "UNIT_STATE",
    "PILOT_STATE",
    "version",
    "Policy",
    "GLOBAL_POLICY",
    "PilotError",
    "PilotOwned",
    "PilotIncompatible",
    "StoreUnavailable",
    "UnitGroup",
    "UnitTemplate",
    "ALL",
    "FILL",
    "ComputePilotDescription",
    "Adapt",
    "ComputeUnitDescription",
    "ComputePartitionDescription",
    "Session",
    "PilotManager",
    "UnitManager",
    "UnitStream",
    "Executor",
    "ExecutorError",
    "Pilot",
    "Partition",
    "Unit",
    "IllegalTransition",
    "FINAL",
    "NEW",
    "LAUNCHING",
    "PENDING",
    "STARTING",
    "ACTIVE",
    "SCHEDULING",
    "QUEUED",
    "EXECUTING",
    "DONE",
    "FAILED",
    "CANCELED",
]
