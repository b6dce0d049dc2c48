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

from partition.description import ComputePartitionDescription  # noqa: E402  (after pilot types)
from pilot.descriptions import ALL, FILL, ComputePilotDescription, ComputeUnitDescription
from pilot.groups import UnitGroup, UnitTemplate
from pilot.policy import GLOBAL_POLICY, Policy
from pilot.states import (
    ACTIVE,
    CANCELED,
    DONE,
    EXECUTING,
    FAILED,
    FINAL,
    LAUNCHING,
    NEW,
    PENDING,
    QUEUED,
    SCHEDULING,
    STARTING,
    IllegalTransition,
)
from pmgr.entities import Partition, Unit  # noqa: E402
from pmgr.pilot_manager import Pilot, PilotManager  # noqa: E402
from pmgr.session import Session  # noqa: E402
from pmgr.unit_manager import UnitManager  # noqa: E402

__all__ = [
    "Policy",
    "GLOBAL_POLICY",
    "UnitGroup",
    "UnitTemplate",
    "ALL",
    "FILL",
    "ComputePilotDescription",
    "ComputeUnitDescription",
    "ComputePartitionDescription",
    "Session",
    "PilotManager",
    "UnitManager",
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
