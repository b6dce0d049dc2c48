"""pilot/wire/protocol.py's helpers shared by every component's loop; pilot/wire/links.py's table:
every process dispatches exactly the kinds it lists for it; the manual's protocol page is made from
it."""

from __future__ import annotations

import importlib
import time

import pytest
import zmq

from pilot import validate
from pilot.wire import links, protocol
from pilot.wire.protocol import ProtocolError, wait_ms


def test_wait_ms_rounds_up_and_never_goes_negative():
    assert wait_ms(0.0004) == 1
    assert wait_ms(0.25) == 250
    assert wait_ms(0.2501) == 251
    assert wait_ms(0) == 0
    assert wait_ms(-3.0) == 0


def test_a_loop_waiting_for_a_sub_millisecond_deadline_sleeps_instead_of_spinning():
    # the agent's loop waits this way for its next batch of state updates: a poll of
    # `left * 1000` ms is truncated to poll(0) by pyzmq, and the loop turned about a hundred
    # times through its last millisecond
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        sock.bind("inproc://wait-ms")
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        for _ in range(20):
            deadline = time.monotonic() + 0.0008
            turns = 0
            while time.monotonic() < deadline:
                poller.poll(wait_ms(deadline - time.monotonic()))
                turns += 1
            assert turns <= 3, f"{turns} turns of the loop for a 0.8 ms wait"
    finally:
        sock.close(0)
        ctx.term()


def test_send_frames_sends_what_send_multipart_sends_and_never_half_a_message():
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        router.bind("inproc://send-frames")
        dealer.setsockopt(zmq.IDENTITY, b"d1")
        dealer.connect("inproc://send-frames")
        dealer.send(b"hello")
        assert router.recv_multipart() == [b"d1", b"hello"]
        shared = zmq.Frame(b"shared")
        protocol.send_frames(router, [b"d1", b"exec", shared, bytearray(b"ba")], zmq.NOBLOCK)
        protocol.send_frames(router, [b"d1", memoryview(b"mv")], copy=False)
        assert dealer.recv_multipart() == [b"exec", b"shared", b"ba"]
        assert dealer.recv_multipart() == [b"mv"]
        # a frame that is not bytes is refused before anything is sent: no partial message
        # is left on the socket to be glued to the next one
        with pytest.raises(TypeError, match="frames must be bytes"):
            protocol.send_frames(router, [b"d1", b"exec", "text"])
        # an unknown peer (ROUTER_MANDATORY): refused at the first frame, nothing queued
        with pytest.raises(zmq.ZMQError) as err:
            protocol.send_frames(router, [b"nobody", b"exec", b"x"], zmq.NOBLOCK)
        assert err.value.errno == zmq.EHOSTUNREACH
        protocol.send_frames(router, [b"d1", b"after"])
        assert dealer.recv_multipart() == [b"after"]
        assert dealer.poll(50) == 0
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()


# -- the protocol table (pilot/wire/links.py) and the dispatchers built from it
# -------------------------
DISPATCHING = (  # every module that builds a dispatch from the table
    "pilot.pmgr.core.session_dispatch",  # the client: the pilot link
    "pilot.partition.client.link",  # the bootstrap: the pilot link
    "pilot.partition.agents.channel",  # the bootstrap: the agent link
    "pilot.agent.agent",  # the agent: the agent link
    "pilot.partition.nodes.node_set",  # the bootstrap: the node channel
    "pilot.partition.nodes.pulse",  # the bootstrap: the pulse
    "pilot.agent.node.dispatch",  # a node daemon: the node channel, the pulse, the ranks channel
    "pilot.agent.runners.daemons",  # an agent's runner: the ranks channel
)


def _dispatchers():
    for name in DISPATCHING:
        importlib.import_module(name)
    return links


def test_every_receiver_in_the_table_dispatches_exactly_its_kinds():
    _dispatchers()
    built = {}
    for d in links.DISPATCHERS:
        key = (d.link, d.receiver)
        assert key not in built or built[key] is d, f"two dispatches of {key}"
        built[key] = d
        assert set(d.handlers) == set(links.received(*key)), key
    receivers = {(e.link, e.receiver) for e in links.TABLE}
    assert receivers == set(built), (
        f"in the table, no dispatch: {receivers - set(built)}; "
        f"a dispatch the table has no messages for: {set(built) - receivers}"
    )
    kinds = {(e.link, e.receiver, e.kind) for e in links.TABLE}
    assert len(kinds) == len(links.TABLE), "a (link, receiver, kind) listed twice"


