"""Unit moves on the wire in columns (pilot/wire/updates.py): what goes in comes out, in each unit's
order, and a batch that is not what was accepted is refused whole, naming what is wrong."""

from __future__ import annotations

import array
import json
import math

import pytest

from pilot import validate
from pilot.wire import updates


def _round_trip(moves: updates.Moves) -> list[updates.Group]:
    kind, head, times = moves.frames()
    assert kind == b"ustates"
    return updates.read(head, times)


def test_moves_come_back_grouped_by_state_in_the_machines_order():
    m = updates.Moves()
    m.add("unit.000001", "EXECUTING", 2.0, {"node": "n0", "slots": {"cpus": [1]}})
    m.add("unit.000001", "DONE", 3.0, {"exit_code": 0})
    m.add("unit.000002", "QUEUED", 1.5, None)
    m.add("unit.000002", "EXECUTING", 2.5, {"node": "n0", "slots": {"cpus": [2]}})
    m.add("unit.000003", "FAILED", 4.0, {"reason": "exit code 3", "exit_code": 3})
    m.add("unit.000004", "DONE", 5.0, {"exit_code": 0, "stdout": "hi"})
    groups = _round_trip(m)
    assert [g.state for g in groups] == ["QUEUED", "EXECUTING", "DONE", "FAILED"]
    ex = groups[1]
    assert ex.uids == ["unit.000001", "unit.000002"] and ex.ts == [2.0, 2.5]
    assert ex.same == {"node": "n0"}  # (what all share goes once)
    assert ex.cols == {"slots": [{"cpus": [1]}, {"cpus": [2]}]}
    assert ex.info(1) == {"node": "n0", "slots": {"cpus": [2]}}
    done = groups[2]
    assert done.same == {"exit_code": 0} and done.cols == {"stdout": [None, "hi"]}
    assert done.info(0) == {"exit_code": 0} and done.info(1) == {"exit_code": 0, "stdout": "hi"}
    assert groups[0].info(0) == {} and groups[3].column("exit_code") == [3]


def test_a_shared_info_and_a_long_batch_cost_nothing_per_unit_on_the_wire():
    m = updates.Moves()
    done = {"exit_code": 0}
    for i in range(10_000):
        m.add(f"unit.{i:06d}", "DONE", 100.0 + i, done)
    _, head, times = m.frames()
    assert len(times) == 8 * 10_000
    assert json.loads(head)[0][2:] == [{"exit_code": 0}, {}]
    (g,) = updates.read(head, times)
    assert g.uids[-1] == "unit.009999" and g.ts[-1] == 100.0 + 9_999


def _frames(head, ts) -> tuple[bytes, bytes]:
    return json.dumps(head).encode(), array.array("d", ts).tobytes()


@pytest.mark.parametrize(
    "head, ts, says",
    [
        ({"DONE": []}, [], "a list of at most one group per state"),
        ([["DONE", ["unit.000001"], {}]], [1.0], r"\[state, uids, same, cols\]"),
        ([["RUNNING", ["unit.000001"], {}, {}]], [1.0], "state='RUNNING'"),
        ([["DONE", ["a"], {}, {}], ["DONE", ["b"], {}, {}]], [1.0, 2.0], "once"),
        ([["DONE", "unit.000001", {}, {}]], [1.0], "uids"),
        ([["DONE", [], {}, {}]], [], "a non-empty list of uids"),
        ([["DONE", ["../etc"], {}, {}]], [1.0], "'../etc'"),
        ([["DONE", ["a\nb"], {}, {}]], [1.0], "uids"),
        ([["DONE", ["a", 7], {}, {}]], [1.0, 2.0], "uids"),
        ([["DONE", ["a"], [], {}]], [1.0], "same"),
        ([["DONE", ["a", "b"], {}, {"exit_code": [0]}]], [1.0, 2.0], "a list of 2 values"),
        ([["DONE", ["a", "b"], {}, {}]], [1.0], "times for more uids"),
        ([["DONE", ["a"], {}, {}]], [1.0, 2.0], "2 times for 1 uids"),
        ([["DONE", ["a"], {}, {}]], [math.inf], "not a finite number"),
        ([["DONE", ["a", "b"], {}, {}]], [math.nan, 1.0], "not a finite number"),
    ],
)
def test_a_batch_that_is_not_what_was_accepted_is_refused_whole(head, ts, says):
    with pytest.raises(validate.Invalid, match=says):
        updates.read(*_frames(head, ts))


def test_times_of_a_wrong_length_and_a_body_that_is_no_json_are_refused():
    with pytest.raises(validate.Invalid, match="float64"):
        updates.read(b"[]", b"\0" * 7)
    with pytest.raises(validate.Invalid, match="undecodable"):
        updates.read(b"\xff[", b"")
    with pytest.raises(validate.Invalid, match="nested too deep"):
        updates.read(b"[" * 100_000, b"")


def test_kept_outcomes_go_again_as_one_batch():
    found = [("unit.000001", "DONE", 1.0, {"exit_code": 0}), ("x.2", "CANCELED", 2.0, {})]
    groups = _round_trip(updates.of_records(found))
    assert [(g.state, g.uids, g.ts, g.info(0)) for g in groups] == [
        ("DONE", ["unit.000001"], [1.0], {"exit_code": 0}),
        ("CANCELED", ["x.2"], [2.0], {}),
    ]


def test_a_large_value_goes_as_a_frame_of_its_own_and_comes_back_whole():
    m = updates.Moves()
    blob = bytes(range(256)) * 4096  # 1 MiB, every byte value
    m.add("unit.000001", "DONE", 1.0, {"exit_code": 0, "value": blob})
    m.add("unit.000002", "DONE", 2.0, {"exit_code": 0, "value": "c21hbGw="})
    kind, head, times, *data = m.frames()
    assert len(data) == 1 and data[0] is blob and len(head) < 300  # (no base64 of it)
    (g,) = updates.read(head, times, data)
    assert g.column("value") == [blob, "c21hbGw="]


@pytest.mark.parametrize(
    "value, data, says",
    [
        ({"\u0000frame": 1}, [b"x"], "frame 1 of 1"),
        ({"\u0000frame": "0"}, [b"x"], "frame '0'"),
        ({"\u0000frame": -1}, [b"x"], "frame -1"),
        ("plain", [b"x"], "1 data frame"),  # (a frame nothing refers to)
    ],
)
def test_data_frames_that_do_not_match_their_references_are_refused_whole(value, data, says):
    head = json.dumps([["DONE", ["unit.000001"], {}, {"value": [value]}]]).encode()
    with pytest.raises(validate.Invalid, match=says):
        updates.read(head, array.array("d", [1.0]).tobytes(), data)
