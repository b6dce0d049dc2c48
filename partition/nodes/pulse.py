"""The bootstrap's end of the node daemons' pulse channels (the protocol: pilot/wire/liveness.py).

    NodePulse.endpoint  the ROUTER the daemons' pulse DEALERs connect to (`--pulse`)
    beat(hints)         `hb` {n, d} to each of them, every `period` s (liveness.period: the
                        same for every daemon of the pilot; a daemon not connected:
                        dropped): n the last `hb` heard from it (its number), d how many
                        `drop`s the node channel took for it (`dropped`): what a daemon needs
                        before it starts a rank (its lease: agent/node/daemon.py)
    read()              what came: `hb` {n} from a daemon is word from it (`heard`); from a
                        daemon of a node already lost, `halt` {reason} is the answer, once
                        per period, until it is gone
    silent()            {hint: seconds} of the daemons silent for longer than the tolerance
Word on the node channel (partition/nodes/node_set.py: `up`, `agent_exit`, `bye`) counts too: the
NodeSet calls `heard` for it.
"""

from __future__ import annotations

import logging
import time
from typing import cast

import zmq

from pilot import validate
from pilot.wire import links, liveness
from pilot.wire.protocol import ProtocolError, drain, msg, send_frames

log = logging.getLogger("bootstrap.nodes")
QUIET = 4  # periods: a daemon heard again after this long is logged (node.pulse)


class NodePulse:
    def __init__(
        self,
        ctx: zmq.Context,
        keys,
        address: str,
        node_timeout: float,
        backlog: int = 100,
        period: float = liveness.PULSE,
    ) -> None:
        self.period = period  # seconds between heartbeats, both ways (liveness.period)
        self.sock = liveness.pulse_socket(ctx, zmq.ROUTER, node_timeout, period)
        self.sock.setsockopt(zmq.BACKLOG, backlog)  # (every daemon connects at once)
        keys.serve(self.sock)  # CURVE (pilot/wire/security.py)
        port = self.sock.bind_to_random_port(f"tcp://{address}")
        self.endpoint = f"tcp://{address}:{port}"
        self.silence = liveness.Silence(
            liveness.tolerance(node_timeout, period), liveness.rejoin(period)
        )
        self.gone: dict[int, str] = {}  # hint -> why its node was lost (it is told to halt)
        self.next_beat = 0.0
        self.told: dict[int, float] = {}  # hint -> when it was last told to halt
        self.echo: dict[int, int] = {}  # hint -> the number of its last `hb` heard
        self.drops: dict[int, int] = {}  # hint -> `drop`s its node channel took

    def heard(self, hint: int) -> None:
        if hint not in self.gone:
            self.silence.heard(hint)

    def lost(self, hint: int, why: str) -> None:
        """The node of `hint` is lost: no more clocks for it, and `halt` if it speaks again."""
        self.silence.forget(hint)
        self.gone[hint] = why
        self.echo.pop(hint, None)  # (a lost node is never told it was heard again)

    def dropped(self, hint: int) -> None:
        """A `drop` went to the daemon of `hint` on the node channel."""
        self.drops[hint] = self.drops.get(hint, 0) + 1

    def beat(self, hints: list[int]) -> None:
        now = time.monotonic()
        if now < self.next_beat:
            return
        self.next_beat = now + self.period
        drops, echo = self.drops, self.echo
        for h in hints:
            self._send(h, [b"hb", liveness.hb_text(drops.get(h, 0), echo.get(h))])

    def read(self) -> None:
        for frames in drain(self.sock, 1000):
            if len(frames) == 3 and frames[1] == b"hb":  # (the usual one: 2 a second a node)
                usual = liveness.usual_daemon_hb(frames[0], frames[2])
                if usual is not None:
                    self.daemon_hb(usual[0], {"n": usual[1]})
                    continue
            try:
                ident = frames[0].decode()
                if not ident.startswith("d") or len(frames) < 2:
                    raise ProtocolError(f"{frames[:2]!r:.80} is not a daemon's pulse")
                hint = int(ident[1:])
                handler, _, body = PULSE.read(frames[1], frames[2] if len(frames) > 2 else None)
            except (validate.Invalid, ValueError) as exc:  # (int(): not a daemon's identity)
                log.error("bad pulse from a node daemon: %s", exc)
                continue
            handler(self, hint, body)

    def daemon_hb(self, hint: int, body: dict | None = None) -> None:
        """The daemon of `hint` lives: heard (its `hb`'s number goes back to it with the next
        beat); or, its node lost, told to halt (once a period)."""
        why = self.gone.get(hint)
        if why is None:
            n = (body or {}).get("n")
            if n is not None:
                self.echo[hint] = int(n)
            quiet = time.monotonic() - self.silence.last.get(hint, time.monotonic())
            if quiet > QUIET * self.period:
                log.info("node.pulse: daemon hint %d heard again after %.1f s", hint, quiet)
            self.silence.heard(hint)
        elif time.monotonic() - self.told.get(hint, 0.0) > self.period:
            self.told[hint] = time.monotonic()
            log.warning("node.rejoin: daemon hint %d of a node lost speaks: told to halt", hint)
            self._send(hint, msg(b"halt", {"reason": f"its node was declared lost: {why}"}))

    def silent(self) -> dict[int, float]:
        # (cast: the peers of this Silence are hints; liveness.Silence keeps any Hashable)
        return cast("dict[int, float]", self.silence.silent())

    def heard_through(self, hint: int) -> int | None:
        """A daemon heard steadily while `hint` was silent (liveness.Silence), or None."""
        return cast("int | None", self.silence.heard_through(hint))  # (a hint: see silent)

    def _send(self, hint: int, frames: list[bytes]) -> None:
        try:
            send_frames(self.sock, [f"d{hint}".encode(), *frames], zmq.NOBLOCK)
        except zmq.ZMQError:  # not connected now (EHOSTUNREACH) or its queue full: dropped
            pass

    def close(self) -> None:
        self.sock.close()


# what the bootstrap receives on the pulse (pilot/wire/links.py): handler(pulse, hint, body)
PULSE = links.Dispatch("pulse", "bootstrap", {b"hb": NodePulse.daemon_hb})