def test_a_dispatch_unlike_the_table_is_refused_at_once():

    kinds = links.received("agent", "agent")
    handlers = dict.fromkeys(kinds, print)
    with pytest.raises(links.ProtocolTableError, match="without a handler.*'stop'"):
        links.Dispatch("agent", "agent", {k: v for k, v in handlers.items() if k != b"stop"})
    with pytest.raises(links.ProtocolTableError, match="does not list for it: \\[b'hello'\\]"):
        links.Dispatch("agent", "agent", {**handlers, b"hello": print})
    with pytest.raises(links.ProtocolTableError, match="link='nope'"):
        links.Dispatch("nope", "agent", {})


def test_a_kind_the_receiver_does_not_get_is_a_bad_message():
    _dispatchers()
    from pilot.agent.agent import FROM_BOOTSTRAP
    from pilot.partition.client.link import FROM_CLIENT

    with pytest.raises(ProtocolError, match="unknown message type b'ready'"):
        FROM_BOOTSTRAP.route(b"ready")  # (the agent sends it; it never gets one)
    with pytest.raises(ProtocolError, match="unknown message type"):
        FROM_CLIENT.body(b"x" * 100, b"{}")
    with pytest.raises(validate.Invalid, match="cancel.uids"):
        FROM_BOOTSTRAP.body(b"cancel", b'{"uids": 3}')
    assert FROM_BOOTSTRAP.body(b"cancel", b'{"uids": ["unit.0001"]}') == {"uids": ["unit.0001"]}
    assert links.received("pilot", "client")[b"hello"].check is not None
    # read(): the handler, its entry and the checked body in one look-up; no body for a kind
    # whose handler reads its frames itself
    handler, entry, body = FROM_BOOTSTRAP.read(b"cancel", b'{"uids": ["unit.0001"], "reason": "r"}')
    assert entry.kind == b"cancel" and body["reason"] == "r" and callable(handler)
    assert FROM_CLIENT.read(b"units", b"part")[2] is None
    with pytest.raises(validate.Invalid, match="cancel.uids"):
        FROM_BOOTSTRAP.read(b"cancel", b'{"uids": 3}')


def test_the_manuals_protocol_page_is_the_table():
    from tests.test_docs import _hooks

    _dispatchers()
    page = _hooks().protocol_page()
    for link in links.LINKS:
        section = page.split(f"## The {link} link")[1].split("## ")[0]
        for e in links.TABLE:
            if e.link == link:
                row = f"| `{e.kind.decode()}` | {e.sender} -> {e.receiver} |"
                assert row in section, row
    assert "Pilot link: client ROUTER" not in protocol.__doc__  # (no second copy of the table)


def test_a_heartbeat_made_and_read_without_the_codec_is_what_the_codec_makes_and_reads():
    """pilot/wire/liveness.py's fast path for `hb`: the text is pack()'s; a body in exactly that
    form reads as unpack() reads it; any other form is left to the checked way (None)."""
    from pilot.wire import liveness
    from pilot.wire.protocol import pack, unpack

    for d, n in ((0, None), (3, 0), (12, 987654321)):
        body = {"d": d} if n is None else {"d": d, "n": n}
        assert liveness.hb_text(d, n) == pack(body)
        assert liveness.usual_bootstrap_hb(pack(body)) == {"d": d, "n": n}
    assert liveness.usual_daemon_hb(b"d17", pack({"n": 42})) == (17, 42)
    for ident, text in (
        (b"d17", b'{"n": 42}'),
        (b"d17", b'{"n":042}'),
        (b"x17", b'{"n":1}'),
        (b"d17", b'{"n":-1}'),
        (b"d17", b'{"n":1,"x":2}'),
        (b"d", b'{"n":1}'),
    ):
        assert liveness.usual_daemon_hb(ident, text) is None, (ident, text)
    for text in (b'{"n":1,"d":2}', b'{"d":1.5}', b'{"d":1} ', b"[]", b'{"d":"1"}'):
        assert liveness.usual_bootstrap_hb(text) is None, text
    assert unpack(b'{"d":1,"n":2}') == liveness.usual_bootstrap_hb(b'{"d":1,"n":2}')
