"""`UnitRouter`: what a Pilot (pmgr/core/pilot.py) calls on the UnitManager that routes units to it.

The UnitManager implements it by delegating to the parts it holds (`UnitEvents`,
pmgr/core/unit_events.py; `route` to its `Routing`, pmgr/core/routing.py); a pilot has one
once `add_pilots` gave it one (`Pilot.umgr`, None before).  Every call comes on the channel
thread, with the session lock held, inside `session.locked()` (on_output without it), and
passes on the news a pilot's bootstrap sent (pilot/wire/protocol.py):
    ustates a batch of unit moves (pilot/wire/updates.py) -> on_unit_moves, then route() once
    output  unit output forwarded by node daemons -> on_output
    back    units a partition handed back (or the channel could not send) -> on_units_back
    lost    a partition's agent died -> on_partition_lost
    synced  after a sync: the units a partition's agent never had -> on_synced
and the pilot's own news: a partition ACTIVE or final -> on_partition_changed, the pilot ended
-> on_pilot_changed.
"""

from __future__ import annotations

import threading
from typing import Protocol

from pilot.pmgr.core.handles import Partition, Stateful


class UnitRouter(Protocol):
    """What a Pilot needs of the UnitManager that routes units to it (`add_pilots`): the pilot's
    news about units and partitions, each called on the channel thread holding the session
    lock, inside `session.locked()` (on_output without it)."""

    # a batch of unit moves (pilot/wire/updates.py's Groups); returns the uids final here now
    def on_unit_moves(self, groups: list) -> list[str]: ...

    def on_output(self, chunks: list) -> None: ...  # [uid, node, rank, stream, text]

    def on_units_back(self, part_uid: str, units: list) -> None: ...  # handed back: route again

    # its agent died: `started` may have run (journal), `killed` were running
    def on_partition_lost(
        self, part_uid: str, started: list, killed: list, reason: str
    ) -> None: ...

    def on_synced(self, part_uid: str, unknown: list) -> None: ...  # its agent never had these

    def on_partition_changed(self, part: Partition) -> None: ...  # ACTIVE, or final

    # the pilot (a Pilot, pmgr/core/pilot.py, which imports this module) ended
    def on_pilot_changed(self, pilot: Stateful) -> None: ...

    def route(self) -> threading.Event | None: ...  # where units can go may have changed

    # whether this manager's unit `uid` is final here (its outcome is on its way to the store)
    def has_ended(self, uid: str) -> bool: ...

    def waiting(self) -> int: ...  # units waiting at the client for room (pmgr/core/adapt.py)
