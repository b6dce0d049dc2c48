"""Finding the client: the first of its addresses that answers (step `boot.connect`).

A client whose pilot job may run on another host listens on every address of its host and gives
the job the list (pmgr/pilot.py `client_endpoint`; nothing to configure).  The bootstrap opens a
probe per address at once: a DEALER with the session's CURVE keys, no identity, whose socket
monitor reports the handshake.  The first probe whose CURVE handshake succeeds names the address
of the pilot link (a completed handshake proves the peer holds the session's server key: another
user's port never completes one).  Probes send nothing; all are closed as soon as one succeeded,
or when the deadline passed (ClientUnreachable, naming every address and what happened there).
Cost at start: one TCP connect and one CURVE handshake per address, all in parallel: a few
milliseconds on a cluster network.
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


def first_answering(ctx: zmq.Context, keys, endpoints: list[str], timeout: float) -> str:
    """The first of `endpoints` whose CURVE handshake completes within `timeout` seconds."""
    if len(endpoints) == 1:
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
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            for mon, _ in poller.poll(max(1, int(left * 1000))):
                event = recv_monitor_message(mon)["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    return by_mon[mon]
                if event in _EVENTS:
                    last[by_mon[mon]] = _EVENTS[event]
        said = "; ".join(f"{ep}: {why}" for ep, why in last.items())
        raise ClientUnreachable(f"no address of the client answered in {timeout:g} s ({said})")
    finally:
        for sock, mon, _ in probes:
            sock.disable_monitor()
            mon.close(linger=0)
            sock.close(linger=0)
