"""The node daemon: one per node of a multi-node pilot; runs the units agents send it.

    python -m pilot.agent.node.daemon --bootstrap tcp://HOST:PORT --pulse tcp://HOST:PORT
                                --pilot UID --session SID
                                [--hint I] [--hint-base B] [--name NAME] [--timeout S]
                                [--table-timeout S] [--pulse-s S]
                                [--watch-parent | --watch-pid PID]
                                [--curve KEYS_DIR]   (channels beyond loopback:
                                pilot/wire/security.py)

Started by the bootstrap through the resource's launch method (partition/launch/: srun, exec,
or a network-namespace host), or forked ready-imported by the node zygote (agent/node/zygote.py,
launch method fork), which calls main() with the same arguments.  --watch-parent: halt when
the parent process is gone; --watch-pid: when process PID is (a forked daemon's parent is the
zygote: it watches the bootstrap).  Every wait is bounded; nothing here waits forever.
A daemon of a job that grows a running pilot (partition/nodes/join_job.py) is started the same way
with
--hint-base B: its hint is B plus its number within that job (--hint, or SLURM_NODEID).

What it does with each message it receives, by channel: agent/node/dispatch.py, from
pilot/wire/links.py's table.
Bring-up (bootstrap ROUTER "nodes" <-> this daemon's DEALER, identity = "d<hint>"):
    -> up      {hint, pid, endpoint, node: descriptor}   this node (pilot/config/network.py) and the
                                                          ROUTER endpoint agents talk to
    <- table   {index, width} + frame zlib(JSON)          the channel table: node index ->
                                                          {name, host_id, endpoint}; may come
                                                          from the bootstrap or, beyond the
                                                          fan-out width, from a parent daemon
                                                          (then on this daemon's ROUTER)
       this daemon forwards the same bytes to its children in the fan-out tree (the table's
       nodes in index order; the node at position p has positions width*(p+1) ..
       width*(p+1)+width-1 as children), then
    -> ready   {index, forwarded: [indices]}
    No table within --table-timeout seconds (at least as long as the bootstrap's gathers: a
    silent node must not take the healthy ones down with it): the daemon logs it and exits 3.
Liveness (the pulse: this daemon's DEALER, identity "d<hint>", to the bootstrap's pulse
ROUTER --pulse; the protocol and the ZeroMQ options are in pilot/wire/liveness.py):
    -> hb {n} and <- hb {n, d} every --pulse-s s (liveness.period, the bootstrap's choice: 0.5 s,
       longer for a pilot of more than 1,024 nodes; n: this daemon's heartbeats, numbered; the
       bootstrap's says the last one it heard, and d how many `drop`s it sent on the node
       channel).  Silence is not death: the bootstrap may be stalled
       (stopped, swapped out, its loop behind a slow file system) or its link down, and the
       batch job that holds this daemon still lives, so its units run on and their outcomes
       wait in the queues to their agents (ROUTER_MANDATORY, SNDHWM 100,000).  Nothing from
       the bootstrap for --timeout + REJOIN seconds is logged (node.silent), and so is its
       first word after it (node.heard: then the heartbeats and the queued exits go on).
       The daemon ends only when the pilot is gone: `halt`; SIGTERM (the batch system ends
       the job step, srun); or, without a batch system (fork/exec/netns launches: nothing
       else would end it), the bootstrap process gone (--watch-parent / --watch-pid).
    <- halt {reason}   on the pulse too: this node was declared lost (see below)
    The lease: a rank starts only while the bootstrap cannot have declared this node lost
    (and so ended the partitions it was the agent's node or the last node of, their final
    records written): within node_timeout of sending a heartbeat the bootstrap has since said
    it heard (it loses a node only after node_timeout + REJOIN s without word from it), and
    with every `drop` it had sent by then read.  An `exec` that comes outside the lease (this
    daemon was stopped, or its link cut, for longer) waits, in order, until the bootstrap
    answers again; a `halt` then (the node was lost meanwhile), a `drop` of its partition, or
    a `kill` of its unit, and it is reported without having started: an exit with no code
    and "not started on NODE: why" (a kill's: its signal), once.  An `exec` of a partition
    already dropped, or during a halt, is reported so at once.
Life (the node channel):
    <- drop {part}     a partition ended: kill (SIGKILL) what of its units still runs here
    <- agent {uid, argv, log, cfg, cfg_text}   start a partition's agent on this node (its
                       agent node, when the resource gives agents nodes of their own), its
                       config file `cfg` written first from cfg_text; -> agent_exit {uid, code}
                       when it ends (code < 0: signal)
    <- agent_kill {uid}        SIGKILL that agent
    <- halt {reason}   kill what still runs (SIGKILL), -> bye {killed: N}, exit 0
Units (this daemon's ROUTER <-> each agent's one ROUTER to all its nodes, identity = partition uid;
       agent/node/ranks.py):
    <- exec    {env, node, prof, gpus,
                ranks: [{uid, rank, ranks, argv, sandbox, files, cpus, ids, unit, env}, ...]}
               spawn each rank: own process group, stdin /dev/null, stdout/stderr through
               pipes, bound to `cpus` (logical core ids, round-robin onto the real ones); its
               environment (agent/rank_env.py exec_env: its unit's `environment` and the
               PILOT_* / RP_* variables of its unit, `ids` and rank, over the partition's
               `env`, sent once per message) adds to the daemon's own.  The ranks an agent
               placed on this node in one turn of its loop come in one message
    <- kill    {uids, sig}                                      signal those units' groups
    -> events  {out: [[uid, node, rank, stream, text], ...],    batched once per loop turn;
                exit: [[uid, rank, code, error], ...]}          a rank's output is sent before
                                                                its exit
Output: every byte is appended to the unit sandbox's STDOUT / STDERR (shared by its ranks,
O_APPEND) and the first FORWARD_MAX bytes per rank and stream are forwarded, tagged with unit,
node and rank; after that a single "[... output truncated ...]" line says where the rest is
(agent/node/ranks.py).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import socket
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from pilot import processes, validate
from pilot.agent.node.dispatch import FROM_NODE, FROM_PULSE, FROM_RANKS
from pilot.agent.node.ranks import NodeRanks
from pilot.agent.spawn import Spawner, exits
from pilot.config import network
from pilot.wire import checks, liveness, security
from pilot.wire.protocol import drain, msg, pack, unpack

log = logging.getLogger("node")
BOOTSTRAP = "bootstrap"  # the one peer whose silence a daemon watches (liveness.Silence)
# ranks the agents' execs start in one turn of the loop at most (an exec holds a turn's ranks
# for this node, up to 1,024): the rest wait in the socket, and the loop's heartbeats, and
# those of the other daemons a host process drives (agent/node/sim.py), go on between
RANKS_PER_TURN = 256


@dataclass
class Hosted:
    """What a host process gives each node daemon it drives in its loop (agent/node/sim.py):
    its ZeroMQ context and poller, its CURVE keys, the node descriptor (each daemon sets its
    own name) and what makes a daemon's ranks (`ranks(node name)`, NodeRanks' interface)."""

    ctx: zmq.Context
    poller: zmq.Poller
    keys: security.Keys | None
    node: dict
    ranks: Callable


def children(pos: int, width: int, n: int) -> list[int]:
    """Positions of the children of the node at position `pos` in the fan-out tree over n
    nodes (the bootstrap sends to positions 0..width-1)."""
    first = width * (pos + 1)
    return list(range(first, min(first + width, n)))


_LAST_TABLE: list = [b"", {}]  # the last table decoded in this process, and its blob


def _decoded_table(blob: bytes) -> dict:
    """The channel table {index: {name, host_id, endpoint}} in `blob`, read-only.  Decoded
    once per process: the daemons a simulated host runs (agent/node/sim.py) share it, as
    real nodes decode theirs in parallel."""
    if blob != _LAST_TABLE[0]:
        table = unpack(zlib.decompress(blob))
        _LAST_TABLE[:] = [blob, {int(k): v for k, v in table.items()}]
    return _LAST_TABLE[1]


class NodeDaemon:
    """One node's daemon.  Alone in its process (`run`), or one of many that a host process
    drives in its own loop (agent/node/sim.py: a simulated resource), given that loop's
    ZeroMQ context and poller and the ranks it runs (`hosted`): then it installs no signal
    handlers, reaps no children and ends no context of its own, and `turn` is its share of
    each turn of the host's loop."""

    def __init__(self, args, hosted: Hosted | None = None) -> None:
        self.args = args
        self.hint = args.hint
        self.hosted = hosted is not None
        self.node = network.describe(is_primary=False) if hosted is None else dict(hosted.node)
        if args.name:
            self.node["name"] = args.name
        self.name = self.node["name"]
        self.ctx = zmq.Context.instance() if hosted is None else hosted.ctx
        self.up = self.ctx.socket(zmq.DEALER)
        self.up.setsockopt(zmq.IDENTITY, f"d{self.hint}".encode())
        self.up.setsockopt(zmq.LINGER, 2000)
        self.keys = security.load(args.curve) if hosted is None else hosted.keys
        if self.keys is not None:
            self.keys.client(self.up)
        self.up.connect(args.bootstrap)
        self.period = args.pulse_s  # seconds between heartbeats (the bootstrap's choice)
        self.pulse = liveness.pulse_socket(self.ctx, zmq.DEALER, args.timeout, self.period)
        self.pulse.setsockopt(zmq.IDENTITY, f"d{self.hint}".encode())
        if self.keys is not None:
            self.keys.client(self.pulse)
        self.pulse.connect(args.pulse)
        self.units = self.ctx.socket(zmq.ROUTER)
        self.units.setsockopt(zmq.LINGER, 1000)
        self.units.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.units.setsockopt(zmq.SNDHWM, 100_000)  # exits are never dropped for a slow agent
        if self.keys is not None:
            self.keys.serve(self.units)
        addr = network.source_address(args.bootstrap)
        port = self.units.bind_to_random_port(f"tcp://{addr}")
        self.endpoint = f"tcp://{addr}:{port}"
        self.index: int | None = None
        self.table: dict | None = None
        self.agents: dict[int, str] = {}  # pid -> partition uid of agents hosted here
        self.silence = liveness.Silence(  # of the bootstrap
            liveness.tolerance(args.timeout, self.period), liveness.rejoin(self.period)
        )
        self.silent_since: float | None = None  # (node.silent said; node.heard when it ends)
        self.ppid = os.getppid()
        self.watched = processes.Watched(args.watch_pid) if args.watch_pid else None
        self.halting: str | None = None
        self.hb_n = 0  # heartbeats sent, numbered: the bootstrap echoes the last it heard
        self.hb_sent: dict[int, float] = {}  # their numbers -> when sent (monotonic)
        self.lease = 0.0  # when the latest heartbeat the bootstrap heard was sent
        self.drops_seen = 0  # `drop`s read on the node channel
        self.drops_due = 0  # `drop`s the bootstrap had sent when it last beat
        self.dropped: set[bytes] = set()  # partitions ended: their execs are refused
        self.held: list[tuple[bytes, dict]] = []  # execs that came outside the lease
        self.turn_ranks = 0  # ranks of execs read in this turn (RANKS_PER_TURN)
        self.bad_messages = checks.BadMessages(log)
        self.internal = checks.InternalErrors(log)
        self.started = 0.0  # (monotonic) when it said up: its table is awaited from then
        self.next_hb = 0.0
        if hosted is not None:  # (the host's poller; the ranks it makes: agent/node/sim.py)
            self.poller = hosted.poller
            self.spawner = None
            self.ranks = hosted.ranks(self.name)
            return
        self.spawner = Spawner({"PILOT_SESSION_ID": args.session, "PILOT_PILOT_ID": args.pilot})
        self.poller = zmq.Poller()
        self.ranks = NodeRanks(self.spawner, self.name, self.poller)  # (agent/node/ranks.py)
        self.wake_r, self.wake_w = socket.socketpair()
        for s in (self.wake_r, self.wake_w):
            s.setblocking(False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_term)

    def _on_term(self, signum, _frame) -> None:
        self.halting = f"node daemon received {signal.Signals(signum).name}"

    # -- bring-up -------------------------------------------------------------------------------
    def on_table(self, body: dict, blob: bytes) -> None:
        if self.index is not None:  # a second copy: the bootstrap asks again, or a parent's
            self.up.send_multipart(msg(b"ready", {"index": self.index, "forwarded": []}))
            return  # (already forwarded; this `ready` may be the one that was missed)
        index = int(body["index"])
        self.silence.heard(BOOTSTRAP)  # it is alive: it sent the table; its clock starts
        self.table = _decoded_table(blob)
        width = int(body["width"])
        order = sorted(self.table)  # the tree is over the nodes that are up, in index order
        forwarded = []
        for child in [order[p] for p in children(order.index(index), width, len(order))]:
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 10000)  # (a busy child's handshake may take seconds)
            if self.keys is not None:
                self.keys.client(sock)
            sock.connect(self.table[child]["endpoint"])
            sock.send_multipart([b"table", pack(dict(body, index=child)), blob])
            sock.close()  # LINGER delivers the message
            forwarded.append(child)
        self.index = index  # (only now: a table whose forward failed is taken again)
        self.up.send_multipart(msg(b"ready", {"index": self.index, "forwarded": forwarded}))
        log.info(
            "%s: node index %d, table of %d, forwarded to %s",
            self.name,
            self.index,
            len(self.table),
            forwarded,
        )

    # -- agents and units ---------------------------------------------------------------------
    def start_agent(self, body: dict) -> None:
        uid = body["uid"]
        assert self.spawner is not None  # (no agent is started on a simulated node)
        if body.get("cfg") is not None:
            cfg = os.open(body["cfg"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(cfg, "w") as f:
                f.write(body.get("cfg_text") or "")
        fd = os.open(body["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            pid = self.spawner.spawn(body["argv"], os.path.dirname(body["log"]), fd, fd)
        except OSError as exc:
            log.error("%s: cannot start the agent of %s: %s", self.name, uid, exc)
            self.up.send_multipart(msg(b"agent_exit", {"uid": uid, "code": 127}))
            return
        finally:
            os.close(fd)
        self.agents[pid] = uid
        log.info("%s: agent of %s started, pid %d", self.name, uid, pid)

    def kill_agent(self, uid: str) -> None:
        for pid, part in self.agents.items():
            if part == uid:
                processes.signal_process(pid, signal.SIGKILL)

    def reap(self) -> None:
        if self.hosted or not (self.ranks.running or self.agents):
            return
        for pid, code in exits():
            if self.ranks.ended(pid, code):
                continue
            part = self.agents.pop(pid, None)
            if part is not None:
                self.up.send_multipart(msg(b"agent_exit", {"uid": part, "code": code}))

    # -- loop -----------------------------------------------------------------------------------
    def on_message(self, frames: list[bytes], from_agent: bool) -> None:
        """A message on the node channel (from the bootstrap) or on this daemon's ROUTER (from
        agents, or a parent daemon's table), to its handler by pilot/wire/links.py's table; a kind
        the table does not list for that channel is a bad message."""
        ident = frames[0] if from_agent else None
        if from_agent:
            frames = frames[1:]
        dispatch = FROM_RANKS if from_agent else FROM_NODE
        kind = frames[0]
        handler, _, body = dispatch.read(kind, frames[1] if len(frames) > 1 else None)
        handler(self, ident, frames, body)

    def say_up(self) -> None:
        self.up.send_multipart(
            msg(
                b"up",
                {
                    "hint": self.hint,
                    "pid": os.getpid(),
                    "endpoint": self.endpoint,
                    "node": self.node,
                },
            )
        )
        log.info("%s: up, pid %d, units on %s", self.name, os.getpid(), self.endpoint)
        for s in (self.up, self.pulse, self.units):
            self.poller.register(s, zmq.POLLIN)
        if not self.hosted:
            self.poller.register(self.wake_r, zmq.POLLIN)
        self.started = self.next_hb = self.lease = time.monotonic()  # (nobody lost it before)

    def run(self) -> int:
        """Its own loop, alone in its process; the exit code."""
        self.say_up()
        while True:
            events = dict(self.poller.poll(200))
            if self.wake_r in events or self.wake_r.fileno() in events:
                try:
                    self.wake_r.recv(4096)
                except BlockingIOError:
                    pass
            self.ranks.read_ready(events)
            self.reap()
            self.serve(events)
            code = self.tick(time.monotonic())
            if code is not None:
                return code

    def serve(self, events: dict) -> None:
        """What its sockets hold (by `events`, a poll's), handled; its ranks' events sent."""
        if self.up in events:  # the bootstrap's first: a `drop` before its partition's execs
            self.receive(self.up, False)
        if self.pulse in events:  # (before the agents' execs: a halt, or a lease renewed)
            self.receive_pulse()
        if self.units in events:
            self.receive(self.units, True)
        self.release_held()
        self.ranks.flush(self.units)

    def tick(self, now: float) -> int | None:
        """Its clocks: the table awaited, a halt, its heartbeat; the exit code once it is done
        (None: it goes on).  (A host calls it for each daemon a few times a second: the
        heartbeat is every period, the table's wait and silence are seconds long.)"""
        table_wait = self.args.table_timeout or self.args.timeout
        if self.index is None and now - self.started > table_wait:
            log.error("%s: no channel table within %g s; exiting", self.name, table_wait)
            self.close()
            return 3
        if self.halting is None:
            self.halting = self.why_halt(now)
        if self.halting is not None:
            return self.halt()
        self.beat(now)
        if self.held:
            self.release_held()
            self.ranks.flush(self.units)
        return None

    def beat(self, now: float) -> None:
        """Its heartbeat to the bootstrap, when due (every period)."""
        if now >= self.next_hb:
            self.next_hb = now + self.period
            try:
                self.pulse.send_multipart(msg(b"hb", {"n": self.hb_n + 1}), zmq.NOBLOCK)
                self.hb_n += 1
                self.hb_sent[self.hb_n] = now
                if len(self.hb_sent) > 1024:  # (never echoed: the oldest go)
                    del self.hb_sent[min(self.hb_sent)]
            except zmq.Again:  # not connected now (ZMQ_IMMEDIATE): nothing stale queues
                pass

    def receive(self, sock: zmq.Socket, from_agent: bool) -> None:
        """The messages waiting on `sock` (the bootstrap's or the agents'), each handled: of
        the agents', as many as hold RANKS_PER_TURN ranks (the rest: the next turn)."""
        self.turn_ranks = 0
        for frames in drain(sock, 200):
            if not from_agent and self.index is not None:
                self.heard_bootstrap()
            try:
                self.on_message(frames, from_agent)
            except (validate.Invalid, zlib.error) as exc:  # a peer's bad message
                self.bad_messages.report(f"bad message {frames[:2]!r:.120}: {exc}")
            except Exception as exc:  # our own bug: said as such, and the daemon goes on
                self.internal.report(f"node daemon {frames[:1]!r:.40}", exc)
            if self.turn_ranks >= RANKS_PER_TURN:
                return  # (level-triggered: the next poll finds the rest)

    def receive_pulse(self) -> None:
        """`hb` (word from the bootstrap) or `halt` on the pulse channel."""
        for frames in drain(self.pulse, 200):
            if len(frames) == 2 and frames[0] == b"hb":  # (the usual one, twice a second)
                usual = liveness.usual_bootstrap_hb(frames[1])
                if usual is not None:
                    if self.index is not None:
                        self.heard_bootstrap()
                    self.echoed(usual)
                    continue
            try:
                kind = frames[0]
                handler, _, body = FROM_PULSE.read(kind, frames[1] if len(frames) > 1 else None)
            except validate.Invalid as exc:
                self.bad_messages.report(f"bad pulse {frames[:2]!r:.120}: {exc}")
                continue
            if self.index is not None:
                self.heard_bootstrap()
            handler(self, None, frames, body)

    # -- the lease (the module's header) -------------------------------------------------------
    def echoed(self, body: dict) -> None:
        """The bootstrap's `hb` {n, d}: it heard heartbeat n (the lease runs from n's send)
        and had sent d drops."""
        n = body.get("n")
        sent = self.hb_sent.get(n) if n is not None else None
        if sent is not None:
            assert n is not None  # (sent: n's)
            self.lease = max(self.lease, sent)
            for k in [k for k in self.hb_sent if k < n]:
                del self.hb_sent[k]
        self.drops_due = max(self.drops_due, int(body.get("d") or 0))

    def may_start(self) -> bool:
        return (
            self.halting is None
            and time.monotonic() - self.lease < self.args.timeout
            and self.drops_seen >= self.drops_due
        )

    def exec_rank(self, agent: bytes, body: dict) -> None:
        """An agent's `exec`: started now, or held outside the lease, or refused."""
        if self.halting is not None:
            self.ranks.not_started(agent, body, f"its daemon halts ({self.halting})")
        elif agent in self.dropped:
            self.ranks.not_started(agent, body, f"partition {agent.decode()} ended")
        elif self.held or not self.may_start():
            if not self.held:
                log.warning(
                    "%s: node.held: no word from the bootstrap for %.1f s: ranks wait for it "
                    "before they start (it may have declared this node lost)",
                    self.name,
                    time.monotonic() - self.lease,
                )
            self.held.append((agent, body))
        else:
            self.ranks.start(agent, body)

    def release_held(self) -> None:
        """The execs held, started in order once the lease holds again."""
        if not self.held or not self.may_start():
            return
        held, self.held = self.held, []
        log.info("%s: node.released: %d held rank(s) start", self.name, len(held))
        for agent, body in held:
            self.ranks.start(agent, body)

    def unhold(self, why: str, agent: bytes | None = None, uids=None, sig: int = 0) -> None:
        """Held execs that will never start (all, `agent`'s, or those of `uids`: killed by
        `sig`), reported so."""
        kept = []
        for a, body in self.held:
            if agent is not None and a != agent or uids is not None and body["uid"] not in uids:
                kept.append((a, body))
            elif uids is not None:
                self.ranks.not_started(a, body, None, -sig)
            else:
                self.ranks.not_started(a, body, why)
        self.held = kept

    def drop(self, part: bytes) -> None:
        """`drop` {part}: its partition ended."""
        self.drops_seen += 1
        self.dropped.add(part)
        self.unhold(f"partition {part.decode()} ended", agent=part)
        self.ranks.drop(part)

    def kill(self, uids, sig: int) -> None:
        uids = set(uids)
        self.unhold("killed", uids=uids, sig=sig)
        self.ranks.kill(uids, sig)

    def heard_bootstrap(self) -> None:
        self.silence.heard(BOOTSTRAP)
        if self.silent_since is not None:
            log.info(
                "%s: node.heard: the bootstrap speaks again after %.1f s of silence",
                self.name,
                time.monotonic() - self.silent_since,
            )
            self.silent_since = None

    def why_halt(self, now: float) -> str | None:
        """Why the pilot is gone (with --watch-parent / --watch-pid: its process gone), or
        None.  The bootstrap's silence is logged here, and never a reason."""
        silent = self.silence.silent()  # (every turn: a turn that came late is no silence)
        if BOOTSTRAP in silent and self.silent_since is None:
            self.silent_since = now - silent[BOOTSTRAP]
            log.warning(
                "%s: node.silent: no word from the bootstrap for %.1f s (node_timeout %g s + "
                "%g s); %d unit rank(s) run on: a node daemon ends with its pilot, not with "
                "its silence",
                self.name,
                silent[BOOTSTRAP],
                self.args.timeout,
                liveness.rejoin(self.period),
                len(self.ranks.running),
            )
        if self.args.watch_parent and os.getppid() != self.ppid:
            return "the bootstrap process is gone"
        if self.hosted:  # (its host watches the bootstrap for all of them: agent/node/sim.py)
            return None
        if self.watched is not None and self.watched.gone():
            return f"the bootstrap process (pid {self.watched.pid}) is gone"
        return None

    def halt(self) -> int:
        self.unhold(f"its daemon halted ({self.halting})")
        killed = self.ranks.kill_all(f"killed: node {self.name}'s daemon halted ({self.halting})")
        for pid in self.agents:  # normally gone already: the bootstrap stops agents first
            processes.signal_process(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while (self.ranks.running or self.agents) and time.monotonic() < deadline:
            self.reap()
            self.ranks.settle()  # (a host's ranks end what was killed at once)
            if self.ranks.running or self.agents:
                time.sleep(0.01)
        self.ranks.flush(self.units)
        self.up.send_multipart(msg(b"bye", {"killed": killed, "reason": self.halting}))
        log.info("%s: halted (%s), %d unit process(es) killed", self.name, self.halting, killed)
        self.close()
        return 0

    def close(self) -> None:
        """Its sockets closed (and, alone in its process, its keys' thread and context)."""
        for s in (self.up, self.pulse, self.units):
            if self.hosted:
                try:
                    self.poller.unregister(s)
                except KeyError:
                    pass
            s.close()
        if self.hosted:
            return
        if self.keys is not None:
            self.keys.close()
        self.ctx.term()


def add_pulse_s(p: argparse.ArgumentParser) -> None:
    """--pulse-s: seconds between heartbeats, as the bootstrap chose them (liveness.period)."""

    def period(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not liveness.PULSE <= value <= liveness.PULSE_MAX:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number of seconds within {liveness.PULSE:g} and "
                f"{liveness.PULSE_MAX:g}"
            )
        return value

    p.add_argument(
        "--pulse-s", type=period, default=liveness.PULSE, help="seconds between heartbeats"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pilot.agent.node.daemon")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--pulse", required=True, help="the bootstrap's pulse channel")
    p.add_argument("--pilot", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--hint", type=int, default=None)
    p.add_argument("--hint-base", type=int, default=0, help="added to the hint (a grow job)")
    p.add_argument("--name", default=None)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--table-timeout", type=float, default=None)
    add_pulse_s(p)
    p.add_argument("--watch-parent", action="store_true")
    p.add_argument("--watch-pid", type=int, default=None, help="halt when this process ends")
    p.add_argument("--curve", default=None, help="the session's key directory (CURVE)")
    args = p.parse_args(argv)
    if args.hint is None:  # srun: one task per node, SLURM numbers them
        args.hint = int(os.environ.get("SLURM_NODEID", os.environ.get("SLURM_PROCID", "0")))
    args.hint += args.hint_base
    logging.basicConfig(level=logging.INFO, format="%(asctime)s node %(levelname)s %(message)s")
    return NodeDaemon(args).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
