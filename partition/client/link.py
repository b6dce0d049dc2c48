"""The bootstrap's ways in from outside: the pilot link to its client, and the control endpoint.

A part the Bootstrap (partition/bootstrap.py) holds, `boot.link`: it opens both sockets when made,
and is given what the client's messages act on (`serve`: the partition manager, again whenever
the bootstrap makes it anew; growth, the data port and its file thread, the outbox, the command
table's runner, the pilot's nodes).  The messages, their bodies and their checks are in
pilot/wire/links.py's table (link "pilot"), from which `FROM_CLIENT`, this side's dispatch, is
built; the commands are in partition/control.py.

Pilot link: a DEALER (identity = the pilot uid, a CURVE client) connected to the client's ROUTER
at cfg["client"] (or, when that is a list, at the first of them that answers:
partition/client/probe.py); the `attach` command points it at a new client process.
    client -> bootstrap (every message counts as word from the client: last_heard)
        units PART BATCH   to the partition's agent as raw frames (buffered while it is
                           STARTING); a partition that is gone: handed back at once (`back`)
        cmd               run (partition/control.py), answered `reply`
        put / get         data staging (partition/client/data_port.py), answered `put_ack` / `got`
        ack {uids}        the client's store has these units' final states: the outbox
                          (partition/client/outbox.py) lets go of them
        job {job, state}  what the batch system did with a job the pilot asked for to grow
                          (queued, failed, ended: partition/growth.py)
        hb                nothing else
    bootstrap -> client
        hello             once up (boot.hello), and again to a client that attaches
        state             partition updates queued by `emit`, sent as one batch by `flush`:
                          ahead of a reply, `back`, `lost` or an agent's batch, and at the end
                          of every turn of the loop
        hb, bye           every HEARTBEAT s; the pilot's final state last (down.bye)
        grow, release     submit a job of nodes for the pilot / end one (partition/growth.py)
        taken_over {by}   to a live owner when another client takes the pilot over (the
                          `attach` command, take_over=True); it answers `released`
    Sends never block: with no client listening, messages queue to the high-water mark, then
    are dropped and counted (`dropped`); an attaching client reconciles through `sync`.  No word
    from the client for client_timeout s: the pilot tears down CANCELED (bootstrap.py's loop).
Control endpoint: a ROUTER (CURVE server: the CLI and attaching clients hold the session's keys)
on the address this node reaches the client from; its endpoint is in PILOT_SANDBOX/control.json.
A request is a command, answered on the same socket; one that does not decode is answered
{ok: false, error}.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import zmq

from pilot import validate
from pilot.config import network
from pilot.partition.client.probe import first_answering
from pilot.wire import checks, framed, links, peer_version
from pilot.wire.protocol import ProtocolError, drain, msg, pack, send_frames, unpack

if TYPE_CHECKING:
    from pilot.partition.client.data_port import DataPort
    from pilot.partition.client.outbox import Outbox
    from pilot.partition.growth import Growth
    from pilot.partition.manager import PartitionManager
    from pilot.partition.off_loop import OffLoop
    from pilot.wire.security import Keys

log = logging.getLogger("bootstrap")


class ClientLink:
    """The pilot link and the control endpoint (the module's header)."""

    def __init__(
        self, cfg: dict, uid: str, ctx: zmq.Context, keys: Keys, internal: checks.InternalErrors
    ) -> None:
        """boot.connect, the client's side: the DEALER to the client, connected, and the
        control endpoint, bound.  `cfg` is the bootstrap's (client, client_timeout, size; an
        attach changes client, owner and epoch in it)."""
        self.cfg = cfg
        self.uid = uid
        self.ctx = ctx
        self.keys = keys
        self.internal = internal  # (a data port job's own bug is reported there)
        self.out: list = []  # partition state updates waiting to be sent (`flush`)
        self.dropped = 0  # messages dropped at the high-water mark (no client listening)
        self.last_heard = time.monotonic()  # the client's last word (the bootstrap's clocks)
        self.client = ctx.socket(zmq.DEALER)
        self.client.setsockopt(zmq.IDENTITY, uid.encode())
        self.client.setsockopt(zmq.LINGER, 3000)
        self.client.setsockopt(zmq.SNDHWM, 100_000)
        keys.client(self.client)
        cfg["client"] = self.find_client(cfg["client"])
        self.client.connect(cfg["client"])
        # the address this node reaches the client from: the client (and a CLI next to it)
        # reaches the control socket there, whichever node of the allocation this runs on
        self.here = network.source_address(cfg["client"])
        self.control = ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.LINGER, 0)
        keys.serve(self.control)  # the CLI and attaching clients hold the session's keys
        cport = self.control.bind_to_random_port(f"tcp://{self.here}")
        self.control_endpoint = f"tcp://{self.here}:{cport}"

    def serve(
        self,
        *,
        pm: PartitionManager,
        growth: Growth,
        data: DataPort,
        files: OffLoop,
        outbox: Outbox,
        command: Callable[[dict], dict],
        nodes_up: Callable[[], dict],
    ) -> None:
        """What the client's messages act on (`pm` again whenever the bootstrap makes the
        pilot's resources anew); `command(body)` runs one command (partition/control.py),
        `nodes_up()` is the pilot's nodes as `hello` names them."""
        self.pm = pm
        self.growth = growth
        self.data = data
        self.files = files
        self.outbox = outbox
        self.command = command
        self.nodes_up = nodes_up

    def find_client(self, client: str | list[str], waiting: float | None = None) -> str:
        """The client's endpoint: the one given, or the first of its addresses that answers
        (partition/client/probe.py; a client listening everywhere gives them all).  `waiting`
        (an attach: the client waits for the answer): the endpoint given is probed too, for at
        most that many seconds; ClientUnreachable if it does not answer."""
        if isinstance(client, str) and waiting is None:
            return client
        endpoints = [client] if isinstance(client, str) else client
        t0 = time.monotonic()
        timeout = self.cfg["client_timeout"] if waiting is None else waiting
        found = first_answering(self.ctx, self.keys, endpoints, timeout, waiting is not None)
        log.info(
            "boot.connect: the client answered at %s (%d addresses probed, %.0f ms)",
            found,
            len(endpoints),
            1e3 * (time.monotonic() - t0),
        )
        return found

    def _answer(self, send):
        """A data port job's callback (on the loop): `send` its result; a job that raised
        is a bug of our own (the port answers errors itself)."""

        def done(result) -> None:
            if isinstance(result, Exception):
                self.internal.report("bootstrap data port", result)
            else:
                send(result)

        return done

    def to_client(self, frames: list[bytes]) -> None:
        """Send without ever blocking: with no client listening (it died, a new one has not
        attached yet) messages queue up to the high-water mark, then are dropped and counted;
        an attaching client reconciles through `sync`, so nothing is decided on them."""
        try:
            # (a message with data frames, a function's large value: sent without a copy)
            send_frames(self.client, frames, zmq.NOBLOCK, copy=len(frames) <= 3)
        except zmq.Again:
            self.dropped += 1

    def flush(self) -> None:
        if self.out:
            self.to_client([b"state", pack(self.out)])
            self.out = []

    def on_client(self, frames: list[bytes]) -> None:
        """A message from the client, to its handler by pilot/wire/links.py's table (FROM_CLIENT);
        its body's shape is checked first (pilot/wire/messages.py: validate.Invalid, a bad message);
        what a handler raises after that is our own bug."""
        self.last_heard = time.monotonic()
        kind = frames[0]
        handler, _, body = FROM_CLIENT.read(kind, frames[1] if len(frames) > 1 else None)
        handler(self, frames, body)

    def client_units(self, frames: list[bytes], body: None) -> None:
        """To the partition's agent as raw frames, or, a partition that is gone, `back`."""
        if not 3 <= len(frames) <= 3 + framed.FRAMES_MAX:
            raise ProtocolError(f"units of {len(frames) - 1} frames (part, units, data...)")
        uid = checks.uid("units partition", frames[1].decode(errors="replace"))
        if not self.pm.take_buffered_or_bounce(uid, frames[2:]):
            self.flush()
            back = validate.items("units", unpack(frames[2]))
            self.outbox.handed_back(uid, back)  # (for a sync)
            self.to_client(msg(b"back", {"part": uid, "units": back}))

    def client_put(self, frames: list[bytes], body: None) -> None:
        """Data staging (partition/client/data_port.py), on the file thread (off_loop.py)."""
        if len(frames) != 3:
            raise ProtocolError(f"put of {len(frames) - 1} frames (header, chunk)")
        hdr, chunk = self._header(frames[1]), frames[2]
        self.files.run(
            lambda: self.data.put(hdr, chunk),
            self._answer(lambda reply: self.to_client(msg(b"put_ack", reply))),
        )

    def client_get(self, frames: list[bytes], body: None) -> None:
        if len(frames) != 2:
            raise ProtocolError(f"get of {len(frames) - 1} frames (header)")
        hdr = self._header(frames[1])
        self.files.run(
            lambda: self.data.get(hdr),
            self._answer(lambda got: self.to_client([b"got", pack(got[0]), got[1]])),
        )

    def client_cmd(self, frames: list[bytes], body: dict) -> None:
        self.flush()
        self.to_client([b"reply", pack(self.command(body))])

    def client_released(self, frames: list[bytes], body: dict) -> None:
        log.info("the pilot's old client released it")  # (its answer to taken_over)

    def client_ack(self, frames: list[bytes], body: dict) -> None:
        self.outbox.ack(body["uids"])  # the client's store has these outcomes (outbox.py)

    def client_hb(self, frames: list[bytes], body: dict) -> None:
        pass  # word from the client: last_heard, set for every message

    def client_job(self, frames: list[bytes], body: dict) -> None:
        self.growth.on_job(body)  # what the batch system did with a job (partition/growth.py)

    @staticmethod
    def _header(frame: bytes) -> dict:
        hdr = unpack(frame)
        if not isinstance(hdr, dict):
            raise ProtocolError("a transfer header must be a JSON object")
        return hdr

    def release_owner(self, new_owner: dict, wait: float) -> None:
        """A take-over: tell the live owner it owns the pilot no more (`taken_over`) and give
        it `wait` seconds to say `released` (what it sends meanwhile is handled as usual)."""
        self.flush()
        self.to_client(msg(b"taken_over", {"by": new_owner}))
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            if not self.client.poll(int(left * 1000) + 1):
                break
            for frames in drain(self.client, 100):
                if frames[0] == b"released":
                    log.info("attach: the old owner released the pilot")
                    return
                try:
                    self.on_client(frames)
                except validate.Invalid as exc:
                    log.warning("attach: a bad message from the old owner: %s", exc)
        log.warning("attach: the old owner did not say released within %g s", wait)

    def point_at(self, endpoint: str) -> None:
        """(an attach) The link to the client at `endpoint` from now on (ValueError when it
        cannot connect there); word from it counts from now."""
        old = self.cfg["client"]
        if endpoint != old:
            try:
                self.client.connect(endpoint)
            except zmq.ZMQError as exc:
                raise ValueError(f"args.client={endpoint!r}: cannot connect: {exc}") from None
            try:
                self.client.disconnect(old)
            except zmq.ZMQError:
                pass
            self.cfg["client"] = endpoint
        self.last_heard = time.monotonic()

    def hello(self, attach: bool = False) -> None:
        """Tell the client the pilot is up (or, after an attach, that it is its client now)."""
        self.to_client(
            msg(
                b"hello",
                {
                    "pilot": self.uid,
                    "pid": os.getpid(),
                    "control": self.control_endpoint,
                    "size": self.cfg["size"],
                    "attach": attach,
                    "nodes": self.nodes_up(),
                    "jobs": self.growth.describe(),  # beyond the first (partition/growth.py)
                    **peer_version.mine(),  # what it speaks (pilot/wire/peer_version.py)
                },
            )
        )

    def on_control(self, frames: list[bytes]) -> None:
        ident, body = frames[0], frames[-1]
        try:
            request = unpack(body)
            if not isinstance(request, dict):
                raise ProtocolError("a command must be a JSON object")
            reply = self.command(request)
        except ProtocolError as exc:
            reply = {"ok": False, "error": str(exc)}
        self.flush()
        self.control.send_multipart([ident, b"", pack(reply)])


# what the bootstrap receives on the pilot link (pilot/wire/links.py), by kind: handler(self,
# frames, body), body None for the kinds the handler reads from the frames
FROM_CLIENT = links.Dispatch(
    "pilot",
    "bootstrap",
    {
        b"units": ClientLink.client_units,
        b"put": ClientLink.client_put,
        b"get": ClientLink.client_get,
        b"cmd": ClientLink.client_cmd,
        b"released": ClientLink.client_released,
        b"ack": ClientLink.client_ack,
        b"hb": ClientLink.client_hb,
        b"job": ClientLink.client_job,
    },
)
