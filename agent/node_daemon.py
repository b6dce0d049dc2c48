"""The node daemon: one per node of a multi-node pilot; runs the units agents send it.

    python -m pilot.agent.node_daemon --bootstrap tcp://HOST:PORT --pilot UID --session SID
                                [--hint I] [--name NAME] [--timeout S] [--table-timeout S]
                                [--watch-parent]
                                [--curve KEYS_DIR]   (channels beyond loopback: pilot/security.py)

Started by the bootstrap through the resource's launch method (partition/launch/: srun,
fork, or a network-namespace host).  Every wait is bounded; nothing here waits forever.

Bring-up (bootstrap ROUTER "nodes" <-> this daemon's DEALER, identity = "d<hint>"):
    -> up      {hint, pid, endpoint, node: descriptor}   this node (pilot/network.py) and the
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
Life (same sockets):
    <- hb {} every second; -> hb {} every second.  Nothing from the bootstrap for --timeout
       seconds, or the parent process gone (fork/netns launches): the daemon kills its units
       and exits (the pilot is gone).
    <- drop {part}     a partition ended: kill (SIGKILL) what of its units still runs here
    <- agent {uid, argv, log}   start a partition's agent on this node (its agent node, when
                       the resource gives agents nodes of their own); -> agent_exit {uid, code}
                       when it ends (code < 0: signal)
    <- agent_kill {uid}        SIGKILL that agent
    <- halt {reason}   kill what still runs (SIGKILL), -> bye {killed: N}, exit 0
Units (this daemon's ROUTER <-> agent DEALERs, identity = partition uid):
    <- exec    {uid, rank, argv, env, gpu_var, sandbox, files, cpus}   spawn one rank: own process
               group, stdin /dev/null, stdout/stderr through pipes, bound to `cpus` (logical
               core ids, round-robin onto the real ones); `env` adds to the daemon's own
    <- kill    {uids, sig}                                      signal those units' groups
    -> events  {out: [[uid, node, rank, stream, text], ...],    batched once per loop turn;
                exit: [[uid, rank, code, error], ...]}          a rank's output is sent before
                                                                its exit
Output: every byte is appended to the unit sandbox's STDOUT / STDERR (shared by its ranks,
O_APPEND) and the first FORWARD_MAX bytes per rank and stream are forwarded, tagged with unit,
node and rank; after that a single "[... output truncated ...]" line says where the rest is.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import socket
import sys
import time
import zlib

import zmq

from pilot import checks, network, processes, security
from pilot.agent.spawn import Spawner, exits
from pilot.protocol import HEARTBEAT, ProtocolError, drain, msg, pack, unpack

FORWARD_MAX = 64 * 1024
_OUT = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
log = logging.getLogger("node")


def children(pos: int, width: int, n: int) -> list[int]:
    """Positions of the children of the node at position `pos` in the fan-out tree over n
    nodes (the bootstrap sends to positions 0..width-1)."""
    first = width * (pos + 1)
    return list(range(first, min(first + width, n)))


class Rank:
    __slots__ = ("agent", "uid", "rank", "pid", "pipes", "sent", "truncated", "write_failed")

    def __init__(self, agent, uid, rank, pid, pipes):
        self.agent, self.uid, self.rank, self.pid, self.pipes = agent, uid, rank, pid, pipes
        self.sent = {"stdout": 0, "stderr": 0}
        self.truncated = False
        self.write_failed = False


class NodeDaemon:
    def __init__(self, args) -> None:
        self.args = args
        self.hint = args.hint
        self.node = network.describe(is_primary=False)
        if args.name:
            self.node["name"] = args.name
        self.name = self.node["name"]
        self.ctx = zmq.Context.instance()
        self.up = self.ctx.socket(zmq.DEALER)
        self.up.setsockopt(zmq.IDENTITY, f"d{self.hint}".encode())
        self.up.setsockopt(zmq.LINGER, 2000)
        self.keys = security.load(args.curve)
        if self.keys is not None:
            self.keys.client(self.up)
        self.up.connect(args.bootstrap)
        self.units = self.ctx.socket(zmq.ROUTER)
        self.units.setsockopt(zmq.LINGER, 1000)
        self.units.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.units.setsockopt(zmq.SNDHWM, 100_000)  # exits are never dropped for a slow agent
        if self.keys is not None:
            self.keys.serve(self.units)
        addr = network.source_address(args.bootstrap)
        port = self.units.bind_to_random_port(f"tcp://{addr}")
        self.endpoint = f"tcp://{addr}:{port}"
        self.spawner = Spawner({"PILOT_SESSION_ID": args.session, "PILOT_PILOT_ID": args.pilot})
        self.index: int | None = None
        self.table: dict | None = None
        self.ranks: dict[int, Rank] = {}  # pid -> rank
        self.pipes: dict[int, tuple[Rank, str]] = {}  # read fd -> (rank, stream)
        self.files: dict[str, list] = {}  # unit uid -> [out fd, err fd, ranks using them]
        self.events: dict[bytes, dict] = {}  # agent identity -> {out, exit}
        self.agents: dict[int, str] = {}  # pid -> partition uid of agents hosted here
        self.poller = zmq.Poller()
        self.last_heard = time.monotonic()
        self.ppid = os.getppid()
        self.wake_r, self.wake_w = socket.socketpair()
        for s in (self.wake_r, self.wake_w):
            s.setblocking(False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        self.halting: str | None = None
        self.bad_messages = checks.BadMessages(log)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_term)

    def _on_term(self, signum, _frame) -> None:
        self.halting = f"node daemon received {signal.Signals(signum).name}"

    # -- bring-up -------------------------------------------------------------------------------
    def on_table(self, body: dict, blob: bytes) -> None:
        if self.index is not None:
            return  # a second copy (retried send): already forwarded
        self.index = int(body["index"])
        self.last_heard = time.monotonic()  # the bootstrap is alive: it sent the table
        table = unpack(zlib.decompress(blob))
        self.table = {int(k): v for k, v in table.items()}
        width = int(body["width"])
        order = sorted(self.table)  # the tree is over the nodes that are up, in index order
        forwarded = []
        for child in [order[p] for p in children(order.index(self.index), width, len(order))]:
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 2000)
            if self.keys is not None:
                self.keys.client(sock)
            sock.connect(self.table[child]["endpoint"])
            sock.send_multipart([b"table", pack(dict(body, index=child)), blob])
            sock.close()  # LINGER delivers the message
            forwarded.append(child)
        self.up.send_multipart(msg(b"ready", {"index": self.index, "forwarded": forwarded}))
        log.info(
            "%s: node index %d, table of %d, forwarded to %s",
            self.name,
            self.index,
            len(self.table),
            forwarded,
        )

    # -- units ----------------------------------------------------------------------------------
    def _event(self, agent: bytes, kind: str, item: list) -> None:
        ev = self.events.get(agent)
        if ev is None:
            ev = self.events[agent] = {"out": [], "exit": []}
        ev[kind].append(item)

    def on_exec(self, agent: bytes, body: dict) -> None:
        uid, rank = body["uid"], body["rank"]
        pipes = []
        try:
            files = self.files.get(uid)
            if files is None:
                os.makedirs(body["sandbox"], exist_ok=True)
                names = body.get("files") or ("STDOUT", "STDERR")
                if len(names) != 2 or any(not n or "/" in n or n in (".", "..") for n in names):
                    raise ValueError(f"files={names!r} must be two file names")
                files = [
                    os.open(os.path.join(body["sandbox"], name), _OUT, 0o666)  # umask decides
                    for name in names
                ] + [0]
                self.files[uid] = files
            files[2] += 1
            for _ in range(2):
                r, w = os.pipe2(os.O_CLOEXEC)
                fcntl.fcntl(r, fcntl.F_SETFL, os.O_NONBLOCK)
                pipes.append((r, w))
            pid = self.spawner.spawn(
                body["argv"],
                body["sandbox"],
                pipes[0][1],
                pipes[1][1],
                body.get("env") or {},
                body.get("gpu_var"),
                body.get("cpus") or (),
            )
        except (OSError, ValueError, TypeError) as exc:  # ValueError: a NUL byte
            for r, w in pipes:
                os.close(r)
                os.close(w)
            self._close_files(uid)
            self._event(agent, "exit", [uid, rank, None, f"cannot start on {self.name}: {exc}"])
            return
        for _, w in pipes:
            os.close(w)
        r = Rank(agent, uid, rank, pid, [pipes[0][0], pipes[1][0]])
        self.ranks[pid] = r
        for fd, stream in zip(r.pipes, ("stdout", "stderr")):
            self.pipes[fd] = (r, stream)
            self.poller.register(fd, zmq.POLLIN)

    def _close_files(self, uid: str) -> None:
        files = self.files.get(uid)
        if files is None:
            return
        files[2] -= 1
        if files[2] <= 0:
            del self.files[uid]
            os.close(files[0])
            os.close(files[1])

    def read_pipe(self, fd: int, final: bool = False) -> None:
        """Read what the pipe holds; on EOF (or `final`) close it."""
        r, stream = self.pipes[fd]
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                data = None
            if data:
                try:
                    os.write(self.files[r.uid][0 if stream == "stdout" else 1], data)
                except OSError as exc:  # a full disk must not stop the daemon
                    if not r.write_failed:
                        r.write_failed = True
                        log.error("%s: %s of %s not written: %s", self.name, stream, r.uid, exc)
                left = FORWARD_MAX - r.sent[stream]
                if left > 0:
                    text = data[:left].decode(errors="replace")
                    r.sent[stream] += len(data)
                    self._event(r.agent, "out", [r.uid, self.name, r.rank, stream, text])
                elif not r.truncated:
                    r.truncated = True
                    note = f"[... output truncated: the rest is in the unit's {stream.upper()}]\n"
                    self._event(r.agent, "out", [r.uid, self.name, r.rank, stream, note])
                if len(data) == 65536:
                    continue
            if data == b"" or final:
                self.poller.unregister(fd)
                del self.pipes[fd]
                os.close(fd)
            return

    def start_agent(self, body: dict) -> None:
        uid = body["uid"]
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
        if not (self.ranks or self.agents):
            return
        for pid, code in exits():
            r = self.ranks.pop(pid, None)
            if r is None:
                part = self.agents.pop(pid, None)
                if part is not None:
                    self.up.send_multipart(msg(b"agent_exit", {"uid": part, "code": code}))
                continue
            for fd in r.pipes:
                if fd in self.pipes:
                    self.read_pipe(fd, final=True)
            self._close_files(r.uid)
            self._event(r.agent, "exit", [r.uid, r.rank, code, None])

    def kill(self, uids, sig: int) -> None:
        uids = set(uids)
        for r in self.ranks.values():
            if r.uid in uids:
                processes.signal_group(r.pid, sig)

    def drop(self, agent: bytes) -> None:
        left = [r for r in self.ranks.values() if r.agent == agent]
        for r in left:
            processes.signal_group(r.pid, signal.SIGKILL)
        if left:
            log.warning(
                "%s: %d process(es) of ended partition %s killed",
                self.name,
                len(left),
                agent.decode(),
            )

    def flush(self) -> None:
        for agent, ev in self.events.items():
            try:
                self.units.send_multipart([agent, b"events", pack(ev)])
            except zmq.ZMQError as exc:  # the agent is gone
                log.warning("events for %s dropped: %s", agent.decode(), exc)
        self.events.clear()

    # -- loop -----------------------------------------------------------------------------------
    def on_message(self, frames: list[bytes], from_agent: bool) -> None:
        ident = frames[0] if from_agent else None
        if from_agent:
            frames = frames[1:]
        kind = frames[0]
        body = unpack(frames[1]) if len(frames) > 1 else {}
        if kind == b"exec":
            self.on_exec(ident, body)
        elif kind == b"kill":
            self.kill(body["uids"], int(body.get("sig", signal.SIGTERM)))
        elif kind == b"table":
            self.on_table(body, frames[2])
        elif kind == b"hb":
            pass
        elif kind == b"agent" and not from_agent:
            self.start_agent(body)
        elif kind == b"agent_kill" and not from_agent:
            self.kill_agent(body["uid"])
        elif kind == b"drop" and not from_agent:
            self.drop(body["part"].encode())
        elif kind == b"halt" and not from_agent:
            self.halting = body.get("reason", "halt")
        else:
            raise ProtocolError(f"unknown message type {kind!r}")

    def run(self) -> int:
        timeout = self.args.timeout
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
        for s in (self.up, self.units, self.wake_r):
            self.poller.register(s, zmq.POLLIN)
        started = time.monotonic()
        next_hb = started + HEARTBEAT
        while True:
            events = dict(self.poller.poll(200))
            if self.wake_r in events or self.wake_r.fileno() in events:
                try:
                    self.wake_r.recv(4096)
                except BlockingIOError:
                    pass
            for fd in [fd for fd in self.pipes if fd in events]:
                if fd in self.pipes:
                    self.read_pipe(fd)
            self.reap()
            for sock, from_agent in ((self.up, False), (self.units, True)):
                if sock not in events:
                    continue
                for frames in drain(sock, 200):
                    if not from_agent:
                        self.last_heard = time.monotonic()
                    try:
                        self.on_message(frames, from_agent)
                    except (
                        ProtocolError,
                        KeyError,
                        IndexError,
                        TypeError,
                        ValueError,
                        AttributeError,
                        zlib.error,
                    ) as exc:
                        self.bad_messages.report(f"bad message {frames[:2]!r:.120}: {exc}")
            self.flush()
            now = time.monotonic()
            table_wait = self.args.table_timeout or timeout
            if self.index is None and now - started > table_wait:
                log.error("%s: no channel table within %g s; exiting", self.name, table_wait)
                return 3
            if self.halting is None:
                if self.index is not None and now - self.last_heard > timeout:
                    self.halting = f"no word from the bootstrap for {timeout:g} s"
                elif self.args.watch_parent and os.getppid() != self.ppid:
                    self.halting = "the bootstrap process is gone"
            if self.halting is not None:
                return self.halt()
            if now >= next_hb:
                next_hb = now + HEARTBEAT
                self.up.send_multipart(msg(b"hb"))

    def halt(self) -> int:
        killed = len(self.ranks)
        for r in list(self.ranks.values()):
            processes.signal_group(r.pid, signal.SIGKILL)
        for pid in self.agents:  # normally gone already: the bootstrap stops agents first
            processes.signal_process(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while (self.ranks or self.agents) and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)
        self.flush()
        self.up.send_multipart(msg(b"bye", {"killed": killed, "reason": self.halting}))
        log.info("%s: halted (%s), %d unit process(es) killed", self.name, self.halting, killed)
        self.up.close()
        self.units.close()
        if self.keys is not None:
            self.keys.close()
        self.ctx.term()
        return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pilot.agent.node_daemon")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--pilot", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--hint", type=int, default=None)
    p.add_argument("--name", default=None)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--table-timeout", type=float, default=None)
    p.add_argument("--watch-parent", action="store_true")
    p.add_argument("--curve", default=None, help="the session's key directory (CURVE)")
    args = p.parse_args(argv)
    if args.hint is None:  # srun: one task per node, SLURM numbers them
        args.hint = int(os.environ.get("SLURM_NODEID", os.environ.get("SLURM_PROCID", "0")))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s node %(levelname)s %(message)s")
    return NodeDaemon(args).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
