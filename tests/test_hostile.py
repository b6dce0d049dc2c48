"""Hostile and malformed messages against a running pilot: each is refused with an error that
names the field, and the pilot, its partitions and its units go on as if nothing happened."""

from __future__ import annotations

import json
import time

import zmq

import pilot as rp
from pilot.wire import peer_version
from pilot.wire.protocol import pack
from tests.conftest import active_pilot

CUD = rp.ComputeUnitDescription

# the single messages that once ended a whole pilot, and a few of their relatives
COMMANDS = [
    ({"cid": "h1", "op": "reconfig", "args": [1]}, "args=[1] must be a mapping"),
    ({"cid": "h2", "op": "cancel_pilot", "args": "now"}, "args='now' must be a mapping"),
    ({"cid": "h3", "op": "reconfig", "args": {"uids": [1], "start": [{"cores": 1}]}}, "uids[0]=1"),
    ({"cid": "h4", "op": "cancel_units", "args": {"units": [[1, 2]]}}, "units[0][0]=1"),
    ({"cid": "h5", "op": "sync", "args": {"units": [1]}}, "args.units=[1] must be a mapping"),
    (
        {"cid": "h6", "op": "attach", "args": {"client": "x", **peer_version.mine()}},
        "args.client='x' must be a ZeroMQ",
    ),
    (
        {"cid": "h6b", "op": "attach", "args": {"client": "x", "protocol": [1] * 10_000}},
        "args.protocol: the client speaks protocol ?",
    ),
    ({"cid": "h7", "op": "stop_parts", "args": {"uids": ["../../../x"]}}, "must be a uid"),
    ({"cid": "h8", "op": "reconfig", "args": {"start": [{"cores": 1}], "uids": ["../x"]}}, "uid"),
    ({"cid": "h9", "op": "nope"}, "op='nope' must be one of"),
    ({"cid": ["x"], "op": "partitions"}, "cid=['x'] must be a string"),
    ({"cid": "h10", "op": "reconfig", "args": {"stop": {"a": 1}}}, "args.stop"),
]


def ask(endpoint: str, body: bytes, keys) -> dict:
    """A peer that holds the session's keys (the same user) sends `body` to the control
    socket."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    keys.client(sock)
    try:
        sock.connect(endpoint)
        sock.send(body)
        return json.loads(sock.recv())
    finally:
        sock.close()


def test_hostile_commands_are_refused_and_change_nothing(session):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    endpoint = pilot.control
    running = umgr.submit_units(CUD(executable="/bin/sleep", arguments=["3"]))
    assert running.wait(rp.EXECUTING, timeout=30) == rp.EXECUTING
    for body, says in COMMANDS:
        reply = ask(endpoint, pack(body), session.keys)
        assert reply["ok"] is False and says in reply["error"], (body, reply)
    deep = b"[" * 200_000 + b"]" * 200_000
    assert "nested too deep" in ask(endpoint, deep, session.keys)["error"]
    assert ask(endpoint, b"\xff not json", session.keys)["ok"] is False
    assert ask(endpoint, pack([1, 2]), session.keys)["ok"] is False
    # a unit no client made, with a NUL byte in it, sent straight to a partition's agent
    part = pilot.partitions[0]
    session.channel.send(
        pilot.uid,
        [b"units", part.uid.encode(), pack([{"uid": "unit.x", "executable": "/bin/e\0cho"}])],
    )
    session.channel.send(pilot.uid, [b"units", b"../../x", pack([{"uid": "unit.y"}])])
    time.sleep(0.5)
    assert pilot.state == rp.ACTIVE
    assert [p.state for p in pilot.partitions] == [rp.ACTIVE, rp.ACTIVE]
    assert running.wait(timeout=30) == rp.DONE  # the unit beside them ran to its end
    after = umgr.submit_units([CUD(executable="/bin/true") for _ in range(4)])
    assert umgr.wait_units([u.uid for u in after], timeout=30) == [rp.DONE] * 4
    log = open(f"{pilot.sandbox}/bootstrap.log").read()
    assert "Traceback" not in log
