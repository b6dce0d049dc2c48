"""RADICAL-Pilot's names (its classic UnitManager API, RP 0.90) for our states and constants, so
a script written for `import radical.pilot as rp` runs with `import pilot as rp`.

RP's states are finer than ours; each RP name is an alias of the state that holds a unit or
pilot at that point, so `unit.wait(rp.AGENT_EXECUTING)` and `state == rp.DONE` mean what they
meant.  The table (README, "Coming from RADICAL-Pilot") is this module.
"""

from __future__ import annotations

from pilot.states import (
    ACTIVE,
    EXECUTING,
    LAUNCHING,
    NEW,
    PENDING,
    QUEUED,
    SCHEDULING,
)

# pilots: NEW -> LAUNCHING (the job is being submitted) -> PENDING (queued) -> ACTIVE
PMGR_LAUNCHING_PENDING = LAUNCHING
PMGR_LAUNCHING = LAUNCHING
PMGR_ACTIVE_PENDING = PENDING
PMGR_ACTIVE = ACTIVE

# units: NEW -> SCHEDULING (at the client: routing, waiting for a partition with room) ->
# QUEUED (at a partition's agent: waiting for its cores) -> EXECUTING -> final
UMGR_SCHEDULING_PENDING = SCHEDULING
UMGR_SCHEDULING = SCHEDULING
UMGR_STAGING_INPUT_PENDING = SCHEDULING
UMGR_STAGING_INPUT = SCHEDULING
AGENT_STAGING_INPUT_PENDING = QUEUED
AGENT_STAGING_INPUT = QUEUED
AGENT_SCHEDULING_PENDING = QUEUED
AGENT_SCHEDULING = QUEUED
AGENT_EXECUTING_PENDING = QUEUED
AGENT_EXECUTING = EXECUTING
AGENT_STAGING_OUTPUT_PENDING = EXECUTING
AGENT_STAGING_OUTPUT = EXECUTING
UMGR_STAGING_OUTPUT_PENDING = EXECUTING
UMGR_STAGING_OUTPUT = EXECUTING

INITIAL = [NEW]
# FINAL is pilot.states.FINAL (DONE, FAILED, CANCELED)

# UnitManager schedulers (UnitManager(session, scheduler=...))
SCHEDULER_ROUND_ROBIN = "round_robin"
SCHEDULER_BACKFILLING = "backfilling"
SCHEDULER_DEFAULT = SCHEDULER_ROUND_ROBIN
SCHEDULERS = (SCHEDULER_ROUND_ROBIN, SCHEDULER_BACKFILLING)

# data staging (pilot/staging.py)
from pilot.staging import (  # noqa: E402  (RP's names, re-exported: `as` says so)
    COPY as COPY,
    CREATE_PARENTS as CREATE_PARENTS,
    LINK as LINK,
    MOVE as MOVE,
    NON_FATAL as NON_FATAL,
    RECURSIVE as RECURSIVE,
    SKIP_FAILED as SKIP_FAILED,
    TARBALL as TARBALL,
    TRANSFER as TRANSFER,
)

# unit description constants
POSIX = "POSIX"
MPI = "MPI"
OpenMP = "OpenMP"  # noqa: N816 (RP's spelling)
