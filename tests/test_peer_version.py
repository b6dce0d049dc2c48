"""A client and the pilots it uses speak one protocol (pilot/wire/peer_version.py): a pilot of
another is canceled (one the client launched) or refuses the attach, saying both sides'.

The client here is made to speak another protocol (its module's PROTOCOL patched in this
process); the pilot's processes run the installed one."""

from __future__ import annotations

import pytest

import pilot as rp
from pilot.wire import peer_version
from tests.test_recovery import first_client

OTHER = peer_version.PROTOCOL + 97


def test_what_a_peer_says_is_read_and_named():
    assert peer_version.differs(peer_version.mine(), "the pilot") is None
    why = peer_version.differs({"protocol": OTHER, "version": "9.9", "python": "3.99"}, "the pilot")
    assert why is not None and why.startswith(f"the pilot speaks protocol {OTHER} (package 9.9")
    assert f"this process protocol {peer_version.PROTOCOL}" in why
    said_nothing = peer_version.differs({}, "the client")
    assert said_nothing is not None and "protocol 1 or none" in said_nothing
    hostile = peer_version.differs({"protocol": "x" * 10_000, "version": ["?"]}, "the client")
    assert hostile is not None and len(hostile) < 400  # (a peer's values, bounded)


def test_a_launched_pilot_of_another_protocol_is_canceled_and_fails_saying_why(
    make_session, monkeypatch
):
    monkeypatch.setattr(peer_version, "PROTOCOL", OTHER)
    session = make_session()
    pd = rp.ComputePilotDescription(resource="local.localhost", cores=1, runtime=5)
    pilot = rp.PilotManager(session).submit_pilots(pd)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    unit = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    pilot.wait(rp.FINAL, timeout=60)
    assert pilot.state == rp.FAILED
    assert f"the pilot speaks protocol {OTHER - 97}" in pilot.reason, pilot.reason
    assert f"this process protocol {OTHER}" in pilot.reason, pilot.reason
    assert umgr.wait_units(timeout=60) == [rp.FAILED]
    assert unit.reason, unit.uid  # (no pilot left to run it: said so)
    job = pilot.job
    assert job is not None and job.wait(timeout=30) is not None  # (canceled: it ended)


def test_an_attach_of_another_protocol_is_refused_before_the_owner_changes(
    make_session, tmp_path, monkeypatch
):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    said = first_client(url)  # (a pilot of a client that died: attached to below)
    with monkeypatch.context() as m:
        m.setattr(peer_version, "PROTOCOL", OTHER)
        refused = make_session(uid=said["session"], database_url=url)
        with pytest.raises(rp.PilotIncompatible, match=f"the client speaks protocol {OTHER}"):
            rp.PilotManager(refused)
        refused.close(terminate=False)
    session = make_session(uid=said["session"], database_url=url)  # (the same protocol)
    (pilot,) = rp.PilotManager(session).get_pilots()
    assert pilot.state == rp.ACTIVE and not pilot.released, (pilot.state, pilot.released)
    umgr = rp.UnitManager(session)
    assert umgr.wait_units(said["units"], timeout=60) == [rp.DONE] * len(said["units"])
