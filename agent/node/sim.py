"""A host of simulated nodes: many node daemons in one process, for the `local.sim` resource.

    python -m pilot.agent.node.sim NODES.json --bootstrap ... --pulse ... --pilot UID
                                   --session SID [--timeout S] [--table-timeout S]
                                   [--curve KEYS] [--cores N] [--gpus N]

NODES.json lists this host's nodes, [[hint, name], ...].  Each is a NodeDaemon
(agent/node/daemon.py), the real one: its own sockets (the node channel, the pulse, the ranks
channel), CURVE keys, `up`, the channel table and its fan-out, heartbeats, `drop`, `halt` and
`bye`, as a daemon alone in its process has them.  What is simulated is the unit's process
(`SimRanks`): a rank whose command is `sleep X` (`sleep`, `/bin/sleep`, `/usr/bin/sleep`, X
seconds) holds its slots X seconds and ends with exit code 0, without a process; any other rank
ends at once, exit code 0, with no output and no sandbox (as on `local.zero`).  A kill ends a
rank at once with the signal's code.  So one process of a few hundred daemons stands for as
many nodes, and 1,024 nodes fit in a few host processes on one small machine
(partition/launch/sim.py starts them; bench/nodes.py measures them).

A node lost (what its daemon's process killed would be, for the tests and bench/nodes.py): on
SIGUSR1 the host reads NODES.json.kill, a list of hints, and ends those daemons at once, as a
kill -9 ends a process: its sockets closed with nothing more said (no bye, no exits of its
ranks), its ranks gone; the bootstrap finds the node silent and loses it after node_timeout.

The loop: one ZeroMQ context and poller for all of them (every socket of every daemon);
sockets with news go to their daemon (`serve`), ranks that end (the host's clock, a heap of
due times) flush their events, and every TICK s each daemon's clocks run (`tick`: heartbeat,
the table's deadline, a halt).  The poller (`HostPoller`) costs what the active sockets cost,
not what all of them do: zmq_poll over a host's 768 sockets took ~0.3 ms a call, half of the
host's CPU under a flood of units.  It waits in epoll on each socket's ZMQ_FD, which says only
that the socket's state may have changed (edge-like: a send or receive on the socket can take
the signal while messages still wait), so each socket epoll names, and each socket of a daemon
the loop has just served, ticked or made send (`look_again`), is asked ZMQ_EVENTS before the
next wait; every TICK every daemon is ticked, so nothing waits longer than that even if a
signal were missed.  The host halts them all when the bootstrap is gone (its parent
process, as --watch-parent) or on SIGTERM, and exits once every daemon has said bye.
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import os
import resource
import select
import signal
import socket
import sys
import time

import zmq

from pilot.agent.node.daemon import Hosted, NodeDaemon, add_pulse_s
from pilot.agent.node.ranks import RankEvents
from pilot.config import network
from pilot.wire import security

log = logging.getLogger("node")
TICK = 0.2  # seconds between each daemon's clocks (tick)
SLEEPS = ("sleep", "/bin/sleep", "/usr/bin/sleep")


def sleep_seconds(argv) -> float | None:
    """X when the command is `sleep X` (a number of seconds), else None."""
    if len(argv) == 2 and argv[0] in SLEEPS:
        try:
            secs = float(argv[1])
        except ValueError:
            return None
        return secs if secs >= 0 else None
    return None


class Clock:
    """The ranks that end at a time of their own (a `sleep`), by due time, for every node of
    the host: a heap of (due, seq, ranks, pid); a rank killed before is skipped."""

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = 0

    def at(self, due: float, ranks: SimRanks, pid: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, ranks, pid))

    def next_due(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def fire(self, now: float) -> set:
        """End the ranks due by `now`; the ranks objects that have events now."""
        touched = set()
        heap = self.heap
        while heap and heap[0][0] <= now:
            _, _, ranks, pid = heapq.heappop(heap)
            if ranks.end(pid, 0):
                touched.add(ranks)
        return touched


class SimRank:
    __slots__ = ("agent", "uid", "rank")

    def __init__(self, agent: bytes, uid: str, rank: int) -> None:
        self.agent, self.uid, self.rank = agent, uid, rank


class SimRanks(RankEvents):
    """A simulated node's ranks (NodeRanks' interface, agent/node/ranks.py): see the header."""

    def __init__(self, name: str, clock: Clock) -> None:
        super().__init__(name)
        self.clock = clock
        self.running: dict[int, SimRank] = {}  # (pseudo) pid -> rank
        self.next_pid = 1

    def start(self, agent: bytes, body: dict) -> None:
        secs = sleep_seconds(body["argv"])
        if not secs:
            self._event(agent, "exit", [body["uid"], body["rank"], 0, None])
            return
        pid, self.next_pid = self.next_pid, self.next_pid + 1
        self.running[pid] = SimRank(agent, body["uid"], body["rank"])
        self.clock.at(time.monotonic() + secs, self, pid)

    def end(self, pid: int, code: int, why: str | None = None) -> bool:
        """Rank `pid` ended with `code` (an exit event); False if it had ended before."""
        r = self.running.pop(pid, None)
        if r is None:
            return False
        self._event(r.agent, "exit", [r.uid, r.rank, code, why])
        return True

    def ended(self, pid: int, code: int) -> bool:  # (no process of its own: never a child)
        return False

    def read_ready(self, events: dict) -> None:  # (no pipes)
        pass

    def kill(self, uids, sig: int) -> None:
        uids = set(uids)
        for pid in [p for p, r in self.running.items() if r.uid in uids]:
            self.end(pid, -int(sig))

    def drop(self, agent: bytes) -> None:
        for pid in [p for p, r in self.running.items() if r.agent == agent]:
            self.end(pid, -signal.SIGKILL)

    def kill_all(self, why: str | None = None) -> int:
        killed = len(self.running)
        for pid in list(self.running):
            self.end(pid, -signal.SIGKILL, why)
        return killed


_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # (as ints: the enums' `&` costs ~1 us)


class HostPoller(zmq.Poller):
    """zmq.Poller's register / unregister / poll for many ZeroMQ sockets, at the cost of the
    sockets with news (the header): epoll on their ZMQ_FDs, then ZMQ_EVENTS of those and of
    the sockets `look_again` named since the last poll."""

    def __init__(self) -> None:
        super().__init__()
        self.epoll = select.epoll()
        self.fds: dict = {}  # socket -> its ZMQ_FD
        self.of_fd: dict[int, zmq.Socket] = {}
        self.again: set = set()

    def register(self, socket, flags=zmq.POLLIN):
        if socket in self.fds:  # (again: as zmq.Poller's, nothing more to do for POLLIN)
            return
        fd = socket.getsockopt(zmq.FD)
        self.fds[socket], self.of_fd[fd] = fd, socket
        self.epoll.register(fd, select.EPOLLIN)
        self.again.add(socket)

    def unregister(self, socket) -> None:
        fd = self.fds.pop(socket)  # (KeyError when it is not registered, as zmq.Poller's)
        self.of_fd.pop(fd, None)
        self.again.discard(socket)
        try:
            self.epoll.unregister(fd)
        except (OSError, ValueError):
            pass

    def look_again(self, socks) -> None:
        self.again.update(socks)

    def poll(self, timeout=None) -> list:
        """[(socket, POLLIN)] of the sockets with messages; waits up to `timeout` ms for one
        (None: for ever) unless some are to be looked at again."""
        wait = -1 if timeout is None or timeout < 0 else timeout / 1000  # (< 0: for ever)
        fired = self.epoll.poll(0 if self.again else wait)
        look, self.again = self.again, set()
        look.update(self.of_fd[fd] for fd, _ in fired if fd in self.of_fd)
        fds = self.fds
        return [(s, zmq.POLLIN) for s in look if s in fds and s.get(_EVENTS) & _POLLIN]


class SimHost:
    """The daemons of this host's nodes, in one loop (the module's header)."""

    def __init__(self, args, nodes: list) -> None:
        self.ctx = zmq.Context()
        # a real node's daemon has its own process, its own limits: here they are shared by
        # every daemon of the host (3 sockets each, and the table's forwards while they linger)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 64 + len(nodes) * 24
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
        self.ctx.set(zmq.MAX_SOCKETS, len(nodes) * 16 + 64)
        self.poller = HostPoller()
        self.clock = Clock()
        node = network.describe(is_primary=False)
        node.update(num_cpus=args.cores, gpus=list(range(args.gpus)))
        keys = security.load(args.curve)
        hosted = Hosted(self.ctx, self.poller, keys, node, lambda name: SimRanks(name, self.clock))
        self.keys = keys
        self.daemons: list[NodeDaemon] = []
        for hint, name in nodes:
            one = argparse.Namespace(**vars(args))
            one.hint, one.name, one.watch_pid, one.watch_parent = hint, name, None, False
            self.daemons.append(NodeDaemon(one, hosted))
        self.by_ranks = {d.ranks: d for d in self.daemons}  # (a daemon's simulated ranks)
        self.owner: dict = {}  # socket -> its daemon
        for d in self.daemons:
            for s in (d.up, d.pulse, d.units):
                self.owner[s] = d
        self.ppid = os.getppid()
        self.halting: str | None = None
        self.kill_file = args.nodes + ".kill"
        self.to_kill = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_term)
        signal.signal(signal.SIGUSR1, self._on_kill)

    def _on_term(self, signum, _frame) -> None:
        self.halting = f"node daemon received {signal.Signals(signum).name}"

    def _on_kill(self, signum, _frame) -> None:
        self.to_kill = True

    def kill_nodes(self, live: list) -> None:
        """(SIGUSR1) The daemons the kill file names end now, as killed (the header)."""
        self.to_kill = False
        try:
            with open(self.kill_file) as f:
                hints = {int(h) for h in json.load(f)}
        except (OSError, ValueError, TypeError) as exc:
            log.error("no nodes to kill: %s: %s", self.kill_file, exc)
            return
        for d in [d for d in live if d.hint in hints]:
            log.warning("%s: killed (as its process would be)", d.name)
            d.ranks.running.clear()
            d.ranks.events.clear()
            for s in (d.up, d.pulse, d.units):
                s.setsockopt(zmq.LINGER, 0)
                self.owner.pop(s, None)
            d.close()
            live.remove(d)
            self.by_ranks.pop(d.ranks, None)

    def run(self) -> int:
        for d in self.daemons:
            d.say_up()
        live = list(self.daemons)
        next_tick = time.monotonic() + TICK
        while live:
            now = time.monotonic()
            due = self.clock.next_due()
            wait = min(next_tick, due) if due is not None else next_tick
            events = dict(self.poller.poll(max(0, int((wait - now) * 1000) + 1)))
            now = time.monotonic()
            if self.to_kill:
                self.kill_nodes(live)
                events = {s: e for s, e in events.items() if s in self.owner}
            busy = {self.owner[s] for s in events if s in self.owner}
            touched = self.clock.fire(now)
            for k, d in enumerate(busy):
                d.serve(events)
                if k % 16 == 15 and time.monotonic() - now > TICK:  # a long burst: the
                    beat = time.monotonic()  # heartbeats go on meanwhile (or the bootstrap
                    for one in live:  # would take a busy host's nodes for lost)
                        one.beat(beat)
                        self.poller.look_again((one.pulse,))
            for r in touched:  # (ranks a sleep ended, not served above: their events now)
                owner = self.by_ranks.get(r)
                if owner is not None and owner not in busy:
                    owner.ranks.flush(owner.units)
                    busy.add(owner)
            for d in busy:  # (served or made to send: their sockets asked again; the header)
                self.poller.look_again((d.up, d.pulse, d.units))
            if now >= next_tick:
                next_tick = now + TICK
                if self.halting is None and os.getppid() != self.ppid:
                    self.halting = "the bootstrap process is gone"
                ended = []
                for d in live:
                    if self.halting is not None and d.halting is None:
                        d.halting = self.halting
                    if d.tick(now) is not None:
                        ended.append(d)
                    else:
                        self.poller.look_again((d.up, d.pulse, d.units))
                for d in ended:
                    live.remove(d)
                    self.by_ranks.pop(d.ranks, None)
                    for s in (d.up, d.pulse, d.units):
                        self.owner.pop(s, None)
        if self.keys is not None:
            self.keys.close()
        self.ctx.term()
        return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pilot.agent.node.sim")
    p.add_argument("nodes", help="a JSON file: [[hint, name], ...] of this host's nodes")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--pulse", required=True, help="the bootstrap's pulse channel")
    p.add_argument("--pilot", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--table-timeout", type=float, default=None)
    add_pulse_s(p)
    p.add_argument("--curve", default=None, help="the session's key directory (CURVE)")
    p.add_argument("--cores", type=int, default=128, help="cores a simulated node says it has")
    p.add_argument("--gpus", type=int, default=8, help="GPUs a simulated node says it has")
    args = p.parse_args(argv)
    with open(args.nodes) as f:
        nodes = [(int(h), str(n)) for h, n in json.load(f)]
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s node %(levelname)s %(message)s")
    t0 = time.monotonic()
    host = SimHost(args, nodes)
    log.warning("host %s: %d simulated node daemons, made in %.3f s", socket.gethostname(),
                len(nodes), time.monotonic() - t0)  # fmt: skip
    return host.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
