"""Finding the client: the first of its addresses that answers (step `boot.connect`).

A client whose pilot job may run on another host listens on every address of its host and gives
the job the list (pmgr/core/pilot.py `client_endpoint`; nothing to configure).  The bootstrap opens
a probe per address at once: a DEALER with the session's CURVE keys, no identity, whose socket
monitor reports the handshake.  The first probe whose CURVE handshake succeeds names the address of
the pilot link (a completed handshake proves the peer holds the session's server key: another user's
port never completes one).  Probes send nothing; all are closed as soon as one succeeded, or when
the deadline passed (ClientUnreachable, naming every address and what happened there). Cost at
start: one TCP connect and one CURVE handshake per address, all in parallel: a few milliseconds on a
cluster network.

An attach (partition/control.py) probes even a single address, and gives up as soon as every
address refused or could not be reached (`waiting=True`): the client that asked is waiting
for the answer, so it listens; one that does not is gone (killed after it asked), and the
pilot is not handed to it.
"""

from __future__ import annotations

import time

import zmq
from zmq.utils.monitor import recv_monitor_message

_EVENTS = {
    zmq.EVENT_CONNECTED: "connected",
    zmq.EVENT_CONNECT_RETRIED: "connection refused or unreachable, retrying",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake failed (protocol)",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "handshake refused (not this session's client)",
    zmq.EVENT_DISCONNECTED: "disconnected",
}


class ClientUnreachable(OSError):
    """No address of the client completed a handshake in time."""


def first_answering(
    ctx: zmq.Context, keys, endpoints: list[str], timeout: float, waiting: bool = False
) -> str:
    """The first of `endpoints` whose CURVE handshake completes within `timeout` seconds;
    `waiting`: the client is waiting for us (an attach): a single endpoint is probed too, and
    once every endpoint refused or was unreachable, none will answer."""
    if len(endpoints) == 1 and not waiting:
        return endpoints[0]  # (nothing to choose: the link itself retries until it connects)
    probes = []
    last: dict[str, str] = {ep: "no answer" for ep in endpoints}
    poller = zmq.Poller()
    try:
        for ep in endpoints:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            keys.client(sock)
            mon = sock.get_monitor_socket()
            sock.connect(ep)
            probes.append((sock, mon, ep))
            poller.register(mon, zmq.POLLIN)
        by_mon = {mon: ep for _, mon, ep in probes}
        refused = _EVENTS[zmq.EVENT_CONNECT_RETRIED]
        deadline = time.monotonic() + timeout
        gone = False  # (waiting: every endpoint refused or unreachable)
        while not gone and (left := deadline - time.monotonic()) > 0:
            for mon, _ in poller.poll(max(1, int(left * 1000))):
                event = recv_monitor_message(mon)["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    return by_mon[mon]
                if event in _EVENTS:
                    last[by_mon[mon]] = _EVENTS[event]
            gone = waiting and all(why == refused for why in last.values())
        said = "; ".join(f"{ep}: {why}" for ep, why in last.items())
        within = "" if gone else f" in {timeout:g} s"
        raise ClientUnreachable(f"no address of the client answered{within} ({said})")
    finally:
        for sock, mon, _ in probes:
            sock.disable_monitor()
            mon.close(linger=0)
            sock.close(linger=0)
