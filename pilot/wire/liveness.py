"""Node liveness over links that fail: heartbeats that survive TCP's back-off, and silence
clocks that stop while their own process does not run.  Used by both ends alike: the
bootstrap (partition/nodes/pulse.py) and every node daemon (agent/node/daemon.py).

Why a channel of its own.  On one TCP connection a heartbeat queues behind whatever the
connection could not deliver, and after an outage TCP retransmits only when its back-off timer
fires (0.2, 0.4, 0.8 ... s between tries, doubling): a link that drops everything for d s
stays silent for up to ~2d s.  Measured on the test hosts (tests/netns.py `silence`): 4.2 s of
drops were 7.1 s of silence on a plain connection, so a node_timeout of 6 s ended the node.

Pulse channel, one per node daemon, beside the node channel that carries the work
(partition/nodes/node_set.py, agent/node/daemon.py):
    the bootstrap's ROUTER (bound beside its node channel, CURVE) <-> the daemon's DEALER,
    identity d<hint>
    <-> hb {}           every period P (PULSE, 0.5 s, unless the pilot is large: below),
                        both ways (the daemon's {"n": its number}, the bootstrap's {"d":
                        drops, "n": the last number heard}); an `hb` in exactly that form is
                        made and read without the JSON codec and the table's check (`hb_text`,
                        `usual_daemon_hb`, `usual_bootstrap_hb`: 2,048 a second at the
                        bootstrap of 1,024 nodes); any other goes the checked way
    <-  halt {reason}   to a daemon of a node declared lost that speaks again: it halts
    ZeroMQ's own heartbeats, the daemon's (ZMTP PING every `ping_ms`, 0.5 s at P = 0.5; no
    traffic within `dead_ms(node_timeout)`, half the node_timeout within 1.5 to 5 s, closes
    the connection: ZMQ_HEARTBEAT_IVL/TIMEOUT) end a connection stuck behind TCP's
    retransmissions, and the daemon connects anew every ~0.6-0.7 s (each attempt is given
    ZMQ_CONNECT_TIMEOUT 0.5 s, then ZMQ_RECONNECT_IVL 0.1 s plus ZeroMQ's jitter) instead of
    waiting out the back-off; the bootstrap's ROUTER gives the identity to the new connection
    (ZMQ_ROUTER_HANDOVER: the old one's pipe ends; the connection itself when the daemon's
    host closes it, or TCP gives it up: ZMQ_TCP_MAXRT, and keepalive when idle).  So after an
    outage of d s longer than that the first heartbeat comes within d + 2P + ~0.7 s: the last
    one before it, a reconnect, the next one; after a shorter one, at TCP's next
    retransmission (within ~2d + 0.2 s), which is less than node_timeout + REJOIN either way.
    Why not 1.5 s always: with 15 processes on 2 cores and 200,000 units in flight
    (bench/nodes.py, 1,024 simulated nodes, node_timeout 10 s) pings ran late past 1.5 s,
    connections were closed and made anew by the hundred, and 38 / 50 live nodes were lost
    in two runs; with 5 s none, and the flood ran 26 s instead of 33-41 s (the reconnects'
    CURVE handshakes cost CPU too).
    The bootstrap's ROUTER sets no ZeroMQ heartbeat, and the daemon asks it for no TTL:
    libzmq cancels a timer by a walk over every timer of its I/O thread, and those two put a
    timer on each of the bootstrap's connections, made and cancelled with every message, so
    each message cost O(nodes) there (22 % of the bootstrap's I/O thread at 4,096 nodes, in
    std::_Rb_tree_increment).  It answers the daemons' pings all the same.
    Nothing but heartbeats travels here, so a connection dropped loses nothing: the node
    channel keeps its own connection, and TCP delivers what waited there late but whole.
    The daemon sends only on a completed connection (ZMQ_IMMEDIATE): nothing stale queues.
The period grows with the pilot (`period`): PULSE up to PULSE_RATE / 2 nodes (1,024: 2,048
`hb` a second in at the bootstrap and as many out, each a CURVE message on its one I/O thread),
longer beyond, so that the bootstrap takes at most `pulse_rate` heartbeats a second (a resource
key, PULSE_RATE unless set), within node_timeout / 4 and PULSE_MAX; ZeroMQ's pings follow it,
but come at least every third of `dead_ms` (so at 4,096 nodes and node_timeout 10 s, P = 2 s
and a ping every 1.67 s: ~2,450 a second, each answered, in libzmq alone).  Measured
(bench/nodes.py, 2 cores, node_timeout 10 s): at 0.5 s, 4,096 simulated nodes never came up (a
quarter not up within 60 s: the pulses of the nodes up took the cores their peers' handshakes
needed); now they come up in 13-17 s.  The bootstrap picks P once, from the nodes it starts
with, and gives it to every daemon (`--pulse-s`, a job growing the pilot too: a pilot that
grows far beyond its first nodes keeps its first P).  REJOIN grows with P (`rejoin`: three
times P's growth, for the last heartbeat before an outage, the first after it and a ping).
Tolerance: a peer silent for node_timeout + REJOIN s is silent (`tolerance`).  REJOIN (3 s at
PULSE) covers the 1.7 s above plus two loop turns and a loaded machine, so an outage (or a
freeze of either process) shorter than node_timeout is nobody's silence.  What silence means
differs by end.  The bootstrap loses a silent node only while it hears another node steadily
(heard with no gap longer than REJOIN from the moment the silent one went quiet:
`heard_through`); every node silent at once is its own link's fault, and ends none.  A daemon
never halts for the bootstrap's silence: it logs it and runs its units on, for as long as its
pilot lives (its batch job; without a batch system, the bootstrap process:
agent/node/daemon.py).
A process that did not run (SIGSTOP, swapped out, a loop turn that took long) does not count
the time it was away as its peers' silence: between two looks at its clocks more than STALL s
apart, `Silence` counts only STALL s (a bootstrap frozen for 20 s gives its nodes a fresh
start when it runs again; one whose every turn is slow still counts STALL s a turn).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Hashable

import zmq

PULSE = 0.5  # seconds between heartbeats on a pulse channel, both ways (the shortest period)
PULSE_RATE = 2048  # heartbeats a second the bootstrap takes, at most (resource key pulse_rate)
PULSE_MAX = 5.0  # the longest period, whatever the nodes
REJOIN = 3.0  # seconds a link that came back needs to carry a heartbeat again (see above)
STALL = 1.0  # a gap this long between two looks at the clocks: this process did not run
ZMQ_PING_MS = 500  # ZeroMQ's heartbeat on the pulse connection
ZMQ_DEAD_MS = (1500, 5000)  # no traffic for node_timeout / 2 within these: closed, made anew
CONNECT_MS = 500  # one connect attempt (a SYN lost is retried by a new attempt, not by TCP)
RECONNECT_MS = 100  # pause between attempts (ZeroMQ adds up to as much again)


def period(nodes: int, node_timeout: float, rate: float = PULSE_RATE) -> float:
    """Seconds between heartbeats for a pilot of `nodes`: PULSE, or longer where that would
    make more than `rate` a second at the bootstrap; at most node_timeout / 4 and PULSE_MAX
    (never below PULSE)."""
    return max(PULSE, min(nodes / rate, PULSE_MAX, node_timeout / 4))


def rejoin(pulse: float = PULSE) -> float:
    """REJOIN for heartbeats every `pulse` s: a longer period adds three times its growth (the
    last heartbeat before an outage, the first after it, and ZeroMQ's ping, which follows)."""
    return REJOIN + 3 * (pulse - PULSE)


def tolerance(node_timeout: float, pulse: float = PULSE) -> float:
    """Seconds of silence after which a node (or, for a daemon, the bootstrap) is lost."""
    return node_timeout + rejoin(pulse)


def dead_ms(node_timeout: float) -> int:
    """Milliseconds without traffic after which ZeroMQ closes a pulse connection (and the
    daemon makes it anew): half the node_timeout, within ZMQ_DEAD_MS (see above)."""
    low, high = ZMQ_DEAD_MS
    return int(min(high, max(low, 500 * node_timeout)))


def ping_ms(node_timeout: float, pulse: float = PULSE) -> int:
    """ZeroMQ's ping interval: ZMQ_PING_MS, longer with a longer period, but at most a third
    of `dead_ms` (a ping or two late is not a dead connection)."""
    return max(ZMQ_PING_MS, min(int(1000 * pulse), dead_ms(node_timeout) // 3))


def pulse_socket(
    ctx: zmq.Context, kind: int, node_timeout: float, pulse: float = PULSE
) -> zmq.Socket:
    """A pulse channel's socket: ROUTER (the bootstrap's, bound) or DEALER (a daemon's,
    connecting), for heartbeats every `pulse` s; CURVE is set by the caller
    (pilot/wire/security.py)."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 16)
    if kind == zmq.ROUTER:  # (no ZeroMQ heartbeat here: the module's header)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a peer not connected: EHOSTUNREACH, dropped
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # a connection left behind (its daemon connected anew, or its host is gone) ends when
        # TCP gives it up: unacknowledged for twice the tolerance (TCP_USER_TIMEOUT), or idle
        # and unanswered (keepalive); no ZeroMQ timer
        sock.setsockopt(zmq.TCP_MAXRT, int(2000 * tolerance(node_timeout, pulse)))
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, max(1, math.ceil(node_timeout)))
        sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, max(1, math.ceil(node_timeout / 4)))
        sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, 4)
    else:
        sock.setsockopt(zmq.HEARTBEAT_IVL, ping_ms(node_timeout, pulse))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, dead_ms(node_timeout))
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.CONNECT_TIMEOUT, CONNECT_MS)
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
    return sock


class Silence:
    """When each peer was last heard, on a clock that stops while this process is away, and
    since when it has been heard steadily (no gap longer than `rejoin` s)."""

    def __init__(self, limit: float, rejoin: float = REJOIN) -> None:
        self.limit = limit  # seconds of silence after which a peer is lost
        self.rejoin = rejoin  # (REJOIN for the period: `rejoin()`)
        self.last: dict[Hashable, float] = {}
        self.since: dict[Hashable, float] = {}  # start of each peer's steady talk
        self.looked = time.monotonic()

    def heard(self, peer: Hashable) -> None:
        now = time.monotonic()
        t = self.last.get(peer)
        if t is None or now - t > self.rejoin:
            self.since[peer] = now
        self.last[peer] = now

    def forget(self, peer: Hashable) -> None:
        self.last.pop(peer, None)
        self.since.pop(peer, None)

    def heard_through(self, peer: Hashable) -> Hashable | None:
        """A peer heard steadily since `peer` went quiet (so that the silence is `peer`'s own,
        not this process's link's), or None.  (A peer silent longer than `rejoin` is not
        steady: `peer` itself is never the answer.)"""
        quiet = self.last.get(peer)
        if quiet is None:
            return None
        now = time.monotonic()
        rejoin = self.rejoin
        for other, t in self.last.items():
            if now - t <= rejoin and self.since[other] <= quiet + rejoin and other != peer:
                return other
        return None

    def silent(self) -> dict[Hashable, float]:
        """The peers silent for more than `limit` s: {peer: seconds}.  Called every loop turn;
        of a gap of more than STALL s since the last call (this process did not run), only
        STALL s are anybody's silence."""
        now = time.monotonic()
        away = now - self.looked - STALL
        self.looked = now
        if away > 0:
            for peer, t in self.last.items():
                self.last[peer] = min(now, t + away)
                self.since[peer] = min(now, self.since[peer] + away)
        return {p: now - t for p, t in self.last.items() if now - t > self.limit}


_NUM = rb"(0|[1-9]\d{0,14})"  # (a JSON integer >= 0: no sign, no leading zero)
_DAEMON_ID = re.compile(rb"d(\d{1,9})")
_DAEMON_HB = re.compile(rb'\{"n":' + _NUM + rb"\}")
_BOOTSTRAP_HB = re.compile(rb'\{"d":' + _NUM + rb'(?:,"n":' + _NUM + rb")?\}")


def hb_text(d: int, n: int | None) -> bytes:
    """The bootstrap's `hb` body {"d": d, "n": n} (no "n": None) as pack() would make it."""
    return b'{"d":%d}' % d if n is None else b'{"d":%d,"n":%d}' % (d, n)


def usual_daemon_hb(ident: bytes, body: bytes) -> tuple[int, int] | None:
    """(hint, n) of a daemon's `hb` exactly as it sends it (identity d<hint>, {"n":N}); None
    for anything else (read the checked way)."""
    who, got = _DAEMON_ID.fullmatch(ident), _DAEMON_HB.fullmatch(body)
    return None if who is None or got is None else (int(who[1]), int(got[1]))


def usual_bootstrap_hb(body: bytes) -> dict | None:
    """The bootstrap's `hb` body {"d", "n"?} exactly as hb_text makes it; None for anything
    else (read the checked way)."""
    got = _BOOTSTRAP_HB.fullmatch(body)
    if got is None:
        return None
    return {"d": int(got[1]), "n": None if got[2] is None else int(got[2])}
