"""What submit_units returns for a list or an iterable (pmgr/core/unit_list.py): a sequence of the
units that holds their uids, not the units: once released, a unit held by nobody else is gone
from memory, and the list makes it again when asked."""

from __future__ import annotations

import gc
import time
import weakref

import pilot as rp
from pilot.pmgr.core.unit_list import UidRuns, UnitList
from tests.conftest import active_pilot

CUD = rp.ComputeUnitDescription


def _released(umgr, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while umgr.units.released < n:
        assert time.monotonic() < deadline, f"{umgr.units.released} of {n} released"
        umgr.session.writer.flush(timeout=10)
        with umgr.session.locked():  # (releases are drained as the lock is let go of)
            pass
        time.sleep(0.05)


def test_uid_runs_keep_consecutive_numbers_as_one_run_and_other_uids_as_they_are():
    runs = UidRuns()
    for uid in ["unit.000007", "unit.000008", "mine", "unit.000009", "unit.1000000",
                "unit.1000001", "task.000001"]:  # fmt: skip
        runs.add(uid)
    assert runs.runs == [["unit", 7, 8], "mine", ["unit", 9, 9], ["unit", 1_000_000, 1_000_001],
                         ["task", 1, 1]]  # fmt: skip
    assert list(runs) == ["unit.000007", "unit.000008", "mine", "unit.000009",
                          "unit.1000000", "unit.1000001", "task.000001"]  # fmt: skip
    assert [runs.uid(i) for i in range(len(runs))] == list(runs)


def test_the_list_holds_uids_and_gives_the_units_back(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    descs = [CUD(executable="/bin/true") for _ in range(60)]
    descs += [CUD(executable="/bin/sh", arguments=["-c", "exit 3"])]
    units = umgr.submit_units(descs)
    assert isinstance(units, UnitList) and len(units) == 61
    uids = units.uids
    assert uids == [u.uid for u in units]
    live = units[7]
    assert units[7] is live and units[-1].uid == uids[-1]
    assert [u.uid for u in units[2:5]] == uids[2:5]
    assert live in units and units == list(units) and units == units
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 60 + [rp.FAILED]
    probe = weakref.ref(units[5])
    _released(umgr, 61)
    gc.collect()
    assert probe() is None, "a released unit nobody holds is still in memory"
    assert len(umgr.units.live) == 0
    # asked for again: made from the store, with what it had, the one still held is the same
    assert units[7] is live
    again = list(units)
    assert [u.uid for u in again] == uids
    assert [u.state for u in again] == [rp.DONE] * 60 + [rp.FAILED]
    assert again[-1].exit_code == 3 and again[-1].reason
    assert [s for s, _ in again[0].history] == [
        rp.NEW,
        rp.SCHEDULING,
        rp.QUEUED,
        rp.EXECUTING,
        rp.DONE,
    ]
    assert units[5] is units[5]  # (while held, one object)
    assert units + [live] == [*again, live]


def test_an_iterable_gives_the_same_list_and_tasks_too(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    units = umgr.submit_units(CUD(executable="/bin/true") for _ in range(30))
    assert isinstance(units, UnitList) and len(units) == 30
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 30
    assert [u.state for u in units] == [rp.DONE] * 30
    umgr.remove_pilots(pilot)
    tmgr = rp.TaskManager(session)
    tmgr.add_pilots(pilot)
    tasks = tmgr.submit_tasks([rp.TaskDescription({"executable": "/bin/true"})
                               for _ in range(5)])  # fmt: skip
    assert isinstance(tasks, UnitList) and all(isinstance(t, rp.Task) for t in tasks)
    tmgr.wait_tasks(timeout=60)
    assert [t.state for t in tasks] == [rp.DONE] * 5


def test_a_null_store_keeps_the_units_it_could_not_give_back(make_session):
    """null:// persists nothing, so nothing can be made again from it: its manager keeps its
    finished units as objects, and the list gives every one back."""
    session = make_session(database_url="null://")
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units([CUD(executable="/bin/true") for _ in range(8)])
    assert umgr.wait_units(timeout=30) == [rp.DONE] * 8
    uids = [u.uid for u in units]
    session.writer.flush(timeout=10)
    gc.collect()
    assert [u.uid for u in units] == uids and [u.state for u in units] == [rp.DONE] * 8
    assert umgr.units.released == 0
