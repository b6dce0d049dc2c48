"""A `units` message as the client builds it (pmgr/core/routing.py, wire_list) and as an agent
reads it (pilot/unit_record.py): units of one blueprint go as one bulk, each with its own
arguments; an agent gives each unit its own, and a unit whose arguments are malformed fails
alone while the rest of its bulk runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

from pilot import descriptions as rp_d
from pilot.pmgr.core.blueprint import Blueprints
from pilot.pmgr.core.routing import wire_list
from pilot.unit_record import Calls, UnitRecord


def _units(descs: list) -> list:
    """Stand-ins for the client's units: what wire_list reads of them."""
    from pilot.pmgr.core.blueprint import own_of

    bps = Blueprints()
    return [
        SimpleNamespace(uid=f"unit.{i:06d}", blueprint=bps.of(d), own=own_of(d))
        for i, d in enumerate(descs)
    ]


def _arrived(body: list) -> dict:
    """Each unit as an agent takes it from the message body: uid -> (record, reason)."""
    out = {}
    for data in json.loads(json.dumps(body)):  # (as the wire carries it)
        if "uids" in data:
            first, uids, why, each = UnitRecord.arrived_bulk(data)
            for i, uid in enumerate(uids):
                if i == 0 and each is None:
                    out[uid] = (first, why)
                    continue
                if type(each) is Calls:
                    rec, bad = first.with_call(uid, each[i])
                else:
                    rec, bad = first.copy_for(uid, False if each is None else each[i])
                out[uid] = (rec, why or bad)
        else:
            out[data["uid"]] = UnitRecord.arrived(data)
    return out


def test_a_sweep_goes_as_one_bulk_and_each_unit_gets_its_own_arguments():
    descs = [
        rp_d.ComputeUnitDescription(executable="/bin/echo", arguments=[str(i), "x y"])
        for i in range(5)
    ]
    descs.append(rp_d.ComputeUnitDescription(executable="/bin/echo"))  # (none of its own)
    body = wire_list(_units(descs))
    assert len(body) == 1 and len(body[0]["uids"]) == 6
    assert "arguments" not in body[0]["of"]
    got = _arrived(body)
    assert [got[f"unit.{i:06d}"][0].get("arguments") for i in range(6)] == [
        *([str(i), "x y"] for i in range(5)),
        None,
    ]
    assert all(why is None for _, why in got.values())
    alone = wire_list(_units(descs[:1]))  # a unit alone: its record, its arguments in it
    assert alone == [{**alone[0], "uid": "unit.000000", "arguments": ["0", "x y"]}]


def test_a_unit_whose_own_arguments_are_malformed_fails_alone():
    descs = [rp_d.ComputeUnitDescription(executable="/bin/echo", arguments=["a"])] * 3
    body = wire_list(_units(descs))
    body[0]["arguments"][1] = ["ok", 7]  # (hostile or broken: not a word)
    got = _arrived(body)
    assert got["unit.000001"][1] is not None and "arguments[1]" in got["unit.000001"][1]
    assert got["unit.000000"][1] is None and got["unit.000002"][1] is None
    assert got["unit.000002"][0]["arguments"] == ["a"]


def test_a_bulk_whose_arguments_are_not_one_per_unit_fails_whole():
    descs = [rp_d.ComputeUnitDescription(executable="/bin/echo", arguments=["a"])] * 3
    body = wire_list(_units(descs))
    for bad in (body[0]["arguments"][:2], "a", {"0": ["a"]}):
        first, uids, why, each = UnitRecord.arrived_bulk({**body[0], "arguments": bad})
        assert first is None and len(uids) == 3 and "one per unit" in why and each is None


def test_descriptions_that_differ_in_their_arguments_share_one_blueprint():
    made = _units(
        [rp_d.ComputeUnitDescription(executable="/bin/echo", arguments=[str(i)]) for i in range(4)]
        + [rp_d.ComputeUnitDescription(executable="/bin/echo", cores_per_rank=2)]
    )
    assert len({id(u.blueprint) for u in made[:4]}) == 1
    assert made[4].blueprint is not made[0].blueprint
    assert "arguments" not in made[0].blueprint.stored.value


