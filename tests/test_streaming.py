"""Memory that does not grow with finished work, and streaming submission (pmgr/core/unit_table.py,
pmgr/core/unit_stream.py): a final unit the store has, that nobody holds, is let go of and read back
from the store when asked for; a generator of descriptions is pulled only while fewer than
`window` units are in flight."""

from __future__ import annotations

import gc
import time
import weakref

import pytest

import pilot as rp
from tests.conftest import active_pilot

CUD = rp.ComputeUnitDescription


def value(i):
    print("value of", i)
    return {"i": i, "square": i * i}


def raises(i):
    raise KeyError(f"no {i}")


def _released(umgr, n: int, timeout: float = 30.0) -> None:
    """Until `n` units are let go of (the store has them: the writer's next round)."""
    deadline = time.monotonic() + timeout
    while umgr.units.released < n:
        assert time.monotonic() < deadline, f"{umgr.units.released} of {n} released"
        umgr.session.writer.flush(timeout=10)
        with umgr.session.locked():  # (releases are drained as the lock is let go of)
            pass
        time.sleep(0.05)


def test_final_units_are_let_go_of_and_read_back(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    descs = [CUD(function=value, args=(i,)) for i in range(40)]
    descs += [
        CUD(function=raises, args=(7,)),
        CUD(executable="/bin/sh", arguments=["-c", "echo out; echo err >&2; exit 3"]),
    ]
    units = umgr.submit_units(descs)
    uids = [u.uid for u in units]
    states = umgr.wait_units(timeout=60)
    assert states == [rp.DONE] * 40 + [rp.FAILED, rp.FAILED]
    probe = weakref.ref(units[5])
    del units, descs
    _released(umgr, 42)
    gc.collect()
    assert probe() is None, "a released unit nobody holds is still in memory"
    assert len(umgr.units.live) == 0 and len(umgr.units) == 42

    # asked for again: made from the store, with what it had
    again = umgr.get_units(uids)
    assert [u.uid for u in again] == uids
    assert again[5].state == rp.DONE and again[5].return_value == {"i": 5, "square": 25}
    assert "value of 5" in again[5].stdout
    assert again[40].state == rp.FAILED and "KeyError" in (again[40].exception or "")
    assert again[41].exit_code == 3 and again[41].stdout.strip() == "out"
    assert again[41].stderr.strip() == "err" and again[41].reason
    assert [s for s, _ in again[5].history][-1] == rp.DONE
    assert again[5].as_dict()["state"] == rp.DONE
    # a held unit is the same object while someone holds it
    assert umgr.get_units(uids[5])[0] is again[5]
    # order and states of everything, released or not, without making the objects
    assert umgr.list_units() == uids
    assert umgr.wait_units(uids, timeout=5) == states
    assert umgr.wait_units(timeout=5) == states
    with pytest.raises(ValueError, match="unit.999999"):
        umgr.get_units("unit.999999")


def test_a_unit_the_user_holds_is_kept_whole(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    kept = umgr.submit_units(CUD(function=value, args=(3,)))
    umgr.submit_units([CUD(function=value, args=(i,)) for i in range(5)])
    umgr.wait_units(timeout=60)
    _released(umgr, 6)
    assert kept.state == rp.DONE and kept.return_value["square"] == 9
    assert umgr.get_units(kept.uid)[0] is kept  # the same object, not a second one


def test_a_generator_is_pulled_only_while_the_window_has_room(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    window, n, seen, ended = 40, 1500, [], [0]
    umgr.register_callback(lambda u, state: ended.__setitem__(0, ended[0] + (state in rp.FINAL)))

    def descriptions():
        for i in range(n):
            seen.append(i - ended[0])  # (pulled and not final: at most the window)
            yield CUD(executable="/bin/true")

    stream = umgr.submit_units(descriptions(), lazy=True, window=window)
    assert isinstance(stream, rp.UnitStream)
    assert stream.wait(timeout=120) == {rp.DONE: n}
    assert len(stream) == n and stream.exhausted and stream.error is None
    # pulled in chunks of at most the room the window leaves (it was CHUNK, 256, whatever
    # the window), each only when fewer than `window` were in flight
    assert max(seen) <= window, max(seen)
    assert len(list(stream.uids())) == n
    assert umgr.wait_units(timeout=5) == [rp.DONE] * n
    # not lazy: the list of its units once all are submitted
    units = umgr.submit_units((CUD(executable="/bin/true") for _ in range(10)), window=4)
    assert len(units) == 10 and umgr.wait_units(units, timeout=60) == [rp.DONE] * 10


def test_a_bad_description_in_a_stream_stops_it_and_is_named(session):
    pilot, umgr = active_pilot(session, parts=((1,),))

    def descriptions():
        for i in range(300):
            yield (
                CUD(executable="/bin/true")
                if i != 270
                else {"executable": "/bin/true", "cores": -1}
            )

    stream = umgr.submit_units(descriptions(), lazy=True)
    with pytest.raises(ValueError, match="after its first 256"):
        stream.wait(timeout=60)
    assert len(stream) == 256 and stream.counts() == {rp.DONE: 256}

    def broken():
        yield CUD(executable="/bin/true")
        raise OSError("the input file went away")

    with pytest.raises(OSError, match="went away"):
        umgr.submit_units(broken())
    stream = umgr.submit_units(broken(), lazy=True)
    with pytest.raises(OSError, match="went away"):
        stream.wait(timeout=60)
    assert len(stream) == 1


def test_a_stream_canceled_pulls_no_more_and_cancels_what_runs(session):
    pilot, umgr = active_pilot(session, parts=((1,),))

    def descriptions():
        while True:  # endless
            yield CUD(executable="/bin/sleep", arguments=["30"])

    stream = umgr.submit_units(descriptions(), lazy=True, window=3)
    deadline = time.monotonic() + 20
    while not any(u.state == rp.EXECUTING for u in umgr.units.active()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stream.cancel()
    counts = stream.wait(timeout=30)
    assert set(counts) == {rp.CANCELED} and counts[rp.CANCELED] == len(stream)
    assert len(stream) <= 3 + 256
    assert all(u.reason for u in stream.failed()) and not list(stream.failed())


def test_released_units_are_read_back_after_close(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    uids = [u.uid for u in umgr.submit_units([CUD(function=value, args=(i,)) for i in range(20)])]
    umgr.wait_units(timeout=60)
    _released(umgr, 20)
    session.close()
    again = umgr.get_units(uids[:3])
    assert [u.return_value["i"] for u in again] == [0, 1, 2]
    assert umgr.wait_units(timeout=5) == [rp.DONE] * 20


def test_tasks_and_executor_map_pull_lazily(session):
    from tests.conftest import local_pilot

    pilot = local_pilot(session, parts=((2,),))
    tmgr = rp.TaskManager(session)
    tmgr.add_pilots(pilot)
    pulled = []

    def tasks():
        for i in range(600):
            pulled.append(tmgr.units.open)
            yield rp.TaskDescription({"executable": "/bin/echo", "arguments": [str(i)]})

    stream = tmgr.submit_tasks(tasks(), lazy=True, window=100)
    assert stream.wait(timeout=120) == {rp.DONE: 600}
    assert max(pulled) < 100 + 256
    assert [t.stdout.strip() for t in stream][-3:] == ["597", "598", "599"]
    with pytest.raises(ValueError, match="must be a TaskDescription"):
        tmgr.submit_tasks(42)

    given = []

    def numbers():
        for i in range(300):
            given.append(i)
            yield i

    with rp.Executor() as ex:
        results = ex.map(abs, numbers(), buffersize=10)
        assert len(given) <= 11  # (islice may look one further)
        assert next(results) == 0 and len(given) <= 12
        assert sum(results) == sum(range(300))
        assert list(ex.map(abs, range(-5, 0), chunksize=2, buffersize=1)) == [5, 4, 3, 2, 1]
        with pytest.raises(ValueError, match="buffersize"):
            ex.map(abs, [1], buffersize=0)


def test_a_stream_past_unit_999999_keeps_its_uids_as_ranges(session):
    """uids grow a digit after unit.999999: the stream still keeps them as one range (a
    list of 10^7 uid strings would be most of the client's memory)."""
    session.store.reserve(f"{session.uid}/unit", 999_990)  # (the next block starts there)
    pilot, umgr = active_pilot(session, parts=((2,),))
    stream = umgr.submit_units((CUD(executable="/bin/true") for _ in range(20)), lazy=True)
    assert stream.wait(timeout=60) == {rp.DONE: 20}
    uids = list(stream.uids())
    assert uids[0] == "unit.999990" and uids[-1] == "unit.1000009", uids
    assert stream.runs.runs == [["unit", 999_990, 1_000_009]]
    assert [u.uid for u in stream] == uids


def test_a_streams_counts_failed_and_cancel_read_its_ledger_as_a_walk_would(session):
    """Released units are counted and skipped a range at a time (their ledger bytes); the
    answers are those of a walk over every uid, with units released, live and running."""
    pilot, umgr = active_pilot(session, parts=((2,),))

    def descriptions():
        for i in range(300):
            if i % 7 == 3:
                yield CUD(executable="/bin/sh", arguments=["-c", "exit 1"])
            else:
                yield CUD(executable="/bin/true")
        for _ in range(2):
            yield CUD(executable="/bin/sleep", arguments=["30"])

    stream = umgr.submit_units(descriptions(), lazy=True)
    stream.thread.join(30)
    table = umgr.units
    deadline = time.monotonic() + 60
    while table.state_of(list(stream.uids())[-1]) != rp.EXECUTING or table.released < 250:
        assert time.monotonic() < deadline, (table.released, stream.counts())
        _released(umgr, min(300, table.released + 1))
        time.sleep(0.05)
    uids = list(stream.uids())
    walked: dict = {}
    for uid in uids:
        walked[table.state_of(uid)] = walked.get(table.state_of(uid), 0) + 1
    assert stream.counts() == walked and walked[rp.FAILED] == 43
    assert [u.uid for u in stream.failed()] == [
        uid for uid in uids if table.state_of(uid) == rp.FAILED
    ]
    assert not stream.done
    stream.cancel()
    assert stream.wait(timeout=30) == {rp.DONE: 257, rp.FAILED: 43, rp.CANCELED: 2}
    assert stream.done
