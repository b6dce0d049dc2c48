"""The daemon runner: units of a multi-node partition, run by the node daemons of its nodes.

The agent's scheduler places a unit as before; `DaemonRunner.spawn` sends one `exec` per rank to
the daemon of that rank's node (agent/node_daemon.py has the messages) and returns at once.
Exits and forwarded output come back as `events`; `reap()` yields units whose ranks have all
ended, like the local runner.  A rank that could not start, or whose node was lost
(`node_lost`), ends its unit FAILED with that reason; the unit's other ranks are killed.
A function unit (one rank) runs as a process of its own on its node (agent/function_once.py),
in the partition's functions directory (as its workers would: pilot/sandbox.py), its call
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

from pilot import processes, security, wire
from pilot.agent import unit_command
from pilot.agent.function_worker import PATH_VAR
from pilot.agent.rank_env import prof_command, rp_pilot_vars
from pilot.agent.runners.base import QuietStager, Run, RunnerBase
from pilot.agent.spawn import grant_ids, rank_env
from pilot.protocol import ProtocolError, drain, pack, unpack
from pilot.sandbox import functions_dir, output_names, sandbox_of

CALL, REPLY = ".call", ".reply"  # a function unit's call and reply (agent/function_once.py)


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
    runs_functions = True  # (one process per call: agent/function_once.py)

    @classmethod
    def for_partition(cls, cfg: dict, ctx, journal: int):
        """The runner and its stager for an agent config (its daemons journal their starts)."""
        return cls(cfg, ctx), NoStager(cfg["pilot_sandbox"])

    def __init__(self, cfg: dict, ctx: zmq.Context) -> None:
        self.uid = cfg["uid"]
        self.rp_env = rp_pilot_vars(cfg)  # RADICAL-Pilot's names, as units see them
        self.prof = prof_command(cfg["pilot_sandbox"])  # (RP 1.x tasks' RP_PROF)
        self.has_gpus = any(n["gpus"] for n in cfg["nodes"])
        self.mpi_command = cfg.get("mpi_command")
        self.python = sys.executable  # function units' (the agent's: the pilot's python)
        self.functions = functions_dir(cfg["pilot_sandbox"], cfg["uid"])
        self.function_path = os.pathsep.join(cfg.get("python_path") or ())
        self.socks: dict[int, zmq.Socket] = {}  # node index -> DEALER to its daemon
        keys = security.load(cfg.get("curve"))
        for node in cfg["nodes"]:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.IDENTITY, self.uid.encode())
            sock.setsockopt(zmq.LINGER, 1000)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            if keys is not None:
                keys.client(sock)
            sock.connect(node["endpoint"])
            self.socks[node["index"]] = sock
        self.running: dict[tuple[str, int], Run] = {}  # (unit uid, rank) -> its Run
        self.done: list[tuple[Run, int | None]] = []
        self.output: list[list] = []  # [uid, node, rank, stream, text] for the client
        self.lost: dict[int, str] = {}

    sigchld = False  # (its units are the daemons' children)

    def describe(self) -> str:
        return f"units started by the node daemons of {len(self.socks)} nodes"

    def summary(self) -> str:
        return "units started by the node daemons"

    def watch(self, poller) -> None:
        for sock in self.socks.values():
            poller.register(sock, zmq.POLLIN)

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
        for rank, (node, grant) in placed:
            ids = grant_ids(node.cap, grant)
            own, var = rank_env(
                unit, sandbox, node.name, ids, rank, ranks, self.has_gpus, self.prof
            )
            # the daemon's own environment has no partition; the unit's own names win
            env = {**self.rp_env, "PILOT_PARTITION_ID": self.uid, **own}
            if unit.get("function") and self.function_path:
                env[PATH_VAR] = self.function_path
            body = {
                "uid": unit["uid"],
                "rank": rank,
                "argv": argv,
                "env": env,
                "gpu_var": var,
                "sandbox": sandbox,
                "files": files,
                "cpus": [c for c, _ in grant.get("cpus", ())],
            }
            try:
                self.socks[node.index].send_multipart([b"exec", pack(body)], zmq.NOBLOCK)
            except zmq.Again:
                self.kill(run, signal.SIGKILL)  # ranks already sent, if any
                for k in run.pids:
                    self.running.pop((unit["uid"], k[1]), None)
                raise OSError(f"the node daemon of {node.name} takes no more work") from None
            run.pids.append((node.index, rank))
            self.running[(unit["uid"], rank)] = run
        return run

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
        extra = {k: str(reply[k]) for k in ("stdout", "stderr") if reply.get(k)}
        if reply.get("ok"):
            extra["value"] = reply.get("value")
        else:
            extra["exception"] = str(reply.get("exception"))
            if run.cancel_reason is None and run.fail_reason is None:
                run.fail_reason = f"exception: {reply.get('exception')}"
        run.extra = extra

    def on_readable(self, sock: zmq.Socket) -> None:
        for frames in drain(sock, 200):
            handler, _ = FROM_DAEMONS.route(frames[0])  # (pilot/wire.py: the ranks channel)
            handler(self, frames)

    def daemon_events(self, frames: list[bytes]) -> None:
        """Ranks' output and exits from a node daemon (agent/node_ranks.py sends them)."""
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
        """Ranks on node `index` ended without an exit code: their units FAILED with reason."""
        self.lost[index] = reason
        for (uid, rank), run in list(self.running.items()):
            if any(k == (index, rank) for k in run.pids):
                if run.fail_reason is None:
                    run.fail_reason = reason
                    run.node_lost = True
                    self.kill(run, signal.SIGKILL)
                self._ended(run, uid, rank, None)

    def reap(self):
        done, self.done = self.done, []
        yield from done

    def kill(self, run: Run, sig: int) -> None:
        for index in {k[0] for k in run.pids if k not in run.codes}:
            if index not in self.lost:
                try:
                    self.socks[index].send_multipart(
                        [b"kill", pack({"uids": [run.unit["uid"]], "sig": int(sig)})],
                        zmq.NOBLOCK,
                    )
                except zmq.Again:
                    pass  # that daemon is not reading: node loss will end these ranks

    def runs(self) -> list[Run]:
        return list({id(r): r for r in self.running.values()}.values())

    def which(self, executable: str, search: str | None = None) -> str:
        return executable  # looked up by the daemon that starts it; failures come back

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()


# what an agent's runner receives from node daemons (pilot/wire.py): handler(runner, frames)
FROM_DAEMONS = wire.Dispatch("ranks", "agent", {b"events": DaemonRunner.daemon_events})
