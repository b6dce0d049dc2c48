"""Sessions on both backends: every state change persisted, once, in order."""

from __future__ import annotations

from collections import Counter

import pilot as rp
from tests.conftest import active_pilot, unmoved

STATES = ["NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE"]


def test_5000_units_no_duplicate_or_missing_history(make_session, database_url):
    session = make_session(database_url=database_url)
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    units = umgr.submit_units(
        [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(5000)]
    )
    assert umgr.wait_units(timeout=300) == [rp.DONE] * 5000
    assert session.writer.flush(timeout=120)
    hist = session.store.history(session=session.uid)
    per_unit: dict[str, list[str]] = {}
    for h in hist:
        if h["kind"] == "units":
            per_unit.setdefault(h["uid"], []).append(h["state"])
    assert len(per_unit) == 5000
    assert all(unmoved(states) == STATES for states in per_unit.values())  # (moved: once more)
    rows = session.store.find("units", session=session.uid)
    assert Counter(r["state"] for r in rows) == {"DONE": 5000}
    assert {r["partition"] for r in rows} == {p.uid for p in pilot.partitions}
    assert rows[0]["description"]["executable"] == "/bin/true"
    parts = session.store.find("partitions", pilot=pilot.uid)
    assert [p["resources"]["cores"] for p in parts] == [1, 1]
    assert session.store.get("sessions", session.uid)["dir"] == session.dir
    assert unmoved([s for s, _ in units[0].history]) == STATES


def test_a_units_description_is_stored_without_its_defaults_and_read_back_whole(
    make_session, database_url
):
    session = make_session(database_url=database_url)
    pilot, umgr = active_pilot(session, parts=((2,),))
    desc = rp.ComputeUnitDescription(
        executable="/bin/sh",
        arguments=["-c", "true"],
        cores=2,
        environment={"A": "1"},
        policy=rp.Policy(distribution="ROUNDROBIN", cpu_affinity=[0, 1]),
    )
    unit = umgr.submit_units(desc)
    desc.arguments.append("changed after submit")  # (what was submitted is what is stored)
    assert unit.wait(timeout=60) == rp.DONE
    assert session.writer.flush(timeout=30)
    stored = session.store.get("units", unit.uid)["description"]
    assert set(stored) == {"executable", "arguments", "cores", "environment", "policy"}
    assert stored["policy"]["cpu_affinity"] == [0, 1]  # (the policy whole, as merged)
    assert len(stored["policy"]) == len(rp.Policy().to_dict())
    again = rp.ComputeUnitDescription.from_stored(stored)
    desc.arguments.pop()
    assert again == desc  # every field, the defaults filled in
    assert unit.as_dict()["description"] == desc.as_dict()  # RP's view: every key
