"""The agent's cancel (agent/stopping.py): what it remembers of uids it does not hold."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from pilot.agent import stopping
from pilot.agent.stopping import Stops
from pilot.seen import SeenUnits


def _stops() -> Stops:
    reports = SimpleNamespace(ended=SeenUnits(), updates=[])
    reports.update = lambda uid, state, info: reports.updates.append((uid, state))
    sched = SimpleNamespace(queue=deque([{"uid": "unit.000003", "function": "f"}]))
    runner = SimpleNamespace(runs=lambda: [])
    return Stops("part.0000", None, sched, runner, None, reports, lambda: None, 1.0)


def test_a_cancel_of_units_that_ended_here_is_not_remembered():
    """A cancel races with the ends of the units it names (the client had not heard of them
    yet): a unit that ended here is not waited for (it was remembered for ever, as if it had
    not arrived yet: the agent grew with every such cancel); one not here yet is; one queued
    ends CANCELED."""
    stops = _stops()
    for uid in ("unit.000001", "unit.000002"):
        stops.reports.ended.add(uid)
    stops.cancel(["unit.000001", "unit.000002", "unit.000003", "unit.000004"], "asked")
    assert stops.canceled_early == {"unit.000004": "asked"}
    assert stops.reports.updates == [("unit.000003", "CANCELED")]


def test_uids_canceled_before_they_came_are_bounded(monkeypatch):
    monkeypatch.setattr(stopping, "EARLY_MAX", 3)
    stops = _stops()
    stops.cancel([f"unit.{i:06d}" for i in range(10, 15)], "asked")
    stops.cancel(["unit.000020"], "asked")
    assert len(stops.canceled_early) == 3 and "unit.000020" in stops.canceled_early
