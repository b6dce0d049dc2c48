"""The unit processes of a node daemon (agent/node/daemon.py): one per rank the agents sent it,
their output and their exits.

What each message becomes here (the bodies are in agent/node/daemon.py's header):
    <- exec    start      spawn each rank (its environment: agent/rank_env.py `exec_env`):
                          a process group of its own, stdin /dev/null, stdout
                          and stderr through pipes, bound to its cores (agent/spawn.py); one
                          that cannot start is reported at once, as an exit with no code and
                          the error
    <- kill    kill       signal those units' process groups
    <- drop    drop       (the bootstrap's) SIGKILL what of an ended partition still runs
    <- halt    kill_all   (the bootstrap's) SIGKILL every rank
    -> events  flush      once per loop turn, one message per agent; a rank's output is sent
                          before its exit (`ended` reads its pipes to the end first)
Output: every byte is appended to the unit sandbox's STDOUT / STDERR (or the two `files` it
names; shared by its ranks, O_APPEND, opened with the first rank and closed with the last) and
the first FORWARD_MAX bytes per rank and stream are forwarded, tagged with unit, node and rank;
after that a single "[... output truncated ...]" line says where the rest is.  A write that
fails (a full disk) is logged once per rank and does not stop the daemon.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
from collections.abc import Iterable

import zmq

from pilot import processes
from pilot.agent.rank_env import exec_env
from pilot.agent.spawn import Spawner
from pilot.wire.protocol import pack, send_frames

FORWARD_MAX = 64 * 1024
_OUT = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
log = logging.getLogger("node")


class Rank:
    """One rank's process: whose it is, its pipes, how much of its output was forwarded."""

    __slots__ = (
        *("agent", "uid", "rank", "pid", "pipes", "sent", "truncated", "write_failed"),
        "killed_why",
    )

    def __init__(self, agent: bytes, uid: str, rank: int, pid: int, pipes: list[int]) -> None:
        self.agent, self.uid, self.rank, self.pid, self.pipes = agent, uid, rank, pid, pipes
        self.sent = {"stdout": 0, "stderr": 0}
        self.truncated = False
        self.write_failed = False
        self.killed_why: str | None = None  # killed by this daemon: why (its exit's error)


class RankEvents:
    """What waits to be sent to the agents: their ranks' output and exits (`events`), sent as
    one message per agent (`flush`).  The base of a node's ranks, real (NodeRanks) or
    simulated (agent/node/sim.py)."""

    def __init__(self, name: str) -> None:
        self.name = name  # this node's, in forwarded output and errors
        self.events: dict[bytes, dict] = {}  # agent identity -> {out, exit}

    def _event(self, agent: bytes, kind: str, item: list) -> None:
        ev = self.events.get(agent)
        if ev is None:
            ev = self.events[agent] = {"out": [], "exit": []}
        ev[kind].append(item)

    def not_started(self, agent: bytes, body: dict, why: str | None, code=None) -> None:
        """An `exec` that will never start: its exit, with no code and why (or a kill's
        `code`, the signal's negative, and no error)."""
        error = None if why is None else f"not started on {self.name}: {why}"
        self._event(agent, "exit", [body["uid"], body["rank"], code, error])

    def flush(self, sock: zmq.Socket) -> None:
        """Send every agent its events, on the daemon's ROUTER `sock`."""
        if not self.events:
            return
        for agent, ev in self.events.items():
            try:
                send_frames(sock, [agent, b"events", pack(ev)])
            except zmq.ZMQError as exc:  # the agent is gone
                log.warning("events for %s dropped: %s", agent.decode(), exc)
        self.events.clear()

    def settle(self) -> None:
        """(a halt) Nothing to do here: killed processes end, and are reaped, on their own
        (a host's simulated ranks end at once: agent/node/sim.py)."""


class NodeRanks(RankEvents):
    """The ranks running on this node, their pipes and output files, and the events that wait
    to be sent to their agents."""

    def __init__(self, spawner: Spawner, name: str, poller: zmq.Poller) -> None:
        super().__init__(name)
        self.spawner = spawner
        self.poller = poller  # the daemon's: output pipes are registered as ranks start
        self.running: dict[int, Rank] = {}  # pid -> rank
        self.pipes: dict[int, tuple[Rank, str]] = {}  # read fd -> (rank, stream)
        self.files: dict[str, list] = {}  # unit uid -> [out fd, err fd, ranks using them]

    def start(self, agent: bytes, body: dict) -> None:
        """`exec` from `agent`: spawn the rank (its failure is an exit event)."""
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
            env, gpu_var = exec_env(body["head"], body)
            pid = self.spawner.spawn(
                body["argv"],
                body["sandbox"],
                pipes[0][1],
                pipes[1][1],
                env,
                gpu_var,
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
        new = Rank(agent, uid, rank, pid, [pipes[0][0], pipes[1][0]])
        self.running[pid] = new
        for fd, stream in zip(new.pipes, ("stdout", "stderr")):
            self.pipes[fd] = (new, stream)
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

    def read_ready(self, events: dict) -> None:
        """Read the pipes that `events` (the daemon's poll) says are readable."""
        for fd in [fd for fd in self.pipes if fd in events]:
            if fd in self.pipes:
                self.read_pipe(fd)

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

    def ended(self, pid: int, code: int) -> bool:
        """A child exited: if it was a rank, its output is read to the end and its exit is an
        event (True); False for a child that is not a rank."""
        r = self.running.pop(pid, None)
        if r is None:
            return False
        for fd in r.pipes:
            if fd in self.pipes:
                self.read_pipe(fd, final=True)
        self._close_files(r.uid)
        self._event(r.agent, "exit", [r.uid, r.rank, code, r.killed_why])
        return True

    def kill(self, uids: Iterable[str], sig: int) -> None:
        uids = set(uids)
        for r in self.running.values():
            if r.uid in uids:
                processes.signal_group(r.pid, sig)

    def drop(self, agent: bytes) -> None:
        """A partition ended: SIGKILL what of its ranks still runs here."""
        left = [r for r in self.running.values() if r.agent == agent]
        for r in left:
            processes.signal_group(r.pid, signal.SIGKILL)
        if left:
            log.warning(
                "%s: %d process(es) of ended partition %s killed",
                self.name,
                len(left),
                agent.decode(),
            )

    def kill_all(self, why: str | None = None) -> int:
        """SIGKILL every rank (the daemon halts: `why`, each one's error); how many there were."""
        killed = len(self.running)
        for r in list(self.running.values()):
            r.killed_why = why
            processes.signal_group(r.pid, signal.SIGKILL)
        return killed
