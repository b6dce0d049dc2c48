"""The bootstrap's agent channel: the agents' socket, their processes, and an agent's death.

A part the Bootstrap (partition/bootstrap.py) holds, `boot.agents`: it binds its socket when made,
and is given the client link's `to_client` and `flush`, the outbox and the agent forker, then
(`bind`) the partition manager and the node set, again whenever the bootstrap makes them anew.
The partition manager (partition/manager.py) is given send_agent, spawn_agent and agent_lost
from here; the messages, their bodies and their checks are in pilot/wire/links.py's table (link
"agent"), from which `FROM_AGENT`, this side's dispatch, is built.

Channel: a ROUTER (CURVE server, ROUTER_MANDATORY) bound on 127.0.0.1 and, on resources with node
daemons, on the node address too, for agents on other nodes (OS-chosen ports); each agent's
DEALER has its partition's uid for identity.
    agent -> bootstrap
        ready             to the partition manager (ACTIVE; its buffered units forwarded)
        ustates, back,    to the client unchanged, after the partition updates waiting
          synced          (flush: partition updates stay ahead of the unit updates that follow);
                          the final moves of `ustates` are kept until the client has them
        output            to the client unchanged
        load              kept: how busy each of its nodes is (`node_load`, by node index;
                          the `nodes` command answers with it: partition/control.py); each
                          names all its live nodes: one it no longer names (lost) is dropped
        bye               to the partition manager (the partition ends in the state it names)
    bootstrap -> agent    units, cancel, sync, node_lost, stop: `send_agent`; an agent that is
                          gone (EHOSTUNREACH) is logged, never waited for
Agent processes (`spawn_agent`, for the partition manager): forked by the agent zygote here
(partition/agents/forked.py), or, for a partition with an agent node on a multi-node pilot,
started by that node's daemon (partition/agents/hosted.py); config PILOT_SANDBOX/<uid>.agent.json,
log <uid>.agent.log.  `check_agents`, every turn of the loop, hands an exit to the partition
manager.  An agent that ended without stopping its units (`agent_lost`): the unit processes it
left are killed (partition/orphans.py), its start journal is read, and the client is told
`lost` {part, started, killed, reason}: the started units end FAILED, the others route again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import zmq

from pilot import processes
from pilot.config import network
from pilot.partition import orphans
from pilot.partition.manager import AgentProcess
from pilot.wire import checks, links, updates
from pilot.wire.journal import journal_path
from pilot.wire.protocol import ProtocolError, msg, send_frames

if TYPE_CHECKING:
    from pilot.config.resource_keys import ResourceConfig
    from pilot.partition.agents.forked import AgentForker
    from pilot.partition.client.outbox import Outbox
    from pilot.partition.manager import PartitionManager
    from pilot.partition.nodes.node_set import NodeSet
    from pilot.wire.security import Keys

log = logging.getLogger("bootstrap")


class AgentChannel:
    """The agents' channel and processes (the module's header)."""

    def __init__(
        self,
        cfg: dict,
        uid: str,
        sandbox: str,
        rcfg: ResourceConfig,
        ctx: zmq.Context,
        keys: Keys,
        *,
        forker: AgentForker,
        outbox: Outbox,
        to_client: Callable[[list[bytes]], None],
        flush: Callable[[], None],
    ) -> None:
        """boot.connect, the agents' side: the ROUTER, bound (`cfg["client"]` is where the
        client answered: the node address faces it)."""
        self.uid = uid
        self.sandbox = sandbox
        self.rcfg = rcfg
        self.forker = forker
        self.outbox = outbox
        self.to_client = to_client  # (partition/client/link.py)
        self.flush = flush  # partition updates first, then what follows them
        self.procs: dict[str, AgentProcess] = {}  # partition uid -> its agent process
        self.node_load: dict[int, tuple] = {}  # node index -> (busy cores, GPUs, ranks, part)
        self.load_of: dict[str, set[int]] = {}  # partition -> the nodes its last `load` named
        self.nodeset: NodeSet | None = None
        self.pm: PartitionManager
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        keys.serve(self.sock)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.endpoint_nodes = self.endpoint
        self.nodes_address = None
        if rcfg.node_daemons:  # agents on other nodes reach it on the node address
            addr = self.nodes_address = network.listen_address(rcfg.address, cfg["client"])
            if addr != "127.0.0.1":
                nport = self.sock.bind_to_random_port(f"tcp://{addr}")
                self.endpoint_nodes = f"tcp://{addr}:{nport}"

    def bind(self, pm: PartitionManager, nodeset: NodeSet | None) -> None:
        """The partition manager and the node set, as the bootstrap (re)made them."""
        self.pm = pm
        self.nodeset = nodeset

    def own_children(self) -> set[int]:
        """The processes this bootstrap started itself (never taken for orphans)."""
        pids = self.forker.pids()
        if self.nodeset is not None:
            pids.update(self.nodeset.launch.pids())
        return pids

    def agent_lost(self, uid: str, why: str) -> None:
        """The agent of `uid` ended without stopping its units: end what it left running,
        and tell the client which of its units had started (its start journal)."""
        killed = orphans.end_orphans(
            {"PILOT_PILOT_ID": self.uid, "PILOT_PARTITION_ID": uid}, self.own_children()
        )
        try:  # (streamed: one line per unit it ever started; those the client has are left)
            with open(journal_path(self.sandbox, uid)) as f:
                started = list(self.outbox.not_acknowledged(f))
        except FileNotFoundError:
            started = []
        log.warning(
            "%s: %s; %d unit(s) had started with no outcome acknowledged, %d killed",
            uid,
            why,
            len(started),
            len(killed),
        )
        self.flush()
        self.to_client(
            msg(b"lost", {"part": uid, "started": started, "killed": killed, "reason": why})
        )

    def send_agent(self, uid: str, frames: list[bytes]) -> None:
        try:
            # (a message with data frames, a call's large arguments: sent without a copy)
            send_frames(self.sock, [uid.encode(), *frames], copy=len(frames) <= 3)
        except zmq.ZMQError as exc:  # EHOSTUNREACH: the agent is gone
            log.error("%s: cannot reach agent: %s", uid, exc)

    def spawn_agent(self, uid: str, cfg: dict) -> AgentProcess:
        if self.nodeset is not None:  # units go to the daemons of the partition's nodes
            for node in cfg["nodes"]:
                node["endpoint"] = self.nodeset.endpoint_of(node["index"])
            cfg["endpoint"] = self.endpoint_nodes
        path = os.path.join(self.sandbox, f"{uid}.agent.json")
        if self.nodeset is None or cfg.get("agent_host") is None:  # forked by the zygote
            cfg["adopted_by"] = os.getpid()  # its parent, should the zygote die first
        # the config file is written by whoever starts the agent (the forked child, the node
        # daemon), never here: this loop does not wait on the sandbox's file system
        body = json.dumps(cfg)
        log_path = os.path.join(self.sandbox, f"{uid}.agent.log")
        host = cfg.get("agent_host")
        proc: AgentProcess
        if self.nodeset is not None and host is not None:  # on its own node, by that daemon
            argv = processes.python_m(processes.AGENT, path, python=self.rcfg.python)
            proc = self.nodeset.start_agent(host, uid, argv, log_path, (path, body))
        else:
            proc = self.forker.spawn(path, log_path, body)
        self.procs[uid] = proc
        log.info("%s: agent requested", uid)
        return proc

    def on_agent(self, frames: list[bytes]) -> None:
        """A message from an agent, to its handler by pilot/wire/links.py's table (FROM_AGENT); its
        body's shape is checked first (pilot/wire/messages.py: validate.Invalid, a bad message);
        what a handler raises after that is our own bug."""
        if len(frames) < 2:
            raise ProtocolError(f"a message of {len(frames)} frame(s) from an agent")
        uid, kind = checks.uid("agent", frames[0].decode(errors="replace")), frames[1]
        handler, _, body = FROM_AGENT.read(kind, frames[2] if len(frames) > 2 else None)
        handler(self, uid, frames[1:], body)

    def agent_ustates(self, uid: str, frames: list[bytes], body: None) -> None:
        """Unit moves (head, times, data: pilot/wire/updates.py checks them): their outcomes kept
        until the client has them, the frames to the client unchanged."""
        if len(frames) < 3:
            raise ProtocolError(f"ustates of {len(frames)} frames (head, times)")
        groups = updates.read(frames[1], frames[2], frames[3:])
        self.flush()  # keep partition updates ahead of the unit updates that follow them
        self.outbox.add(groups)  # its outcomes, kept until the client has them
        self.to_client(frames)

    def agent_ready(self, uid: str, frames: list[bytes], body: dict) -> None:
        self.pm.on_ready(uid, body.get("runner"), body.get("data") is True)

    def agent_back(self, uid: str, frames: list[bytes], body: dict) -> None:
        self.outbox.handed_back(uid, body["units"])  # (for a sync)
        self.flush()
        self.to_client([b"back", frames[1]])

    def agent_synced(self, uid: str, frames: list[bytes], body: dict) -> None:
        """The units it does not know may have ended (the outbox keeps those), or have been
        handed back by it (the outbox remembers those: `back` again, to be routed again)."""
        found, rest = self.outbox.answer(body["unknown"])
        back, rest = self.outbox.back_of(uid, rest)
        self.flush()
        if found:
            self.to_client(updates.of_records(found).frames())
        if back:
            units = [{"uid": u} for u in back]
            self.to_client(msg(b"back", {"part": uid, "units": units, "stays": True}))
        self.to_client(msg(b"synced", {**body, "unknown": rest}))

    def agent_output(self, uid: str, frames: list[bytes], body: list) -> None:
        self.to_client([b"output", frames[1]])

    def agent_bye(self, uid: str, frames: list[bytes], body: dict) -> None:
        self.pm.on_bye(uid, body)

    def agent_load(self, uid: str, frames: list[bytes], body: dict) -> None:
        load = self.node_load
        named = set()
        for index, cores, gpus, ranks in body["nodes"]:
            load[index] = (cores, gpus, ranks, uid)
            named.add(index)
        for index in self.load_of.get(uid, set()) - named:  # (no longer its: lost)
            if load.get(index, (0, 0, 0, None))[3] == uid:
                del load[index]
        self.load_of[uid] = named

    def check_agents(self) -> None:
        for uid, proc in list(self.procs.items()):
            ended = proc.poll()
            if ended is not None:
                del self.procs[uid]
                self.pm.on_agent_exit(uid, ended)


# what the bootstrap receives on the agent link (pilot/wire/links.py), by kind: handler(self, uid,
# frames from the kind on, body), body None for ustates (its frames: pilot/wire/updates.py)
FROM_AGENT = links.Dispatch(
    "agent",
    "bootstrap",
    {
        b"ready": AgentChannel.agent_ready,
        b"ustates": AgentChannel.agent_ustates,
        b"back": AgentChannel.agent_back,
        b"output": AgentChannel.agent_output,
        b"synced": AgentChannel.agent_synced,
        b"bye": AgentChannel.agent_bye,
        b"load": AgentChannel.agent_load,
    },
)
