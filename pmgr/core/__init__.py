"""The client's core: Session, PilotManager and the Pilot handle, UnitManager and the unit
handles, the pilot link (channel.py), routing, what pilots report, the unit table, streaming
submission, recovery and take-over, client-side transfers.

The faces on it (pmgr/compat/: RADICAL-Pilot 1.x, EnTK, concurrent.futures, Parsl), the views
of a session (pmgr/observe/) and the user API (pilot/__init__.py, pilot/cli.py) use the core
only through the names declared here, imported from this package (tests/test_layers.py)."""

from pilot.exports import declare

__getattr__, __dir__, __all__ = declare(
    __name__,
    {
        "Session": "pilot.pmgr.core.session",
        "sessions_dir": "pilot.pmgr.core.session",
        "PilotManager": "pilot.pmgr.core.pilot_manager",
        "Pilot": "pilot.pmgr.core.pilot",
        "Partition": "pilot.pmgr.core.handles",
        "Unit": "pilot.pmgr.core.handles",
        "PILOT_STATE": "pilot.pmgr.core.handles",
        "UNIT_STATE": "pilot.pmgr.core.handles",
        "UnitManager": "pilot.pmgr.core.unit_manager",
        "UnitHooks": "pilot.pmgr.core.unit_hooks",
        "UnitStream": "pilot.pmgr.core.unit_stream",
        "UnitList": "pilot.pmgr.core.unit_list",
        "pilot_directives": "pilot.pmgr.core.pilot_transfers:directives",
    },
)
