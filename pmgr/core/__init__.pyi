"""What type checkers and editors see of pilot.pmgr.core: the names its table imports on first use
(__init__.py), as they resolve. A stub, so that the package imports none of them until asked
(tests/test_layers.py: it and the table may not drift apart)."""

from pilot.pmgr.core.handles import (
    PILOT_STATE as PILOT_STATE,
    UNIT_STATE as UNIT_STATE,
    Partition as Partition,
    Unit as Unit,
)
from pilot.pmgr.core.pilot import Pilot as Pilot
from pilot.pmgr.core.pilot_manager import PilotManager as PilotManager
from pilot.pmgr.core.pilot_transfers import directives as pilot_directives
from pilot.pmgr.core.session import Session as Session, sessions_dir as sessions_dir
from pilot.pmgr.core.unit_hooks import UnitHooks as UnitHooks
from pilot.pmgr.core.unit_list import UnitList as UnitList
from pilot.pmgr.core.unit_manager import UnitManager as UnitManager
from pilot.pmgr.core.unit_stream import UnitStream as UnitStream

# (pilot_directives is declared by another name than its own: exported as the table names it)
__all__ = [
    "PILOT_STATE", "UNIT_STATE", "Partition", "Pilot", "PilotManager", "Session", "Unit",
    "UnitHooks", "UnitList", "UnitManager", "UnitStream", "pilot_directives", "sessions_dir",
]  # fmt: skip
