"""The pilot job's first process: bring-up, the partition manager, message routing, teardown.

    python -m pilot.partition.bootstrap PILOT_SANDBOX/bootstrap.json

Bring-up (step names appear in the log):
    boot.connect     DEALER to the client's pilot link; ROUTER for agents (127.0.0.1, and the
                     node address for agents on other nodes) and for the `pilot` CLI and
                     attaching clients (the address this node reaches the client from), OS-chosen
                     ports; the control endpoint written to PILOT_SANDBOX/control.json (0600)
    boot.nodes.*     resources with node daemons: one daemon per node, bounded gathers, the
                     channel table (partition/node_set.py); nodes missing -> marked down, or the
                     pilot
                     FAILED (node_failure)
    boot.hello       `hello` to the client: the pilot is ACTIVE
    boot.partitions  the initial partitions are allocated and their agents started
Agents are forked from the agent zygote here, or, on multi-node pilots whose agents need a node
of their own (agent_overhead.nodes), started by the node daemon of that node
(partition/agents/); either way they talk to this process's agent channel.
Routing: unit batches from the client go to their partition's agent as raw frames (buffered while
it is STARTING, handed back when it is gone); agent state batches go to the client unchanged.
An agent that dies (its partition was not stopping): the bootstrap, a child subreaper, kills
the unit processes it left behind (partition/orphans.py), reads its start journal and tells the
client which of its units started (`lost`): those end FAILED, the others are routed again.
A node lost while the pilot runs (its daemon exited or went silent, node.lost in the log): the
node is marked down, the agents holding it are told (`node_lost`: their units there end
FAILED with the reason), and those partitions end FAILED, their queued units handed back to be
routed elsewhere; node_failure=fail ends the whole pilot FAILED instead.
Teardown (on runtime expiry, cancel, client loss, node failure, or a signal), each step bounded:
    down.agents      every live partition is told to stop (running units end CANCELED)
    down.wait        agents say bye or are killed after the deadline
    down.nodes       node daemons halt (bye) or are ended by the launch method
    down.bye         `bye` with the pilot's final state to the client; sockets closed; exit
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import time

import zmq

from pilot import checks, network, processes, resource_config, security
from pilot.descriptions import ComputePartitionDescription
from pilot.partition import control, orphans
from pilot.partition.agents.forked import AgentForker
from pilot.partition.data_port import DataPort
from pilot.partition.manager import AgentExit, AgentProcess, PartitionManager
from pilot.partition.node_set import BringUpError, NodeSet
from pilot.partition.sizing import Pool
from pilot.protocol import HEARTBEAT, ProtocolError, drain, journal_path, msg, pack, unpack
from pilot.states import (
    ACTIVE,
    CANCELED,
    DONE,
    FAILED,
    FINAL,
    PENDING,
    PILOT_MACHINE,
    check_transition,
)

log = logging.getLogger("bootstrap")
TEARDOWN_GRACE = 10.0  # seconds the agents get to stop before they are killed


class Bootstrap:  # the PartitionIO of its partition manager (partition/manager.py)
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.uid = cfg["pilot"]
        self.state = PENDING  # the pilot's state, moved through PILOT_MACHINE: up at hello
        self.sandbox = cfg["sandbox"]
        self.rcfg = resource_config.load(cfg["resource"])
        self.ctx = zmq.Context.instance()
        self.client = self.ctx.socket(zmq.DEALER)
        self.client.setsockopt(zmq.IDENTITY, self.uid.encode())
        self.client.setsockopt(zmq.LINGER, 3000)
        self.client.setsockopt(zmq.SNDHWM, 100_000)
        self.keys = security.load(cfg["curve"])  # every channel is CURVE: pilot/security.py
        self.keys.client(self.client)
        self.client.connect(cfg["client"])
        # the address this node reaches the client from: the client (and a CLI next to it)
        # reaches the control socket there, whichever node of the allocation this runs on
        self.here = network.source_address(cfg["client"])
        self.dropped = 0
        self.bad_messages = checks.BadMessages(log)
        self.agents = self.ctx.socket(zmq.ROUTER)
        self.agents.setsockopt(zmq.LINGER, 0)
        self.agents.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.keys.serve(self.agents)
        port = self.agents.bind_to_random_port("tcp://127.0.0.1")
        self.agent_endpoint = f"tcp://127.0.0.1:{port}"
        self.agent_endpoint_nodes = self.agent_endpoint
        self.nodes_address = None
        if self.rcfg.node_daemons:  # agents on other nodes reach it on the node address
            addr = self.nodes_address = network.listen_address(self.rcfg.address, cfg["client"])
            if addr != "127.0.0.1":
                nport = self.agents.bind_to_random_port(f"tcp://{addr}")
                self.agent_endpoint_nodes = f"tcp://{addr}:{nport}"
        self.control = self.ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.LINGER, 0)
        self.keys.serve(self.control)  # the CLI and attaching clients hold the session's keys
        cport = self.control.bind_to_random_port(f"tcp://{self.here}")
        self.control_endpoint = f"tcp://{self.here}:{cport}"
        self.data = DataPort(self.sandbox)  # files from and to the client
        self.procs: dict[str, AgentProcess] = {}
        self.forker = AgentForker(self.sandbox)
        self.nodeset = (
            NodeSet(
                self.ctx,
                self.rcfg,
                cfg,
                cfg["size"]["nodes"],
                self.sandbox,
                self.keys,
                self.nodes_address,
            )
            if self.rcfg.node_daemons
            else None
        )
        self.network: dict | None = None
        self.make_pool(cfg.get("network"))
        self.out: list = []  # partition state updates waiting to be sent
        self.deadline = time.monotonic() + cfg["runtime"]
        self.last_heard = time.monotonic()
        self.ending: tuple[str, str] | None = None
        self.parent = os.getppid() if cfg.get("watch_parent") else None
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def make_pool(self, network: dict | None) -> None:
        self.pool = Pool.for_pilot(self.cfg["size"], self.rcfg, network)
        for index, node in (network or {}).items():
            if node.get("state") == "down":
                self.pool.mark_down(int(index))
        agent_cfg = {
            "session": self.cfg["session"],
            "pilot": self.uid,
            "endpoint": self.agent_endpoint,
            "pilot_sandbox": self.sandbox,
            "curve": self.cfg.get("curve"),
            "mpi_command": self.rcfg.mpi_command,
            "python_path": self.cfg.get("python_path") or [],  # (function workers')
        }
        self.pm = PartitionManager(self.pool, self, agent_cfg, pilot_uid=self.uid)

    def own_children(self) -> set[int]:
        """The processes this bootstrap started itself (never taken for orphans)."""
        pids = self.forker.pids()
        if self.nodeset is not None:
            pids.update(p.pid for p in self.nodeset.launch.procs.values())
        return pids

    def agent_lost(self, uid: str, why: str) -> None:
        """The agent of `uid` ended without stopping its units: end what it left running,
        and tell the client which of its units had started (its start journal)."""
        killed = orphans.end_orphans(
            {"PILOT_PILOT_ID": self.uid, "PILOT_PARTITION_ID": uid}, self.own_children()
        )
        try:
            with open(journal_path(self.sandbox, uid)) as f:
                started = [line.strip() for line in f if line.strip()]
        except FileNotFoundError:
            started = []
        log.warning(
            "%s: %s; %d unit(s) had started, %d killed", uid, why, len(started), len(killed)
        )
        self.flush()
        self.to_client(
            msg(b"lost", {"part": uid, "started": started, "killed": killed, "reason": why})
        )

    def node_lost(self, index: int, reason: str) -> None:
        self.pool.mark_down(index)
        name = self.pool.nodes[index].name
        orphans.end_orphans(  # units of a daemon that died here (fork/netns launches)
            {"PILOT_PILOT_ID": self.uid, "PILOT_NODE_NAME": name}, self.own_children()
        )
        for part in self.pm.live():
            alloc = part.alloc
            if alloc is None or (index not in alloc.slots and index not in alloc.agent_nodes):
                continue
            if part.uid in self.procs:
                self.send_agent(
                    part.uid, [b"node_lost", pack({"index": index, "name": name, "reason": reason})]
                )
            self.pm.stop(part.uid, FAILED, reason, hand_back=True)
        if self.rcfg.node_failure == "fail":
            self.end(FAILED, reason)

    # -- PartitionIO ----------------------------------------------------------------------------
    def send_agent(self, uid: str, frames: list[bytes]) -> None:
        try:
            self.agents.send_multipart([uid.encode()] + frames)
        except zmq.ZMQError as exc:  # EHOSTUNREACH: the agent is gone
            log.error("%s: cannot reach agent: %s", uid, exc)

    def spawn_agent(self, uid: str, cfg: dict) -> AgentProcess:
        if self.nodeset is not None:  # units go to the daemons of the partition's nodes
            for node in cfg["nodes"]:
                node["endpoint"] = self.nodeset.endpoint_of(node["index"])
            cfg["endpoint"] = self.agent_endpoint_nodes
        path = os.path.join(self.sandbox, f"{uid}.agent.json")
        if self.nodeset is None or cfg.get("agent_host") is None:  # forked by the zygote
            cfg["adopted_by"] = os.getpid()  # its parent, should the zygote die first
        with open(path, "w") as f:
            json.dump(cfg, f)
        log_path = os.path.join(self.sandbox, f"{uid}.agent.log")
        host = cfg.get("agent_host")
        if self.nodeset is not None and host is not None:  # on its own node, by that daemon
            argv = processes.python_m(processes.AGENT, path, python=self.rcfg.python)
            proc = self.nodeset.start_agent(host, uid, argv, log_path)
        else:
            proc = self.forker.spawn(path, log_path)
        self.procs[uid] = proc
        log.info("%s: agent requested", uid)
        return proc

    def emit(self, uid: str, state: str, info: dict) -> None:
        if state in FINAL and self.nodeset is not None:
            part = self.pm.parts.get(uid)
            if part is not None and part.alloc is not None:  # its agent may have died first
                self.nodeset.drop_partition(uid, list(part.alloc.slots))
        info["free"] = self.pool.free  # what no live partition holds, after this change
        self.out.append(("part", uid, state, time.time(), info))

    def to_client(self, frames: list[bytes]) -> None:
        """Send without ever blocking: with no client listening (it died, a new one has not
        attached yet) messages queue up to the high-water mark, then are dropped and counted;
        an attaching client reconciles through `sync`, so nothing is decided on them."""
        try:
            self.client.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1

    def flush(self) -> None:
        if self.out:
            self.to_client([b"state", pack(self.out)])
            self.out = []

    # -- messages -------------------------------------------------------------------------------
    def on_client(self, frames: list[bytes]) -> None:
        self.last_heard = time.monotonic()
        kind = frames[0]
        if kind == b"units" and len(frames) == 3:
            uid = checks.uid("units partition", frames[1].decode())
            if not self.pm.take_buffered_or_bounce(uid, frames[2]):
                self.flush()
                self.to_client(msg(b"back", {"part": uid, "units": unpack(frames[2])}))
        elif kind == b"cmd":
            body = unpack(frames[1])
            if not isinstance(body, dict):
                raise ProtocolError("a command must be a JSON object")
            self.flush()
            self.to_client([b"reply", pack(self.command(body))])
        elif kind == b"put" and len(frames) == 3:  # data staging (partition/data_port.py)
            self.to_client(msg(b"put_ack", self.data.put(self._header(frames[1]), frames[2])))
        elif kind == b"get" and len(frames) == 2:
            reply, chunk = self.data.get(self._header(frames[1]))
            self.to_client([b"got", pack(reply), chunk])
        elif kind != b"hb":
            raise ProtocolError(f"unknown message type {kind!r}")

    @staticmethod
    def _header(frame: bytes) -> dict:
        hdr = unpack(frame)
        if not isinstance(hdr, dict):
            raise ProtocolError("a transfer header must be a JSON object")
        return hdr

    def command(self, body: dict) -> dict:
        """Run one command (from the client or the CLI): partition/control.py."""
        return control.run(self, body)

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
                    "nodes": {
                        str(i): {"name": n["name"], "state": n["state"]}
                        for i, n in (self.network or {}).items()
                    },
                },
            )
        )

    def on_agent(self, frames: list[bytes]) -> None:
        uid, kind = frames[0].decode(), frames[1]
        if kind == b"state":
            self.flush()  # keep partition updates ahead of the unit updates that follow them
            self.to_client([b"state", frames[2]])
        elif kind == b"ready":
            body = unpack(frames[2]) if len(frames) > 2 else {}
            runner = body.get("runner") if isinstance(body, dict) else None
            self.pm.on_ready(uid, checks.text("runner", runner) if runner is not None else None)
        elif kind == b"back":
            self.flush()
            self.to_client([b"back", frames[2]])
        elif kind == b"synced":
            self.flush()
            self.to_client([b"synced", frames[2]])
        elif kind == b"output":
            self.to_client([b"output", frames[2]])
        elif kind == b"bye":
            self.pm.on_bye(uid, unpack(frames[2]))
        else:
            raise ProtocolError(f"unknown message type {kind!r} from {uid}")

    # -- life cycle -----------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        self.end(CANCELED, f"pilot received {signal.Signals(signum).name}")

    def end(self, state: str, reason: str) -> None:
        if self.ending is None:
            check_transition(PILOT_MACHINE, self, state)
            log.info("down.agents: %s (%s)", state, reason)
            self.ending = (state, reason)
            part_state = DONE if state == DONE else CANCELED
            for part in self.pm.live():
                self.pm.stop(part.uid, part_state, reason, hand_back=False)
            self.teardown_deadline = time.monotonic() + TEARDOWN_GRACE

    def check_agents(self) -> None:
        for uid, proc in list(self.procs.items()):
            ended = proc.poll()
            if ended is not None:
                del self.procs[uid]
                self.pm.on_agent_exit(uid, ended)

    def run(self) -> int:
        log.info(
            "boot.connect: client %s, agents %s, control %s; adopts orphans: %s",
            self.cfg["client"],
            self.agent_endpoint,
            self.control_endpoint,
            orphans.become_subreaper(),
        )
        ctl = os.path.join(self.sandbox, "control.json")
        fd = os.open(ctl, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(
                {
                    "pilot": self.uid,
                    "endpoint": self.control_endpoint,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                },
                f,
            )
        if self.nodeset is not None:
            try:
                given = {int(k): v for k, v in (self.cfg.get("network") or {}).items()}
                self.network = self.nodeset.bring_up(given or None)
            except BringUpError as exc:
                check_transition(PILOT_MACHINE, self, FAILED)
                self.ending = (FAILED, f"bring-up failed: {exc}")
                return self.finish()
            self.make_pool(self.network)
            with open(os.path.join(self.sandbox, "network.json"), "w") as f:
                json.dump({str(k): v for k, v in self.network.items()}, f, indent=1)
            with open(os.path.join(self.sandbox, "daemons.json"), "w") as f:
                json.dump(self.nodeset.daemons(), f, indent=1)
        if self.ending is not None:  # ended (a signal) during bring-up: never up
            return self.finish()
        check_transition(PILOT_MACHINE, self, ACTIVE)
        self.hello()
        log.info("boot.hello: sent")
        for p in self.cfg["partitions"]:
            part = self.pm.add(p["uid"], ComputePartitionDescription.from_stored(p["description"]))
            self.pm.start(part)
        log.info("boot.partitions: %d started", len(self.cfg["partitions"]))
        self.pm.warn_idle()
        poller = zmq.Poller()
        for s in (self.client, self.agents, self.control):
            poller.register(s, zmq.POLLIN)
        zygote_fd = self.forker.fd  # (it changes when a zygote that died is replaced)
        poller.register(zygote_fd, zmq.POLLIN)
        if self.nodeset is not None:
            poller.register(self.nodeset.sock, zmq.POLLIN)
        next_hb = time.monotonic()
        timeout = self.cfg["client_timeout"]
        while True:
            events = dict(poller.poll(200))
            for sock, handler in ((self.agents, self.on_agent), (self.client, self.on_client)):
                if sock in events:
                    self._drain(sock, handler)
            if self.control in events:
                self._drain(self.control, self.on_control)
            if zygote_fd is not None and zygote_fd in events:
                self.forker.read()
            if self.forker.fd != zygote_fd:
                if zygote_fd is not None:
                    poller.unregister(zygote_fd)
                zygote_fd = self.forker.fd
                if zygote_fd is not None:
                    poller.register(zygote_fd, zmq.POLLIN)
            if self.nodeset is not None:
                if self.nodeset.sock in events:
                    self.nodeset.on_readable()
                for index, reason in self.nodeset.check():
                    self.node_lost(index, reason)
            self.check_agents()
            self.pm.check_stuck()
            self.data.expire()
            now = time.monotonic()
            if self.ending is None:
                if now >= self.deadline:
                    self.end(DONE, f"pilot runtime of {self.cfg['runtime'] / 60:g} min expired")
                elif now - self.last_heard > timeout:
                    self.end(CANCELED, f"no word from the client for {timeout:g} s")
                elif self.parent is not None and os.getppid() != self.parent:
                    self.end(CANCELED, "the client process is gone")
            if self.ending is not None:
                if not self.pm.live() or now > self.teardown_deadline:
                    return self.finish()
            if now >= next_hb:
                next_hb = now + HEARTBEAT
                self.to_client(msg(b"hb"))
                if self.nodeset is not None:
                    self.nodeset.heartbeat()
            self.flush()

    def _drain(self, sock, handler) -> None:
        for frames in drain(sock, 200):
            try:
                handler(frames)
            except (ProtocolError, KeyError, IndexError, TypeError, ValueError) as exc:
                self.bad_messages.report(f"bad message {frames[:2]!r:.120}: {exc}")

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

    def finish(self) -> int:
        state, reason = self.ending
        log.info("down.wait: %d agent(s) left", len(self.procs))
        for uid, proc in list(self.procs.items()):
            ended = proc.wait(timeout=2.0)  # an agent that said bye exits at once
            if ended is None:
                log.error("%s: agent pid %s still running at teardown; killed", uid, proc.pid)
                proc.kill()
                ended = proc.wait(timeout=5.0)
            self._drain(self.agents, self.on_agent)  # its last words, if any are left
            if ended is None:
                ended = AgentExit(None, "did not end within 5 s of SIGKILL at teardown")
            self.pm.on_agent_exit(uid, ended, grace=0)
        self.forker.close()
        if self.nodeset is not None:
            self.nodeset.halt(reason)
        orphans.reap(self.own_children())
        for part in self.pm.live():
            self.pm.end(part, FAILED, "pilot ended before the partition did")
        self.flush()
        self.to_client(msg(b"bye", {"state": state, "reason": reason}))
        log.info("down.bye: %s (%s)", state, reason)
        try:
            os.unlink(os.path.join(self.sandbox, "control.json"))
        except FileNotFoundError:
            pass
        for s in (self.client, self.agents, self.control):
            s.close()
        self.keys.close()
        self.ctx.term()
        return 0 if state != FAILED else 1


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: python -m {processes.BOOTSTRAP} BOOTSTRAP.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        cfg = json.load(f)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return Bootstrap(cfg).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
