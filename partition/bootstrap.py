"""The pilot job's first process: bring-up, the partition manager, message routing, teardown.

    python -m pilot.partition.bootstrap PILOT_SANDBOX/bootstrap.json

Bring-up (step names appear in the log):
    boot.connect     DEALER to the client's pilot link; ROUTER for agents (127.0.0.1, and the
                     node address for agents on other nodes) and for the `pilot` CLI and
                     attaching clients (the address this node reaches the client from), OS-chosen
                     ports; the control endpoint written to PILOT_SANDBOX/control.json (0600);
                     RP's trace commands copied to PILOT_SANDBOX/prof and gtod
    boot.nodes.*     resources with node daemons: one daemon per node, bounded gathers, the
                     channel table (partition/nodes/node_set.py); nodes missing -> marked down, or
                     the pilot FAILED (node_failure)
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
FAILED with the reason, nothing more is placed there) and their partitions go on with their
other nodes (node.shrunk in the log); a partition whose agent's node it was, or that has no
node left, or whose agent is not up yet, ends FAILED, its queued units handed back to be routed
elsewhere; node_failure=fail ends the whole pilot FAILED instead, and so does the loss of the
last node up ("every node of the pilot is lost: ...").
Teardown (on runtime expiry, cancel, client loss, node failure, or a signal), each step bounded:
    down.agents      every live partition is told to stop (running units end CANCELED)
    down.wait        agents say bye or are killed after the deadline
    down.nodes       node daemons halt (bye) or are ended by the launch method
    (children)       whatever is still the bootstrap's child is ended (SIGTERM, SIGKILL):
                     nothing the job started outlives it (partition/orphans.py)
    down.bye         `bye` with the pilot's final state to the client; sockets closed; exit
Where it lives: the Bootstrap holds its parts, each given what it uses: the pilot link and the
control endpoint (`link`: partition/client/link.py), the agents' channel, their processes and an
agent's death (`agents`: partition/agents/channel.py), the node daemons (`nodeset`:
partition/nodes/node_set.py), growth (partition/growth.py), the partition manager
(partition/manager.py); here the bring-up and teardown steps, the loop and a node's loss.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time

import zmq

from pilot import processes, validate
from pilot.agent.rank_env import install_rp_tools
from pilot.config import resource_config
from pilot.descriptions import ComputePartitionDescription
from pilot.partition import control, orphans
from pilot.partition.agents.channel import AgentChannel
from pilot.partition.agents.forked import AgentForker
from pilot.partition.client.data_port import DataPort
from pilot.partition.client.link import ClientLink
from pilot.partition.client.outbox import Outbox
from pilot.partition.growth import Growth
from pilot.partition.manager import AgentExit, PartitionManager
from pilot.partition.nodes.node_set import BringUpError, NodeSet
from pilot.partition.off_loop import LogWriter, OffLoop
from pilot.partition.resources import PilotResources
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
from pilot.wire import checks, liveness, security
from pilot.wire.protocol import HEARTBEAT, drain, msg, pack

log = logging.getLogger("bootstrap")
TEARDOWN_GRACE = 10.0  # seconds the agents get to stop before they are killed
BOOT_FILES_WAIT = 5.0  # seconds bring-up gives control.json, network.json (partition/off_loop.py)


class Bootstrap:
    """The pilot job's first process.  It holds its parts, each given what it uses: the client
    link (`link`, partition/client/link.py), the agents' channel (`agents`,
    partition/agents/channel.py), the node set (`nodeset`), growth (`growth`), the partition
    manager (`pm`: it acts through the channel's send_agent, spawn_agent and agent_lost and
    this class's emit)."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.uid = cfg["pilot"]
        self.state = PENDING  # the pilot's state, moved through PILOT_MACHINE: up at hello
        self.sandbox = cfg["sandbox"]
        if cfg.get("resource_config"):  # the config as the client read it (an RP one too)
            self.rcfg = resource_config.parse(cfg["resource"], cfg["resource_config"])
        else:
            self.rcfg = resource_config.load(cfg["resource"])
        if processes.names_vars(self.rcfg.python):  # the job's shell expanded them and ran
            # this interpreter (pmgr/batch/job_script.py): agents and daemons run on it too
            self.rcfg = dataclasses.replace(self.rcfg, python=sys.executable)
        self.ctx: zmq.Context = zmq.Context.instance()
        keys = security.load(cfg["curve"])  # every channel is CURVE: pilot/wire/security.py
        assert keys is not None  # (the client always gives the session's keys)
        self.keys = keys
        self.bad_messages = checks.BadMessages(log)
        self.internal = checks.InternalErrors(log)
        self.link = ClientLink(cfg, self.uid, self.ctx, self.keys, self.internal)
        self.outbox = Outbox()  # outcomes kept until the client has them
        self.forker = AgentForker(self.sandbox)
        self.agents = AgentChannel(
            cfg,
            self.uid,
            self.sandbox,
            self.rcfg,
            self.ctx,
            self.keys,
            forker=self.forker,
            outbox=self.outbox,
            to_client=self.link.to_client,
            flush=self.link.flush,
        )
        self.data = DataPort(self.sandbox)  # files from and to the client (on self.files)
        self.files = OffLoop()  # file-system work off the loop (partition/off_loop.py)
        self.nodeset: NodeSet | None = None
        if self.rcfg.node_daemons:
            # (AgentChannel listens on the node address for node daemons' agents)
            assert self.agents.nodes_address is not None
            self.nodeset = NodeSet(
                self.ctx,
                self.rcfg,
                cfg,
                cfg["size"]["nodes"],
                self.sandbox,
                self.keys,
                self.agents.nodes_address,
            )
        self.network: dict | None = None
        self.deadline = time.monotonic() + cfg["runtime"]
        # jobs beyond the first: the pilot grows to max_nodes (partition/growth.py)
        self.growth = Growth(
            self.uid,
            self.rcfg,
            self.nodeset,
            to_client=self.link.to_client,
            network_changed=self.network_changed,
            nodes_up=self.nodes_up,
            ending=self.is_ending,
            deadline=self.deadline,
            max_nodes=cfg.get("max_nodes"),
            idle_after=float(cfg.get("idle_after") or 0.0),
        )
        self.make_resources(cfg.get("network"))
        self.looked = time.monotonic()  # (_check_clocks: the time this process was away)
        self.ending: tuple[str, str] | None = None
        self.parent = os.getppid() if cfg.get("watch_parent") else None
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def make_resources(self, network: dict | None) -> None:
        self.resources = PilotResources.for_pilot(self.cfg["size"], self.rcfg, network)
        for index, node in (network or {}).items():
            if node.get("state") == "down":
                self.resources.mark_down(int(index))
        agent_cfg = {
            "session": self.cfg["session"],
            "pilot": self.uid,
            "endpoint": self.agents.endpoint,
            "pilot_sandbox": self.sandbox,
            "resource": self.cfg["resource"],
            "curve": self.cfg.get("curve"),
            "mpi_command": self.rcfg.mpi_command,
            "unit_launch": self.rcfg.unit_launch,
            "journal_sync": self.rcfg.journal_sync,
            "python_path": self.cfg.get("python_path") or [],  # (function workers')
            "data": self.cfg.get("data"),  # the client's data directory (pilot/functions.py)
        }
        self.pm = PartitionManager(
            self.resources,
            agent_cfg,
            pilot_uid=self.uid,
            send_agent=self.agents.send_agent,
            spawn_agent=self.agents.spawn_agent,
            emit=self.emit,
            agent_lost=self.agents.agent_lost,
        )
        self.growth.bind(self.resources, self.pm)
        self.pm.growth = self.growth if self.growth.enabled else None
        self.agents.bind(self.pm, self.nodeset)
        self.link.serve(
            pm=self.pm,
            growth=self.growth,
            data=self.data,
            files=self.files,
            outbox=self.outbox,
            command=self.command,
            nodes_up=self.nodes_up,
        )

    def command(self, body: dict) -> dict:
        """Run one command (from the client or the CLI): partition/control.py."""
        return control.run(self, body)

    def nodes_up(self) -> dict:
        """{index: {name, state}} of the pilot's nodes (hello, jobs)."""
        return {
            str(i): {"name": n["name"], "state": n["state"]}
            for i, n in (self.network or {}).items()
        }

    def is_ending(self) -> bool:
        """Whether the pilot is ending (`end` was called: a signal, its runtime, a cancel)."""
        return self.ending is not None

    def network_changed(self) -> None:
        """Nodes joined or were given back (partition/growth.py): network.json and
        daemons.json say so, and so does the pilot's `nodes` (hello)."""
        nodeset = self.nodeset
        assert nodeset is not None  # (growth's: enabled only with a node set)
        self.network = nodeset.network_config()
        for index, node in self.network.items():
            if self.resources.nodes[index].released:
                node["state"] = "released"
        network = {str(k): v for k, v in self.network.items()}
        daemons = nodeset.daemons()
        self.files.run(lambda: _write_json(self.sandbox, "network.json", network))
        self.files.run(lambda: _write_json(self.sandbox, "daemons.json", daemons))

    def node_lost(self, index: int, reason: str) -> None:
        assert self.nodeset is not None  # (_watch_nodes': with a node set only)
        self.resources.mark_down(index)
        self.agents.node_load.pop(index, None)  # (nothing is busy there any more)
        name = self.resources.nodes[index].name
        orphans.end_orphans(  # units of a daemon that died here (fork/exec/netns)
            {"PILOT_PILOT_ID": self.uid, "PILOT_NODE_NAME": name}, self.agents.own_children()
        )
        for part in self.pm.live():
            alloc = part.alloc
            if alloc is None or (index not in alloc.slots and index not in alloc.agent_nodes):
                continue
            if part.uid in self.agents.procs:
                self.agents.send_agent(
                    part.uid, [b"node_lost", pack({"index": index, "name": name, "reason": reason})]
                )
            left = [i for i in alloc.slots if not self.resources.nodes[i].down]
            if index in alloc.agent_nodes or not left or part.uid not in self.agents.procs:
                self.pm.stop(part.uid, FAILED, reason, hand_back=True)
            else:  # the partition goes on with its other nodes (its agent ends the lost one's)
                log.info("node.shrunk: %s goes on with %d node(s) without %s", part.uid,
                         len(left), name)  # fmt: skip
        if self.rcfg.node_failure == "fail" and index < self.nodeset.n:  # (not a later job's)
            self.end(FAILED, reason)

    # -- the partition manager's emit (its send_agent, spawn_agent, agent_lost: self.agents) --
    def emit(self, uid: str, state: str, info: dict) -> None:
        if state in FINAL:
            self.growth.next_look = 0.0  # (a job's nodes may be of no more use: look at once)
        load = self.agents.node_load
        if state in FINAL and load:  # (its nodes' load, as its agent said it, goes)
            self.agents.node_load = {i: v for i, v in load.items() if v[3] != uid}
        if state in FINAL:
            self.agents.load_of.pop(uid, None)
        if state in FINAL and self.nodeset is not None:
            part = self.pm.parts.get(uid)
            if part is not None and part.alloc is not None:  # its agent may have died first
                self.nodeset.drop_partition(uid, list(part.alloc.slots))
        info["free"] = self.resources.free  # what no live partition holds, after this change
        self.link.out.append(("part", uid, state, time.time(), info))

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

    def run(self) -> int:
        """Bring the pilot up, serve it until it ends, tear it down; returns the exit code."""
        self._boot_connect()
        if self.nodeset is not None and not self._boot_nodes(self.nodeset):
            return self.finish()
        if self.ending is not None:  # ended (a signal) during bring-up: never up
            return self.finish()
        check_transition(PILOT_MACHINE, self, ACTIVE)
        if not self.files.wait(BOOT_FILES_WAIT):  # (bring-up: the loop never waits on them)
            log.warning("boot.hello: the boot files are not written after %g s", BOOT_FILES_WAIT)
        self.link.hello()
        log.info("boot.hello: sent")
        self._boot_partitions()
        return self._serve()

    def _boot_connect(self) -> None:
        """boot.connect: the channels (bound in __init__) logged, this process the orphans'
        subreaper, the control endpoint written to PILOT_SANDBOX/control.json (0600)."""
        log.info(
            "boot.connect: client %s, agents %s, control %s; adopts orphans: %s",
            self.cfg["client"],
            self.agents.endpoint,
            self.link.control_endpoint,
            orphans.become_subreaper(),
        )
        control = {
            "pilot": self.uid,
            "endpoint": self.link.control_endpoint,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        self.files.run(lambda: _write_json(self.sandbox, "control.json", control, 0o600))
        # RP's trace commands ($RP_PROF, $RP_GTOD) in the sandbox: units name these, never
        # the package's own files (agent/rank_env.py)
        self.files.run(lambda: install_rp_tools(self.sandbox), _tools_failed)

    def _boot_nodes(self, nodeset: NodeSet) -> bool:
        """boot.nodes.*: the node daemons up (partition/nodes/node_set.py), the pilot's resources
        made again over the nodes found, network.json and daemons.json written; False when bring-up
        failed (the pilot is FAILED then)."""
        try:
            given = {int(k): v for k, v in (self.cfg.get("network") or {}).items()}
            self.network = nodeset.bring_up(given or None)
        except BringUpError as exc:
            check_transition(PILOT_MACHINE, self, FAILED)
            self.ending = (FAILED, f"bring-up failed: {exc}")
            return False
        self.make_resources(self.network)
        network = {str(k): v for k, v in self.network.items()}
        daemons = nodeset.daemons()
        self.files.run(lambda: _write_json(self.sandbox, "network.json", network))
        self.files.run(lambda: _write_json(self.sandbox, "daemons.json", daemons))
        return True

    def _boot_partitions(self) -> None:
        """boot.partitions: the initial partitions allocated and their agents started."""
        for p in self.cfg["partitions"]:
            part = self.pm.add(p["uid"], ComputePartitionDescription.from_stored(p["description"]))
            self.pm.start(part)
        log.info("boot.partitions: %d started", len(self.cfg["partitions"]))
        self.pm.warn_idle()

    def _serve(self) -> int:
        """The loop, until teardown is over: route what arrives, watch the agents, the nodes
        and the clocks, send heartbeats; returns the exit code (`finish`)."""
        poller = zmq.Poller()
        link, agents = self.link, self.agents
        for s in (link.client, agents.sock, link.control):
            poller.register(s, zmq.POLLIN)
        poller.register(self.files.fd, zmq.POLLIN)
        next_expire = time.monotonic() + 5.0
        zygote_fd = self.forker.fd  # (it changes when a zygote that died is replaced)
        poller.register(zygote_fd, zmq.POLLIN)
        launch_fd = None  # the node zygote's reports (launch method fork)
        if self.nodeset is not None:
            for sock in self.nodeset.sockets():
                poller.register(sock, zmq.POLLIN)
            launch_fd = _repoll(poller, None, self.nodeset.launch_fd())
        next_hb = time.monotonic()
        while True:
            events = dict(poller.poll(200))
            for sock, handler in ((agents.sock, agents.on_agent), (link.client, link.on_client)):
                if sock in events:
                    self._drain(sock, handler)
            if link.control in events:
                self._drain(link.control, link.on_control)
            if self.files.fd in events:
                self.files.finish()
            zygote_fd = self._watch_zygote(poller, zygote_fd, events)
            if self.nodeset is not None:
                self._watch_nodes(events)  # (reads the launch's fd: check() asks exited())
                launch_fd = _repoll(poller, launch_fd, self.nodeset.launch_fd())
            agents.check_agents()
            self.pm.check_stuck()
            now = time.monotonic()
            if now >= next_expire:  # (the port's state is the file thread's)
                next_expire = now + 5.0
                self.files.run(self.data.expire)
            if self.ending is None:
                self._check_clocks(now)
            if self.ending is not None:
                if not self.pm.live() or now > self.teardown_deadline:
                    return self.finish()
            if now >= next_hb:
                next_hb = now + HEARTBEAT
                link.to_client(msg(b"hb"))
            link.flush()

    def _watch_nodes(self, events: dict) -> None:
        """Read the node daemons, beat their pulses, end the nodes lost; a pilot that has lost
        every node ends FAILED (it has nothing left to run on), the nodes and why named."""
        nodeset = self.nodeset
        assert nodeset is not None  # (run calls it with a node set only)
        if any(sock in events for sock in nodeset.sockets()):
            nodeset.on_readable()
        nodeset.heartbeat()
        for join in nodeset.joins.check():  # nodes of a later job (partition/growth.py)
            self.growth.joined(join)
        self.growth.tick(time.monotonic())
        lost = nodeset.check()
        for index, reason in lost:
            self.node_lost(index, reason)
        if lost and self.ending is None and nodeset.all_down():
            names = ", ".join(self.resources.nodes[i].name for i in sorted(nodeset.down)[:8])
            names += ", ..." if len(nodeset.down) > 8 else ""
            reasons = list(dict.fromkeys(nodeset.down[i] for i in sorted(nodeset.down)))
            more = f"; and {len(reasons) - 2} more" if len(reasons) > 2 else ""
            why = "; ".join(reasons[:2]) + more
            self.end(FAILED, f"every node of the pilot is lost ({names}): {why}")

    def _watch_zygote(self, poller: zmq.Poller, fd: int | None, events: dict) -> int | None:
        """Read the agent zygote's answers; when a zygote that died was replaced, poll the new
        one's fd instead.  Returns the fd polled now."""
        if fd is not None and fd in events:
            self.forker.read()
        return _repoll(poller, fd, self.forker.fd)

    def _check_clocks(self, now: float) -> None:
        """Teardown when the runtime is over, the client silent for client_timeout s (time this
        process did not run, beyond liveness.STALL s between two looks, is not the client's
        silence), or (with watch_parent) the client process gone."""
        timeout = self.cfg["client_timeout"]
        away = now - self.looked - liveness.STALL  # (stopped, swapped out: nobody's silence)
        self.looked = now
        if away > 0:
            self.link.last_heard = min(now, self.link.last_heard + away)
        if now >= self.deadline:
            self.end(DONE, f"pilot runtime of {self.cfg['runtime'] / 60:g} min expired")
        elif now - self.link.last_heard > timeout:
            self.end(CANCELED, f"no word from the client for {timeout:g} s")
        elif self.parent is not None and os.getppid() != self.parent:
            self.end(CANCELED, "the client process is gone")

    def _drain(self, sock, handler) -> None:
        for frames in drain(sock, 200):
            try:
                handler(frames)
            except validate.Invalid as exc:  # a peer's bad message (pilot/wire/messages.py)
                self.bad_messages.report(f"bad message {frames[:2]!r:.120}: {exc}")
            except Exception as exc:  # our own bug: said as such, and the pilot goes on
                self.internal.report(f"bootstrap {handler.__name__}", exc)

    def finish(self) -> int:
        assert self.ending is not None  # (run's: end() or a failed bring-up set it first)
        state, reason = self.ending
        agents, link = self.agents, self.link
        log.info("down.wait: %d agent(s) left", len(agents.procs))
        for uid, proc in list(agents.procs.items()):
            ended = proc.wait(timeout=2.0)  # an agent that said bye exits at once
            if ended is None:
                log.error("%s: agent pid %s still running at teardown; killed", uid, proc.pid)
                proc.kill()
                ended = proc.wait(timeout=5.0)
            self._drain(agents.sock, agents.on_agent)  # its last words, if any are left
            if ended is None:
                ended = AgentExit(None, "did not end within 5 s of SIGKILL at teardown")
            self.pm.on_agent_exit(uid, ended, grace=0)
        self.forker.close()
        if self.nodeset is not None:
            self.nodeset.halt(reason)
        orphans.end_children()  # nothing it started outlives the job (see orphans.py)
        for part in self.pm.live():
            self.pm.end(part, FAILED, "pilot ended before the partition did")
        link.flush()
        link.to_client(msg(b"bye", {"state": state, "reason": reason}))
        log.info(
            "down.bye: %s (%s); %d outcome(s) acknowledged by the client, %d not",
            state,
            reason,
            self.outbox.acked,
            len(self.outbox.kept),
        )
        self.files.run(lambda: _unlink(os.path.join(self.sandbox, "control.json")))
        if not self.files.close(timeout=2.0):
            log.warning("down.bye: the sandbox's file system did not take the last writes in 2 s")
        for s in (link.client, agents.sock, link.control):
            s.close()
        self.keys.close()
        self.ctx.term()
        return 0 if state != FAILED else 1


def _write_json(sandbox: str, name: str, value, mode: int = 0o644) -> None:
    """(the file thread) PILOT_SANDBOX/name, JSON."""
    fd = os.open(os.path.join(sandbox, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(value, f, indent=1)


def _tools_failed(result) -> None:
    """(the loop) RP's trace commands could not be copied: tasks calling $RP_PROF say so."""
    if isinstance(result, Exception):
        log.warning("boot.connect: RP's trace commands not copied to the sandbox: %s", result)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _repoll(poller: zmq.Poller, old: int | None, new: int | None) -> int | None:
    """Poll descriptor `new` instead of `old` (either may be None); returns `new`."""
    if new != old:
        if old is not None:
            poller.unregister(old)
        if new is not None:
            poller.register(new, zmq.POLLIN)
    return new


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: python -m {processes.BOOTSTRAP} BOOTSTRAP.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        cfg = json.load(f)
    # the log is written by a thread of its own: the loop never waits on the sandbox's file
    # system (partition/off_loop.py)
    writer = LogWriter(2)
    writer.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[writer])
    try:
        return Bootstrap(cfg).run()
    finally:
        writer.close(timeout=2.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
