"""The client end of the pilot link (see pilot/wire/protocol.py): one ROUTER socket, one thread.

The ROUTER binds the session's address (default 127.0.0.1; `Session(address=)`,
PILOT_CLIENT_ADDRESS) on an OS-chosen port, and, for a pilot whose resource config names a
`client_address`, that address too (`endpoint_on`); for a pilot whose job may run on another
host and nothing says where the client is, every address of this host (`endpoints_everywhere`:
0.0.0.0, the job gets the list and probes it).  It is a CURVE server that admits only
the session's keys (pilot/wire/security.py); every pilot's bootstrap connects a DEALER whose
identity is the pilot uid.  Only the channel thread touches the socket: other threads hand frames
to `send()`, which queues them and wakes the thread through an eventfd.  Incoming messages go to
`on_message(pilot_uid, frames)`; `on_tick()` runs at least every TICK seconds (heartbeats, pilot
liveness).  Both callbacks run on the channel thread.
"""

from __future__ import annotations

import logging
import os
import queue
import threading

import zmq

from pilot.config import network
from pilot.wire import checks
from pilot.wire.protocol import drain, send_frames

log = logging.getLogger("pmgr.channel")
TICK = 0.25


class Channel:
    def __init__(self, on_message, on_tick, keys, host: str = "127.0.0.1") -> None:
        self.on_message = on_message
        self.on_tick = on_tick
        self.bad = checks.BadMessages(log)  # bad messages: logged once per 10 s, no traceback
        self.internal = checks.InternalErrors(log)  # our own bugs: with their traceback
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.keys = keys
        keys.serve(self.sock)  # only the session's bootstraps get in (pilot/wire/security.py)
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self.endpoints = {host: self.endpoint}  # address -> the endpoint there
        self.lock = threading.Lock()
        self.outq: queue.SimpleQueue = queue.SimpleQueue()
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._stop = False
        self.closing = threading.Lock()  # send() against close(): never a closed eventfd
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="pmgr-channel", daemon=True)
        self.thread.start()

    def send(self, pilot_uid: str, frames: list[bytes]) -> None:
        """Queue `frames` for the pilot; after close(), dropped (logged): nothing is sent once
        the session let go of its pilots (a store writer's late ack, a callback's command)."""
        with self.closing:
            if self.closed:
                log.info("not sent to %s after close: %r", pilot_uid, frames[0][:16])
                return
            self.outq.put((pilot_uid.encode(), frames))
            os.eventfd_write(self.efd, 1)

    def endpoint_on(self, address: str) -> str:
        """The pilot link's endpoint on `address` (an IP address of this host), listening
        there from now on if it did not yet (bound by the channel thread)."""
        with self.lock:
            if address not in self.endpoints:
                answer: queue.SimpleQueue = queue.SimpleQueue()
                self.outq.put((None, (address, answer)))
                os.eventfd_write(self.efd, 1)
                try:
                    got = answer.get(timeout=10.0)
                except queue.Empty:
                    raise OSError(f"the pilot link did not listen on {address} in 10 s") from None
                if isinstance(got, Exception):
                    raise OSError(f"the pilot link cannot listen on {address}: {got}")
                self.endpoints[address] = got
            return self.endpoints[address]

    def endpoints_everywhere(self) -> list[str]:
        """The pilot link listening on every address of this host (0.0.0.0: each connection
        is CURVE-authenticated, so that is safe), as one endpoint per address, loopback last:
        what a pilot's bootstrap probes when its job may run on another host."""
        port = self.endpoint_on("0.0.0.0").rsplit(":", 1)[1]
        return [f"tcp://{addr}:{port}" for addr in network.host_addresses()]

    def in_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.efd, zmq.POLLIN)
        while not self._stop:
            events = dict(poller.poll(int(TICK * 1000)))
            if self.efd in events:
                try:
                    os.eventfd_read(self.efd)
                except BlockingIOError:
                    pass
            self._send_queued()
            if self.sock in events:
                for frames in drain(self.sock, 500):
                    if len(frames) < 2 or not checks.UID.match(frames[0].decode(errors="replace")):
                        self.bad.report(
                            f"message from a peer that is no pilot: {frames[:2]!r:.120}"
                        )
                        continue
                    try:
                        self.on_message(frames[0].decode(), frames[1:])
                    except Exception as exc:  # our own bug: said as such; the client goes on
                        self.internal.report(f"client handling {frames[1][:16]!r}", exc)
            try:
                self.on_tick()
            except Exception:
                log.exception("tick failed")
        self._send_queued()

    def _send_queued(self) -> None:
        while True:
            try:
                ident, frames = self.outq.get_nowait()
            except queue.Empty:
                return
            if ident is None:  # a request to listen on one more address (endpoint_on)
                address, answer = frames
                try:
                    port = self.sock.bind_to_random_port(f"tcp://{address}")
                    answer.put(f"tcp://{address}:{port}")
                except zmq.ZMQError as exc:
                    answer.put(exc)
                continue
            try:
                # (with data frames, a call's large arguments: sent without a copy)
                send_frames(self.sock, [ident, *frames], copy=len(frames) <= 3)
            except zmq.ZMQError as exc:  # EHOSTUNREACH: that pilot is not connected (yet)
                # (the session says so, or not: an ack to a pilot that is ending is moot)
                self.on_message(ident.decode(), [b"unsent", str(exc).encode()] + frames)

    def close(self, timeout: float = 5.0) -> None:
        self._stop = True
        os.eventfd_write(self.efd, 1)
        self.thread.join(timeout)
        self.sock.close()
        with self.closing:
            self.closed = True
            os.close(self.efd)
        self.keys.close()
        self.ctx.term()
