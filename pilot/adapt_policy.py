"""Adapt: how a pilot follows its work with batch jobs of its own (ComputePilotDescription(
adapt=)), as plain validated data.  What the policy does is pmgr/core/adapt.py's; how a pilot
grows and shrinks, partition/growth.py's.
"""

from __future__ import annotations

from pilot import validate
from pilot.fields import Description, field, optional_count


def _seconds_or_zero(where, value):
    if not validate.finite(value) or value < 0:
        raise validate.bad(where, value, "a number of seconds >= 0")
    return value


class Adapt(Description):
    """An adaptive pilot: it grows by batch jobs while units wait, and gives nodes back when
    they are idle, between min_nodes and max_nodes (as Dask's `adapt` and Parsl's scaling
    strategy).

    Keyword Args:
        min_nodes (int | None): nodes it keeps, at least (default: its first job's size; the
            first job is never given back while the pilot lives).
        max_nodes (int | None): nodes it may hold in all its jobs (default: the pilot
            description's max_nodes; one of the two is needed).
        grow_after (float): seconds units must have waited for room before it grows (10).
        idle_after (float): seconds the partitions it grew for must be idle (no unit queued
            or running) before they are stopped and their job given back (30).
        cores_per_unit (int | None): how many cores one waiting unit is counted as when
            sizing a grow (default: the cores the waiting units ask for).

    Raises:
        ValueError: a field not accepted, named with the value and what is accepted.
    """

    FIELDS = {
        "min_nodes": (None, optional_count(1)),
        "max_nodes": (None, optional_count(1)),
        "grow_after": (10.0, field(_seconds_or_zero)),
        "idle_after": (30.0, field(_seconds_or_zero)),
        "cores_per_unit": (None, optional_count(1)),
    }

    def check(self) -> None:
        if None not in (self.min_nodes, self.max_nodes) and self.min_nodes > self.max_nodes:
            raise ValueError(
                f"Adapt: min_nodes={self.min_nodes} must be <= max_nodes={self.max_nodes}"
            )
