"""Who may talk to a pilot (pilot/wire/security.py): CURVE on every channel, private files."""

from __future__ import annotations

import os
import stat

import zmq

from pilot.wire import security


def test_keys_are_private_to_the_user_and_made_once(tmp_path):
    keys = security.make_keys(str(tmp_path))
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
    for root, _dirs, files in os.walk(keys):
        for f in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, f)).st_mode) == 0o600, f
    k = security.Keys(keys)
    assert security.make_keys(str(tmp_path)) == keys
    assert security.Keys(keys).server_public == k.server_public  # not made again
    assert k.allowed() == [k.client_public]


def test_only_the_sessions_client_key_gets_through(tmp_path):
    keys = security.Keys(security.make_keys(str(tmp_path)))
    ctx = zmq.Context()
    server = ctx.socket(zmq.ROUTER)
    keys.serve(server)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    good, bad = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    keys.client(good)
    bad.curve_publickey, bad.curve_secretkey = zmq.curve_keypair()
    bad.curve_serverkey = keys.server_public
    try:
        for s in (good, bad):
            s.setsockopt(zmq.LINGER, 0)
            s.connect(f"tcp://127.0.0.1:{port}")
        try:
            bad.send(b"from a stranger", zmq.NOBLOCK)
        except zmq.Again:
            pass  # refused before it could even queue
        good.send(b"from the session")
        assert server.poll(5000)
        assert server.recv_multipart()[1] == b"from the session"
        assert not server.poll(500)
    finally:
        for s in (good, bad, server):
            s.close(linger=0)
        keys.close()
        ctx.term()


def test_session_files_are_the_users_alone(session):
    from tests.conftest import local_pilot

    pilot = local_pilot(session, parts=((1,),))
    assert pilot.wait("ACTIVE", timeout=20) == "ACTIVE"
    assert stat.S_IMODE(os.stat(session.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.dirname(session.dir)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(session.store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(session.dir, "keys")).st_mode) == 0o700


def test_a_session_dir_given_leaves_its_parent_as_it_was(tmp_path):
    """Session(dir=D) makes D the user's alone, and never touches D's parent (as root, a
    session in /tmp/x once made /tmp itself 0700: nobody else could use /tmp)."""
    import pilot as rp

    parent = tmp_path / "shared"
    parent.mkdir(mode=0o777)
    os.chmod(parent, 0o1777)
    with rp.Session(dir=str(parent / "mine")) as s:
        assert stat.S_IMODE(os.stat(s.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(parent).st_mode) == 0o1777


def test_a_peer_without_the_keys_is_refused_on_every_pilot_socket(session):
    """Loopback is no boundary: a local peer without the session's keys gets no answer from
    the control socket, nothing it sends to the pilot link or the control socket is acted
    on, and the pilot runs on."""
    import time

    import pilot as rp
    from pilot.wire.protocol import pack
    from tests.conftest import active_pilot

    pilot, umgr = active_pilot(session, parts=((1,),))
    ctx = zmq.Context()
    try:
        for endpoint in (pilot.control, session.channel.endpoint):
            for keyed in (False, True):
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                if keyed:  # keys of its own, not the session's
                    sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
                    sock.curve_serverkey = session.keys.server_public
                sock.connect(endpoint)
                body = {"cid": "x", "op": "cancel_pilot", "args": {"reason": "intruder"}}
                try:
                    sock.send_multipart([b"", pack(body)], zmq.NOBLOCK)
                    sock.send_multipart([b"state", pack([["part", "x", "FAILED", 0, {}]])])
                except zmq.Again:
                    pass  # refused before it could even queue
                assert not sock.poll(1000), "a stranger got an answer"
                sock.close()
        time.sleep(0.5)
        assert pilot.state == rp.ACTIVE and pilot.partitions[0].state == rp.ACTIVE
        assert (
            umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true")).wait(timeout=30)
            == rp.DONE
        )
        log = open(os.path.join(pilot.sandbox, "bootstrap.log")).read()
        assert "refused a peer with an unknown CURVE key" in log
    finally:
        ctx.term()


def test_the_client_listens_where_it_is_told(make_session, tmp_path):
    """Session(address=), PILOT_CLIENT_ADDRESS and a resource's client_address decide where
    pilots reach the client (all of 127.0.0.0/8 is this host's loopback); a bad one is named."""
    import json

    import pytest

    import pilot as rp

    session = make_session(address="127.0.0.2")
    assert session.channel.endpoint.startswith("tcp://127.0.0.2:")
    cfg = tmp_path / "elsewhere.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 2\nclient_address: 127.0.0.3\n")
    pd = rp.ComputePilotDescription(
        resource=str(cfg), parts=[rp.ComputePartitionDescription(cores=1)]
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE
    with open(os.path.join(pilot.sandbox, "bootstrap.json")) as f:
        assert json.load(f)["client"].startswith("tcp://127.0.0.3:")
    assert make_session(address="lo").channel.endpoint.startswith("tcp://127.0.0.1:")
    with pytest.raises(ValueError, match=r"Session: address='no-such-if0' must be an IP address"):
        rp.Session(address="no-such-if0")
