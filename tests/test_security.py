"""CURVE keys for channels beyond loopback (pilot/security.py)."""

from __future__ import annotations

import os
import stat

import zmq

from pilot import security


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


def test_curve_is_used_only_beyond_loopback():
    assert not security.needed("127.0.0.1")
    assert not security.needed("::1")
    assert security.needed("10.214.0.1")
    assert security.needed("node1.cluster")  # a name: not known to be loopback


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


def test_a_loopback_pilot_makes_no_keys(session):
    from tests.conftest import local_pilot

    pilot = local_pilot(session, parts=((1,),))
    assert pilot.wait("ACTIVE", timeout=20) == "ACTIVE"
    assert not os.path.exists(os.path.join(session.dir, "keys"))
