"""The ZeroMQ channels between client, bootstrap and agents, and their messages.

Every message is a multipart ZeroMQ message: [TYPE, BODY] where TYPE is a short ASCII word and
BODY is compact JSON (UTF-8).  Unit batches are forwarded by the bootstrap as raw frames, never
decoded on the way.  A message that does not decode, or has an unknown TYPE, is logged and answered
with an error where a reply is expected; it never stops a component.

The messages, link by link (pilot link: client <-> bootstrap; agent link: bootstrap <-> agent;
the node channels: bootstrap <-> node daemons, its pulse, agents <-> node daemons), who sends
each, its body, the check the body passes and what it means are in one table, pilot/wire/links.py
TABLE; every receiving process dispatches from it (wire.Dispatch), and the manual's protocol
page (docs/reference/protocol.md) is made from it.  The commands a pilot obeys (`cmd`) are in
partition/control.py, the keys that guard the node channels beyond loopback in
pilot/wire/security.py, node liveness (the pulse) in pilot/wire/liveness.py.

Start journal (agent -> bootstrap, through the pilot sandbox): before an agent starts a unit,
it appends the unit's uid and a newline to PILOT_SANDBOX/<partition uid>.started.  When the
agent dies, the bootstrap reads it (`lost` to the client): a unit in it may have run
(pilot/wire/journal.py: how it is written, and synced on a shared file system).

Timeouts: the client declares a pilot lost when it has heard nothing for client_timeout seconds
after it was ACTIVE; a bootstrap tears down when it has not heard from its client for
client_timeout seconds (so a new client can attach within that time); an agent that loses its
parent (ppid changes) tears down.  The bootstrap never blocks sending to its client: with no
client listening, messages queue to the high-water mark, then are dropped and counted; an
attaching client reconciles with sync.
"""

from __future__ import annotations

import json
import math

import zmq

from pilot.validate import Invalid

HEARTBEAT = 1.0  # seconds between heartbeats on the pilot link (node pulses: liveness.PULSE)

_dumps = json.JSONEncoder(separators=(",", ":")).encode
_loads = json.loads


class ProtocolError(Invalid):
    """A message that cannot be decoded or has a wrong shape (a peer's bad message)."""


def pack(obj) -> bytes:
    return _dumps(obj).encode()


def unpack(data: bytes):
    """The JSON body of a message; ProtocolError for anything else (not JSON, nested too deep
    for the parser: a hostile body never raises anything but ProtocolError)."""
    try:
        return _loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"undecodable message body: {exc}") from None
    except RecursionError:
        raise ProtocolError("message body nested too deep") from None


_MORE = int(zmq.SNDMORE)
_send = zmq.backend.Socket.send  # (what zmq.Socket.send calls after its own checks)
_FRAME_TYPES = frozenset((bytes, bytearray, memoryview, zmq.Frame))


def send_frames(sock: zmq.Socket, frames, flags: int = 0, copy: bool = True) -> None:
    """`sock.send_multipart(frames, flags, copy=copy)` at a third of its cost (~1 us against
    ~3.5 us for three frames, most of it pyzmq's making an enum.Flag of every frame's flags):
    the same libzmq sends, frame by frame, SNDMORE on all but the last, so errors are the
    same: zmq.Again or EHOSTUNREACH (a ROUTER_MANDATORY ROUTER) on the first frame, nothing
    queued; a frame refused after the first (its peer's pipe ended under it) is libzmq's to
    drop with the rest of the message, as it does for send_multipart.  Frames are exactly
    bytes, bytearray, memoryview or zmq.Frame (send_multipart takes any buffer: an array
    or a bytes subclass is refused here), checked before the first is sent (TypeError:
    nothing sent)."""
    if not _FRAME_TYPES.issuperset(map(type, frames)):
        raise TypeError(f"frames must be bytes or zmq.Frame: {[type(f) for f in frames]}")
    flags = int(flags)
    more = flags | _MORE
    for frame in frames[:-1]:
        _send(sock, frame, more, copy)
    _send(sock, frames[-1], flags, copy)


def msg(kind: bytes, body=None) -> list[bytes]:
    return [kind, pack({} if body is None else body)]


def drain(sock: zmq.Socket, limit: int):
    """The messages waiting on `sock`, at most `limit`, without blocking: the one receive loop
    of every component (a bounded batch per turn keeps one busy socket from starving the
    others)."""
    for _ in range(limit):
        try:
            yield sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return


def wait_ms(seconds: float) -> int:
    """A poll timeout in whole milliseconds, rounded up: pyzmq truncates a float, so a wait of
    less than 1 ms would be poll(0), and a loop waiting for a deadline would spin through its
    last millisecond instead of sleeping (the agent spun ~2.5 turns a unit that way, before
    every batch of state updates)."""
    return max(0, math.ceil(seconds * 1000))
