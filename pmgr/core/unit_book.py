"""`UnitBook`: what the parts of a UnitManager (pmgr/core/unit_manager.py) share.

A UnitManager holds its parts and gives each this book in its constructor:
    Routing      pmgr/core/routing.py       where waiting units go, and their sending
    UnitEvents   pmgr/core/unit_events.py   what its pilots say about units
    UnitQueries  pmgr/core/unit_queries.py  wait_units, get_units, list_units, states
    Submission   pmgr/core/unit_submit.py   descriptions checked, units made and queued
The containers here are made once and never replaced (a part may keep them as its own
attributes); their contents change with the session lock held.  `uid` and `feeding` are read
through the book (the manager's uid is set again by a face: RP 1.x's tmgr.NNNN).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pilot.pmgr.core.handles import Unit
from pilot.pmgr.core.unit_table import UnitTable


class UnitBook:
    """The state a UnitManager's parts share.

    Args:
        session (Session): the session the units belong to (pmgr/core/session.py).
        uid (str): the manager's uid.
        units (UnitTable): its units (pmgr/core/unit_table.py).
    """

    def __init__(self, session: Any, uid: str, units: UnitTable) -> None:
        self.session = session
        self.uid = uid
        self.units = units  # live units as objects, released ones as a byte each
        self.pilots: list = []  # the Pilots units are routed to, in the order they were added
        self.pending: deque[Unit] = deque()  # units waiting at the client, oldest first
        self.waiting_for: set[str] = set()  # pilots units are pinned to, not added (yet)
        self.feeding = 0  # lazy streams still pulling (pmgr/core/unit_stream.py)