def test_calls_share_one_blueprint_and_go_as_one_bulk_each_with_its_own_call():
    """A packed call's arguments as text are its unit's own (pmgr/core/blueprint.py
    `own_function`): calls of distinct arguments share one blueprint (the call without its
    arguments) and go to the agent as one bulk with "functions", each unit its call's
    arguments; a call of LARGE arguments keeps a blueprint of its own."""
    from pilot import functions, remote_call

    calls = [remote_call.pack_call(pow, (i, 2), {}) for i in range(3)]
    big = remote_call.pack_call(len, (b"x" * functions.LARGE,), {})
    descs = [rp_d.ComputeUnitDescription(function=c) for c in calls]
    descs += [
        rp_d.ComputeUnitDescription(executable="/bin/echo", arguments=["a"]),
        rp_d.ComputeUnitDescription(function=big),
    ]
    made = _units(descs)
    assert made[0].blueprint is made[1].blueprint is made[2].blueprint
    assert made[0].blueprint.stored.value["function"] == {
        k: v for k, v in calls[0].items() if k != "args"
    }
    assert made[4].own is None and made[4].blueprint.stored.value["function"] is big
    body = wire_list(made[:4])  # (LARGE bytes travel in frames of their own, not in JSON)
    assert len(body) == 2 and body[0]["uids"] == [f"unit.{i:06d}" for i in range(3)]
    assert "args" not in body[0]["of"]["function"]
    assert body[0]["functions"] == [c["args"] for c in calls]
    got = _arrived(body)
    for i, c in enumerate(calls):
        rec, why = got[f"unit.{i:06d}"]
        assert why is None and rec["function"] == c
    assert got["unit.000003"][0]["arguments"] == ["a"]
    assert all(why is None for _, why in got.values())


def test_a_malformed_call_in_a_bulk_fails_alone():
    """Each call of a bulk is checked with its own arguments: arguments that are not a call's
    fail their unit, naming the field, and the others run; a bulk whose calls are not one per
    unit, or that has a program's arguments too, or no call in its template, fails every
    unit."""
    from pilot import remote_call

    calls = [remote_call.pack_call(pow, (i, 2), {}) for i in range(3)]
    body = wire_list(_units([rp_d.ComputeUnitDescription(function=c) for c in calls]))
    for bad in (None, ["x"], {"name": "f"}, 5):
        body[0]["functions"][1] = bad
        got = _arrived(body)
        assert got["unit.000000"][1] is None and got["unit.000002"][1] is None
        assert "function.args" in got["unit.000001"][1]
    body[0]["functions"] = calls[:2]
    assert "not one per unit" in UnitRecord.arrived_bulk(json.loads(json.dumps(body[0])))[2]
    body[0]["functions"], body[0]["arguments"] = [c["args"] for c in calls], [["a"]] * 3
    assert "both" in UnitRecord.arrived_bulk(json.loads(json.dumps(body[0])))[2]
    body[0].pop("arguments")
    body[0]["of"].pop("function")
    assert "executable" in UnitRecord.arrived_bulk(json.loads(json.dumps(body[0])))[2]


def test_the_same_call_again_goes_once_in_the_bulks_template():
    """Calls of their own that are all the same (a map over equal arguments) go as one bulk
    whose template holds the call, not the call once per unit; with another call among them,
    as a bulk with each unit's call."""
    from pilot import remote_call

    same = [remote_call.pack_call(pow, (2, 10), {}) for _ in range(50)]
    other = remote_call.pack_call(pow, (3, 10), {})
    body = wire_list(_units([rp_d.ComputeUnitDescription(function=c) for c in same]))
    assert len(body) == 1 and len(body[0]["uids"]) == 50 and body[0]["of"]["function"] == same[0]
    assert "functions" not in body[0]
    got = _arrived(body)
    assert all(rec["function"] == same[0] and why is None for rec, why in got.values())
    body = wire_list(_units([rp_d.ComputeUnitDescription(function=c) for c in [*same, other]]))
    assert len(body) == 1 and len(body[0]["functions"]) == 51
    got = _arrived(body)
    assert (
        got["unit.000050"][0]["function"] == other and got["unit.000049"][0]["function"] == same[0]
    )
