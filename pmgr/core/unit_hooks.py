"""`UnitHooks`: the seam through which a face changes what a core UnitManager does with its
units (pmgr/core/unit_manager.py; RADICAL-Pilot 1.x's TaskManager, pmgr/compat/rp1/tasks.py).

A face passes a hooks object to `UnitManager(session, scheduler, hooks=...)`; without one the
manager does none of this.  Besides the hooks, a subclass may set the manager's public class
attributes: `UNIT` (the handle made for each unit: a Unit subclass, made as Unit is),
`DESCRIPTION` (what stored descriptions are read back as) and `UID_PREFIX` (generated uids).
Every hook but on_change is called with the session lock held, on the thread that made the
change:
    on_change(unit, state)   the manager's first state callback (before the users'): on the
                             thread that made the change, after the session lock is released,
                             in the order of the changes (pmgr/core/handles.py)
    hold(unit)               a unit is about to wait at the client to be routed: True if the
                             face holds it instead; it hands it back with `umgr.enqueue(unit)`
                             (then `umgr.routing.route()`) when it may go
    release(unit)            a unit not sent anywhere is canceled: True if the face held it
                             (and lets go of it now), False if it waits in the manager's queue
    on_pilot_changed(pilot)  one of the manager's pilots ended (after the manager routed)
"""

from __future__ import annotations

from typing import Protocol

from pilot.pmgr.core.handles import Stateful, Unit


class UnitHooks(Protocol):
    """What a face does on a UnitManager's units (this module's header: when each is called)."""

    def on_change(self, unit: Unit, state: str) -> None: ...  # the first state callback

    def hold(self, unit: Unit) -> bool: ...  # True: held by the face, not queued

    def release(self, unit: Unit) -> bool: ...  # True: it was held by the face

    def on_pilot_changed(self, pilot: Stateful) -> None: ...  # a pilot ended
