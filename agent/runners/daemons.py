"""The daemon runner: units of a multi-node partition, run by the node daemons of its nodes.

The agent's scheduler places a unit as before; `DaemonRunner.spawn` makes one rank body per rank
and returns at once; `flush`, at the end of the agent's turn of starts, sends each node's bodies
as one `exec` (agent/node/daemon.py has the messages), with what every rank of the partition
has alike in its environment (RP's pilot names, the partition's id) once, beside them.  A rank's
body says what its environment is made of (its unit's own `environment`, name and ids, its
rank), not the environment itself: the daemon makes that with the same `rank_env` the local
runner uses (agent/node/ranks.py), so the dozen variables that repeat the unit's uid and
sandbox do not cross the network for every rank.  A kill
sends what waits first, so that it follows the exec it is for.  A node whose daemon takes no
more (its queue at the high-water mark) fails the units of the ranks it did not take, and kills
their ranks elsewhere.
Exits and forwarded output come back as `events`; `reap()` yields units whose ranks have all
ended, like the local runner.  A rank that could not start, or whose node was lost
(`node_lost`), ends its unit FAILED with that reason; the unit's other ranks are killed.
A function unit (one rank) runs as a process of its own on its node
(agent/workers/function_once.py), in the partition's functions directory (as its workers
would: pilot/sandbox.py), its call
written there to <uid>.call and its reply read from <uid>.call.reply when it ends (the value,
or the exception: the unit FAILED with it, as from a function worker); what the process writes
outside the call goes to <uid>.out and <uid>.err there.

Interfaces: UnitRunner and Stager (agent/runners/base.py); NoStager is this runner's stager.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys

import zmq

from pilot import processes
from pilot.agent import unit_command
from pilot.agent.rank_env import (
    exec_unit,
    grant_ids,
    prof_command,
    rp_pilot_vars,
    with_nodes,
)
from pilot.agent.runners.base import QuietStager, Run, RunnerBase
from pilot.agent.workers.function_worker import PATH_VAR
from pilot.sandbox import functions_dir, output_names, sandbox_of
from pilot.wire import links, security
from pilot.wire.protocol import ProtocolError, drain, pack, send_frames, unpack

CALL, REPLY = ".call", ".reply"  # a function unit's call and reply (agent/workers/function_once.py)
EXEC_BATCH = 1024  # ranks in one `exec` at most (pilot/wire/messages.py: EXEC_MAX)


class NoStager(QuietStager):
    """Daemons make unit sandboxes on their node; the agent stages nothing ahead."""

    def take(self, unit: dict) -> str:
        sandbox = sandbox_of(self.root, unit)
        if unit.get("stage_in"):  # pilot-side input steps, on the shared file system
            os.makedirs(sandbox, exist_ok=True)
            unit_command.stage_in(self.root, sandbox, unit)
        return sandbox

    def summary(self) -> str:
        return "made by the node daemons"


class DaemonRunner(RunnerBase):
    runs_functions = True  # (one process per call: agent/workers/function_once.py)

    @classmethod
    def for_partition(cls, cfg: dict, ctx, journal: int):
        """The runner and its stager for an agent config (its daemons journal their starts)."""
        return cls(cfg, ctx), NoStager(cfg["pilot_sandbox"])

    def __init__(self, cfg: dict, ctx: zmq.Context) -> None:
        self.uid = cfg["uid"]
        # every rank's, under its own (RADICAL-Pilot's names; the daemon's environment has
        # no partition): sent once per `exec`, with what rank_env needs besides
        self.base_env = {**rp_pilot_vars(cfg), "PILOT_PARTITION_ID": self.uid}
        self.prof = prof_command(cfg["pilot_sandbox"])  # (RP 1.x tasks' RP_PROF)
        self.has_gpus = any(n["gpus"] for n in cfg["nodes"])
        self.mpi_command = cfg.get("mpi_command")
        self.python = sys.executable  # function units' (the agent's: the pilot's python)
        self.functions = functions_dir(cfg["pilot_sandbox"], cfg["uid"])
        self.function_path = os.pathsep.join(cfg.get("python_path") or ())
        self.names = {node["index"]: node["name"] for node in cfg["nodes"]}
        # what every `exec` carries once (agent/node/ranks.py `exec_env`), encoded once, here:
        # the JSON object's opening members, to which `flush` adds the node and its ranks
        # (encoding the environment again for every message was ~13 % of an agent at 1,024
        # nodes); what is changed of base_env, prof or has_gpus later reaches no `exec`
        head = {"env": self.base_env, "prof": self.prof, "gpus": self.has_gpus}
        self.head_json = pack(head)[:-1] + b',"node":'
        # one ROUTER connected to every daemon, each connection named by its node's index
        # (ZMQ_CONNECT_ROUTING_ID): a poll costs the same at 8 nodes as at 512 (a DEALER a
        # node cost a poll ~0.45 us a node: a fifth of an agent's CPU at 128 nodes)
        self.sock = sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.IDENTITY, self.uid.encode())  # (the daemons' name for this agent)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.SNDHWM, 100_000)  # (a node's queue: each connection's own)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # (a full queue raises, as a DEALER's did)
        keys = security.load(cfg.get("curve"))
        if keys is not None:
            keys.client(sock)
        self.rids: dict[int, bytes] = {}  # node index -> its connection's routing id
        self.drain_most = 200 * max(1, len(cfg["nodes"]))  # messages read a turn, at most
        for node in cfg["nodes"]:
            rid = self.rids[node["index"]] = b"%d" % node["index"]
            sock.setsockopt(zmq.CONNECT_ROUTING_ID, rid)
            sock.connect(node["endpoint"])
        self.running: dict[tuple[str, int], Run] = {}  # (unit uid, rank) -> its Run
        self.pending: dict[int, list] = {}  # node index -> [(rank body, Run)] to send (flush)
        self.done: list[tuple[Run, int | None]] = []
        self.output: list[list] = []  # [uid, node, rank, stream, text] for the client
        self.lost: dict[int, str] = {}

    sigchld = False  # (its units are the daemons' children)

    def describe(self) -> str:
        return f"units started by the node daemons of {len(self.rids)} nodes"

    def summary(self) -> str:
        return "units started by the node daemons"

    def watch(self, poller) -> None:
        poller.register(self.sock, zmq.POLLIN)

    def send(self, index: int, frames: list[bytes]) -> None:
        """`frames` to node `index`'s daemon, without waiting: zmq.Again when its queue is
        full, or when its connection ended for good (a handshake or protocol error: libzmq
        drops the routing id; EHOSTUNREACH, said as Again, as the DEALER's full queue was)."""
        try:
            send_frames(self.sock, [self.rids[index], *frames], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                raise zmq.Again(zmq.EAGAIN) from exc
            raise

    def spawn(self, unit: dict, sandbox: str, alloc) -> Run:
        run = Run(unit, alloc)
        files = output_names(unit)
        if unit.get("function"):
            argv = self._call_argv(unit)
            sandbox = run.sandbox = self.functions
            files = (f"{unit['uid']}.out", f"{unit['uid']}.err")
        else:
            argv = unit_command.argv(unit)  # directly, or through /bin/sh (unit_command.py)
        ranks = len(alloc.ranks)
        lost = [self.lost[n.index] for n, _ in alloc.ranks if n.index in self.lost]
        if lost:
            raise OSError(lost[0])
        placed = list(enumerate(alloc.ranks))
        if unit.get("mpi"):  # one launcher process, on its first rank's node, over all ranks
            if not self.mpi_command:
                raise OSError("an rp.MPI unit, but the resource config sets no mpi_command")
            per_node: dict = {}
            for node, _ in alloc.ranks:
                per_node[node.name] = per_node.get(node.name, 0) + 1
            argv = unit_command.mpi_argv(unit, self.mpi_command, list(per_node.items()))
            placed = placed[:1]
        bits = exec_unit(with_nodes(unit, alloc.ranks))
        extra = None  # (a function unit's path: its rank's own env)
        if unit.get("function") and self.function_path:
            extra = {PATH_VAR: self.function_path}
        for rank, (node, grant) in placed:
            body = {
                "uid": unit["uid"],
                "rank": rank,
                "ranks": ranks,
                "argv": argv,
                "sandbox": sandbox,
                "files": files,
                "cpus": [c for c, _ in grant.get("cpus", ())],
                "ids": grant_ids(node.cap, grant),
            }
            if bits:
                body["unit"] = bits
            if extra:
                body["env"] = extra
            waiting = self.pending.get(node.index)
            if waiting is None:
                waiting = self.pending[node.index] = []
            waiting.append((body, run))
            run.pids.append((node.index, rank))
            self.running[(unit["uid"], rank)] = run
        return run

    def flush(self) -> None:
        """Send each node the ranks placed on it since (one `exec`, or one per EXEC_BATCH); a
        node whose daemon takes no more fails the units of the ranks it did not take."""
        pending, self.pending = self.pending, {}
        unsent: list = []
        for index, waiting in pending.items():
            if index in self.lost:
                continue  # (node_lost ended their units)
            node = pack(self.names[index])
            for i in range(0, len(waiting), EXEC_BATCH):
                ranks = pack([body for body, _ in waiting[i : i + EXEC_BATCH]])
                message = b"".join((self.head_json, node, b',"ranks":', ranks, b"}"))
                try:
                    self.send(index, [b"exec", message])
                except zmq.Again:
                    unsent.extend((index, body, run) for body, run in waiting[i:])
                    break
        if unsent:
            self._not_taken(unsent)

    def _not_taken(self, unsent: list) -> None:
        """Ranks a daemon did not take: their units FAILED, never having run (their ranks on
        other nodes, if sent, killed)."""
        failed = {}
        for index, body, run in unsent:
            if run.fail_reason is None:
                name = self.names[index]
                run.fail_reason = f"cannot start: the node daemon of {name} takes no more work"
                run.not_started = True
            failed[id(run)] = run
            if (body["uid"], body["rank"]) in self.running:
                self._ended(run, body["uid"], body["rank"], None)
        for run in failed.values():
            self.kill(run, signal.SIGKILL)  # (its ranks that were sent)

    def due(self) -> float | None:
        return 0.0 if self.done else None  # (units failed by a flush: reaped at once)

    def _call_argv(self, unit: dict) -> list[str]:
        """A function unit's command: its call written to FUNCTIONS/<uid>.call first."""
        os.makedirs(self.functions, exist_ok=True)
        path = os.path.join(self.functions, unit["uid"] + CALL)
        with open(path, "wb") as f:
            pickle.dump({"uid": unit["uid"], "call": unit["function"]}, f, pickle.HIGHEST_PROTOCOL)
        return processes.python_m(processes.FUNCTION_ONCE, path, python=self.python)

    def _call_reply(self, run: Run) -> None:
        """A function unit ended: its value, or its exception, from its reply (read, then its
        call and reply files go)."""
        path = os.path.join(self.functions, run.unit["uid"] + CALL)
        try:
            with open(path + REPLY, "rb") as f:
                reply = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            reply = None  # (killed, or its node lost: the exit says how)
        for name in (path, path + REPLY):
            try:
                os.unlink(name)
            except OSError:
                pass
        if not isinstance(reply, dict):
            return
        extra: dict = {k: str(reply[k]) for k in ("stdout", "stderr") if reply.get(k)}
        if reply.get("ok"):
            extra["value"] = reply.get("value")
        else:
            extra["exception"] = str(reply.get("exception"))
            if run.cancel_reason is None and run.fail_reason is None:
                run.fail_reason = f"exception: {reply.get('exception')}"
        run.extra = extra

    def on_readable(self, sock: zmq.Socket) -> None:
        # [the node's routing id, kind, body]; as many a turn as a DEALER a node allowed
        for frames in drain(sock, self.drain_most):
            if len(frames) < 2:
                raise ProtocolError(f"a message of {len(frames)} frame(s) from a node daemon")
            handler, _ = FROM_DAEMONS.route(frames[1])  # (pilot/wire/links.py: the ranks channel)
            handler(self, frames[1:])

    def daemon_events(self, frames: list[bytes]) -> None:
        """Ranks' output and exits from a node daemon (agent/node/ranks.py sends them)."""
        if len(frames) != 2:
            raise ProtocolError(f"events of {len(frames) - 1} frames (body)")
        ev = unpack(frames[1])
        self.output.extend(ev.get("out", ()))
        for uid, rank, code, error in ev.get("exit", ()):
            run = self.running.get((uid, rank))
            if run is None:
                continue
            if error is not None and run.fail_reason is None:
                run.fail_reason = error
                self.kill(run, signal.SIGKILL)
            self._ended(run, uid, rank, code)

    def _ended(self, run: Run, uid: str, rank: int, code: int | None) -> None:
        self.running.pop((uid, rank), None)
        key = next(k for k in run.pids if k[1] == rank)
        run.codes[key] = code
        if len(run.codes) == len(run.pids):
            codes = [run.codes[k] for k in run.pids]
            code = next((c for c in codes if c), 0)
            if run.unit.get("function"):
                self._call_reply(run)
                code = 1 if code == 0 and run.fail_reason else code
            self.done.append((run, code))

    def node_lost(self, index: int, reason: str) -> None:
        """Ranks on node `index` ended without an exit code: their units FAILED with reason,
        their outcome unknown (a rank may have run to its end just before its daemon died,
        with nobody left to say so: docs/guarantees.md)."""
        self.lost[index] = reason
        for (uid, rank), run in list(self.running.items()):
            if any(k == (index, rank) for k in run.pids):
                if run.fail_reason is None:
                    run.fail_reason = f"{reason}; its outcome is unknown"
                    run.node_lost = True
                    self.kill(run, signal.SIGKILL)
                self._ended(run, uid, rank, None)

    def reap(self):
        done, self.done = self.done, []
        yield from done

    def kill(self, run: Run, sig: int) -> None:
        if self.pending:
            self.flush()  # (its exec before the kill)
        for index in {k[0] for k in run.pids if k not in run.codes}:
            if index not in self.lost:
                try:
                    self.send(index, [b"kill", pack({"uids": [run.unit["uid"]], "sig": int(sig)})])
                except zmq.Again:
                    pass  # that daemon is not reading: node loss will end these ranks

    def runs(self) -> list[Run]:
        return list({id(r): r for r in self.running.values()}.values())

    def which(self, executable: str, search: str | None = None) -> str:
        return executable  # looked up by the daemon that starts it; failures come back

    def close(self) -> None:
        self.sock.close()


# what an agent's runner receives from node daemons (pilot/wire/links.py): handler(runner, frames)
FROM_DAEMONS = links.Dispatch("ranks", "agent", {b"events": DaemonRunner.daemon_events})
