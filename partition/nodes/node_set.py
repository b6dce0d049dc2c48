"""The bootstrap's side of the node daemons: bounded bring-up, liveness, ordered halt.

Protocol (the daemon's side and the message bodies are in agent/node/daemon.py):
    boot.nodes.launch  the launch method starts one daemon per node (partition/launch/)
    boot.nodes.up      gather `up` {hint, pid, endpoint, node} until every daemon reported or
                       bringup_timeout passed.  Node indices are assigned here: the primary
                       (hint 0: the node the bootstrap runs on) is index 0, the others follow in
                       hint order.  With a network config file (ComputePilotDescription(
                       network_config=)) the file decides instead of discovery: a daemon takes
                       the index of the entry naming its node and the file's descriptor is used;
                       a daemon on a node the file does not name is refused (logged), an entry
                       no daemon reported for is a missing node.
    boot.nodes.table   the channel table {index: {name, host_id, endpoint}} is compressed once
                       (zlib over compact JSON) and sent to the first `fanout` nodes that are
                       up; every node forwards the same bytes to its children (positions
                       fanout*(p+1) ... among the up nodes, in index order), so the
                       broadcast is log_fanout(N) deep and the bootstrap sends only `fanout`
                       copies.  Unless the resource sets `fanout`, the bootstrap sends every
                       node its copy itself (the width is N: no node has children) while the
                       copies come to at most DIRECT_BYTES, and a tree of TREE_WIDTH beyond:
                       a forward costs a new connection (a CURVE handshake each side), the
                       bootstrap's copy one send on a connection it has.  Gather `ready`
                       {index} until all or bringup_timeout; when
                       none comes for RESEND s while some are missing (a forward was lost:
                       a parent's new connection to its child failed or was too slow), the
                       bootstrap sends the table to those straight, on their own connection
                       (a node ignores a second copy).
    A node missing from either gather is named in the log and the error.  node_failure=fail:
    the pilot fails; continue: the node is marked down (its resources never allocated) and
    the pilot goes on with the others.
Growth: the nodes of a later batch job of the pilot join it while it runs (`joins`:
partition/nodes/joins.py).
Life: `drop` {part} when a partition ends (its daemons kill what of it still runs).
Liveness is a channel of its own beside this one, a pulse per daemon (partition/nodes/pulse.py,
the protocol in pilot/wire/liveness.py): `hb` both ways every period (0.5 s; longer for a pilot
of more than 1,024 nodes, liveness.period) on a connection that ZeroMQ ends and makes anew
when it stalls, so TCP's back-off after an outage delays no heartbeat.  A node is lost when it
is gone, not when the bootstrap was slow: its daemon process ended (fork / exec / netns
launches), the batch system ended it (the srun step ended), or its daemon was silent (on both
channels) for node_timeout + REJOIN seconds (liveness.tolerance) while the bootstrap heard
another node steadily from the start of that silence on (liveness.Silence.heard_through: a
node heard again only after a common outage is no witness).  Silence of every node at once
says nothing of the nodes (the bootstrap's own link is down, or it did not run:
liveness.Silence counts no time it did not run anyway): it is logged (node.silent) and
nobody is lost for it; the daemons, which never halt for the bootstrap's silence either, run
their units on.  A single-node pilot's node is never lost for silence alone.  `check()`
reports each loss once.
    down.nodes         `halt` to every live daemon, gather `bye` until a deadline, then the
                       launch method ends whatever still runs (SIGTERM, SIGKILL)
"""

from __future__ import annotations

import logging
import os
import time
import zlib

import zmq

from pilot import validate
from pilot.partition import launch
from pilot.partition.agents.hosted import HostedAgent
from pilot.partition.launch.base import ALL_NODES
from pilot.partition.nodes.joins import Joins
from pilot.partition.nodes.pulse import NodePulse
from pilot.wire import links, liveness
from pilot.wire.protocol import ProtocolError, drain, msg, pack, send_frames, wait_ms

log = logging.getLogger("bootstrap.nodes")
HALT_GRACE = 5.0
RESEND = 2.0  # s without a `ready` while some are missing: the table to those straight
DIRECT_BYTES = 256 * 2**20  # the table's copies the bootstrap sends itself, at most (fanout unset)
TREE_WIDTH = 8  # the broadcast tree's width beyond that
BYE_WAIT = 1.0  # s a daemon that exited 0 is given for its `bye` to be read (check)
# s between two looks at every node's clocks and exit (check): each is a walk over all of them,
# and the bootstrap's loop turns once per message batch (at 1,024 nodes under a flood of units,
# looking every turn cost the bootstrap 45 us a unit against 9 at 64 nodes, and lagged it so far
# behind its pulses that it took live nodes for lost)
CHECK_EVERY = 0.1


class BringUpError(RuntimeError):
    """Nodes missing at bring-up with node_failure=fail."""


def tree_depth(m: int, width: int) -> int:
    """Levels of the broadcast tree over m nodes: level k holds width**k of them."""
    depth, reach = 0, 0
    while reach < m:
        depth += 1
        reach += width**depth
    return depth


def backlog(n: int) -> int:
    """The listen queue for `n` daemons that connect at once (the kernel caps it at
    net.core.somaxconn)."""
    return max(100, min(n + 64, 65535))


class NodeSet:
    def __init__(
        self, ctx: zmq.Context, rcfg, cfg: dict, n: int, sandbox: str, keys, address: str
    ) -> None:
        self.rcfg = rcfg
        self.n = n
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # every daemon connects at once: a listen queue of ZeroMQ's default 100 overflows,
        # and what it drops comes back only after TCP's 1 s SYN retry (0.35 s at 1,024 nodes)
        self.sock.setsockopt(zmq.BACKLOG, backlog(n))
        keys.serve(self.sock)  # CURVE (pilot/wire/security.py)
        port = self.sock.bind_to_random_port(f"tcp://{address}")
        self.endpoint = f"tcp://{address}:{port}"  # the daemons' way up
        period = liveness.period(n, rcfg.node_timeout, rcfg.pulse_rate)
        self.pulse = NodePulse(ctx, keys, address, rcfg.node_timeout, backlog(n), period)
        self.launch = launch.for_resource(
            rcfg,
            n,
            self.endpoint,
            dict(cfg, pulse=self.pulse.endpoint, pulse_s=period),
            os.path.join(sandbox, "nodes"),
        )
        self.by_hint: dict[int, dict] = {}  # hint -> the daemon's `up` body
        self.index_of: dict[int, int] = {}  # hint -> node index
        self.table: dict[int, dict] = {}  # node index -> {name, host_id, endpoint}
        self.nodes: dict[int, dict] = {}  # node index -> descriptor (network-config fields)
        self.down: dict[int, str] = {}  # node index -> why it is down
        self.byes: set[int] = set()
        self.stats: dict = {}
        self.table_width = TREE_WIDTH  # (_send_table sets it)
        self.lost_reported: set[int] = set()
        self.all_silent = False  # every live daemon silent now (logged once: node.silent)
        self.next_check = 0.0  # (check: when it looks next)
        self.label: dict[int, str] = {}  # node index -> name (for messages about it)
        self.hosted: dict[str, HostedAgent] = {}  # partition uid -> its agent on a node
        self.joins = Joins(self, first_hint=n)  # nodes of later jobs (partition/nodes/joins.py)

    # -- bring-up -------------------------------------------------------------------------------
    def bring_up(self, given: dict | None = None) -> dict:
        """Start the daemons and run both gathers; returns the network config of the pilot's
        nodes {index: descriptor} (down nodes with state "down").  `given`: a network config
        {index: descriptor} naming the nodes instead of discovery.  Raises BringUpError when
        nodes are missing and node_failure is fail."""
        t0 = time.monotonic()
        self._launch(t0 + self.rcfg.bringup_timeout)
        t_up = time.monotonic()
        hints = self._number_nodes(given)
        log.info("boot.nodes.up: %d of %d in %.3f s", len(hints), self.n, t_up - t0)
        blob, roots = self._send_table(hints)
        late = self._gather_ready(hints)
        t_ready = time.monotonic()
        width = self.table_width
        self.stats = {
            "nodes": self.n,
            "up": len(hints) - len(late),
            "up_s": round(t_up - t0, 4),
            "table_s": round(t_ready - t_up, 4),
            "total_s": round(t_ready - t0, 4),
            "table_bytes": len(blob),
            "table_json_bytes": len(pack(self.table)),
            "bootstrap_sends": len(roots),
            "tree_depth": tree_depth(len(hints), width),
            "fanout": width,
        }
        log.info("boot.nodes.table: %s", self.stats)
        for h in hints:
            self.pulse.heard(h)
        return self.network_config()

    def _launch(self, deadline: float) -> None:
        """boot.nodes.launch: one daemon per node; gather `up` until all or `deadline`."""
        self.launch.start()
        log.info("boot.nodes.launch: %d daemon(s) by %s", self.n, self.launch.method)
        self._gather(lambda: len(self.by_hint) == self.n, deadline, {b"up"})

    def _number_nodes(self, given: dict | None) -> list[int]:
        """boot.nodes.up: node indices, descriptors and the channel table of the daemons that
        reported; the others are missing.  Returns the hints of the nodes up, in index order."""
        if given:
            self._index_by_name(given)
        else:
            self._index_by_hint()
        hints = sorted(self.by_hint, key=self.index_of.__getitem__)
        missing = [h for h in range(self.n) if h not in self.by_hint]
        for hint in hints:
            body = self.by_hint[hint]
            found = given[self.index_of[hint]] if given else body["node"]
            node = dict(found, is_primary=self.index_of[hint] == 0, state="up")
            self.nodes[self.index_of[hint]] = node
            self.table[self.index_of[hint]] = {
                "name": node["name"],
                "host_id": node["host_id"],
                "endpoint": body["endpoint"],
            }
        if missing:
            why = self._why_missing(missing, "did not report up")
            self._missing(missing, why)
        return hints

    def _width(self, blob: bytes) -> int:
        """The broadcast tree's width: the resource's `fanout`, else every node a root while
        their copies come to at most DIRECT_BYTES (the module's header)."""
        if self.rcfg.fanout:
            return self.rcfg.fanout
        n = len(self.table)
        return max(2, n) if n * len(blob) <= DIRECT_BYTES else TREE_WIDTH

    def _send_table(self, hints: list[int]) -> tuple[bytes, list[int]]:
        """boot.nodes.table: the compressed table to the broadcast tree's roots: (it, roots)."""
        blob = self._table_blob = zlib.compress(pack(self.table), 6) if hints else b""
        width = self.table_width = self._width(blob)
        roots = sorted(self.table)[:width]  # positions 0..width-1 of the up nodes
        index_to_hint = {i: h for h, i in self.index_of.items()}
        frame = zmq.Frame(blob)  # (sent as it is to each: libzmq shares its bytes, no copy)
        for i in roots:
            head = pack({"index": i, "width": width})
            self._send(index_to_hint[i], [b"table", head, frame])
        return blob, roots

    def _resend_table(self, hints: list[int]) -> None:
        """The table straight to each of `hints` (their forward from a parent did not come: a
        parent's connection to them failed, or is slower than RESEND); each forwards it on to
        its children, which ignore a second copy."""
        log.warning("boot.nodes.table: %d node(s) silent for %.0f s: sent to them directly",
                    len(hints), RESEND)  # fmt: skip
        width = self.table_width
        for h in hints:
            body = {"index": self.index_of[h], "width": width}
            self._send(h, [b"table", pack(body), self._table_blob])

    def _gather_ready(self, hints: list[int]) -> list[int]:
        """Gather `ready` until all or bringup_timeout; the hints that did not (missing now)."""
        ready: set[int] = set()

        def on_ready(hint: int, body: dict) -> None:
            ready.add(hint)

        deadline = time.monotonic() + self.rcfg.bringup_timeout
        want = set(hints)
        while not ready >= want and time.monotonic() < deadline:
            before = len(ready)
            until = min(deadline, time.monotonic() + RESEND)
            self._gather(lambda: ready >= want, until, {b"ready"}, on_ready)
            if len(ready) == before and not ready >= want:  # the tree stalled: a forward lost
                self._resend_table(sorted(want - ready, key=self.index_of.__getitem__))
        late = [h for h in hints if h not in ready]
        if late:
            self._missing(late, "did not confirm the channel table")
        return late

    def _why_missing(self, hints: list[int], what: str) -> str:
        exited = self.launch.exited()
        reasons = []
        for h in hints:
            code = exited.get(h, exited.get(ALL_NODES))
            reasons.append(
                f"{what}" + (f" (its process exited with code {code})" if code is not None else "")
            )
        return reasons[0] if len(set(reasons)) == 1 else "; ".join(reasons)

    def _index_by_hint(self) -> None:
        """Discovery: the daemons that reported take indices in hint order (hint 0, the
        primary, first), then those that did not; labels are the launch method's names."""
        names = self.launch.names()  # by launch hint
        reported = sorted(self.by_hint)
        absent = [h for h in range(self.n) if h not in self.by_hint]
        for index, hint in enumerate(reported + absent):
            self.index_of[hint] = index
        self.label = {
            self.index_of[h]: names[h] if h < len(names) else f"hint {h}" for h in range(self.n)
        }

    def _index_by_name(self, given: dict) -> None:
        """Daemons take the index (and label) of the network config entry naming their node."""
        index_by_name = {node["name"]: i for i, node in given.items()}
        for hint, body in sorted(self.by_hint.items()):
            index = index_by_name.get(body["node"]["name"])
            if index is None or index in self.index_of.values():
                log.error(
                    "boot.nodes.up: a daemon on %r, which the network config does not name "
                    "(or names once, taken), refused; the config names %s",
                    body["node"]["name"],
                    sorted(index_by_name),
                )
                del self.by_hint[hint]
                continue
            self.index_of[hint] = index
        left = [i for i in range(self.n) if i not in self.index_of.values()]
        for hint in [h for h in range(self.n) if h not in self.index_of]:
            self.index_of[hint] = left.pop(0)  # stands for an entry no daemon reported for
        self.label = {i: given[i]["name"] for i in range(self.n)}

    def _missing(self, hints: list[int], what: str) -> None:
        named = ", ".join(self.label[self.index_of[h]] for h in hints)
        text = f"node(s) {named} {what} within {self.rcfg.bringup_timeout:g} s (bringup_timeout)"
        log.error("boot.nodes: %s", text)
        if self.rcfg.node_failure == "fail":
            raise BringUpError(text)
        for h in hints:
            index = self.index_of[h]
            self.down[index] = text
            self.by_hint.pop(h, None)
            self.table.pop(index, None)

    def network_config(self) -> dict[int, dict]:
        out = {}
        for _hint, index in sorted(self.index_of.items(), key=lambda kv: kv[1]):
            node = self.nodes.get(index)
            if node is None or index in self.down:
                node = {
                    "name": self.label[index],
                    "host_id": index,
                    "ip_addrs": [],
                    "is_primary": index == 0,
                    "num_cpus": 0,
                    "gpus": [],
                    "physical_mem": 0,
                    "state": "down",
                }
            out[index] = node
        return out

    def _gather(self, done, deadline: float, kinds: set, on=None) -> None:
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if not self.sock.poll(wait_ms(min(left, 0.2))):
                continue
            for hint, kind, body in self._messages():
                if kind == b"up" and b"up" in kinds:
                    if hint in range(self.n) and hint not in self.by_hint:
                        self.by_hint[hint] = body
                    else:
                        log.error("up from unexpected daemon hint %r: ignored", hint)
                elif kind in kinds and on is not None:
                    on(hint, body)

    def _messages(self):
        """(hint, kind, body) of what the daemons sent, without blocking; undecodable
        messages are logged and skipped."""
        for frames in drain(self.sock, 1000):
            try:
                ident = frames[0].decode()
                if not ident.startswith("d"):
                    raise ProtocolError(f"identity {ident!r} is not a daemon's")
                if len(frames) < 2:
                    raise ProtocolError(f"a message of {len(frames)} frame(s)")
                frame = frames[2] if len(frames) > 2 else None
                body = FROM_DAEMONS.body(frames[1], frame)
                hint = int(ident[1:])
            except (validate.Invalid, ValueError) as exc:  # (int(): not a daemon's identity)
                log.error("bad message from a node daemon %r: %s", frames[:2], exc)
                continue
            yield hint, frames[1], body

    def send(self, hint: int, frames: list[bytes]) -> bool:
        """To the daemon of `hint`, never blocking (False: not connected, or its queue full)."""
        return self._send(hint, frames)

    def _send(self, hint: int, frames: list) -> bool:
        """`frames` to the daemon of `hint` (a zmq.Frame among them is sent as it is: every
        send refers to its bytes, as the table's copies do); False when it is not connected or
        its queue is full."""
        try:
            send_frames(self.sock, [f"d{hint}".encode(), *frames], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def daemons(self) -> dict[str, dict]:
        """node index -> {name, hint, pid, endpoint} of the daemons that came up."""
        return {
            str(self.index_of[h]): {
                "name": b["node"]["name"],
                "hint": h,
                "pid": b["pid"],
                "endpoint": b["endpoint"],
            }
            for h, b in sorted(self.by_hint.items())
        }

    # -- life -----------------------------------------------------------------------------------
    def endpoint_of(self, index: int) -> str:
        return self.table[index]["endpoint"]

    def live_hints(self) -> list[int]:
        return [h for h in self.by_hint if self.index_of[h] not in self.down]

    def sockets(self) -> list[zmq.Socket]:
        """What the bootstrap's loop polls for `on_readable`: the node channel and the pulse."""
        return [self.sock, self.pulse.sock]

    def launch_fd(self) -> int | None:
        """What the bootstrap's loop polls beside them, to call `check()` at once when a daemon
        process ends (the node zygote's reports, launch method fork); it may change."""
        return self.launch.fd

    def read(self, timeout: float) -> None:
        """Take what the daemons sent, waiting up to `timeout` s for something."""
        if self.sock.poll(wait_ms(timeout)):
            self.on_readable()

    def on_readable(self) -> None:
        """What the daemons sent, each to its handler by pilot/wire/links.py's table
        (FROM_DAEMONS)."""
        self.pulse.read()
        for hint, kind, body in self._messages():
            handler, _ = FROM_DAEMONS.route(kind)
            handler(self, hint, body)

    def daemon_up(self, hint: int, body: dict) -> None:
        if not self.joins.on_up(hint, body):
            log.warning("late `up` from daemon hint %d ignored (bring-up is over)", hint)

    def daemon_ready(self, hint: int, body: dict) -> None:
        if not self.joins.on_ready(hint):
            self.pulse.heard(hint)  # (a late `ready`: its node stays as the gather left it)

    def daemon_agent_exit(self, hint: int, body: dict) -> None:
        self.pulse.heard(hint)
        proc = self.hosted.get(body.get("uid") or "")
        if proc is not None:
            proc.exited(int(body["code"]))

    def daemon_bye(self, hint: int, body: dict) -> None:
        self.pulse.heard(hint)
        self.byes.add(hint)
        if hint in self.index_of and self.index_of[hint] not in self.down:
            name = self.label.get(self.index_of[hint], hint)
            why = f"node {name} lost: its daemon halted: {body.get('reason')}"
            self.down.setdefault(self.index_of[hint], why)

    def drop_partition(self, part: str, indices: list[int]) -> None:
        """A partition ended: its daemons kill whatever of its units still runs (normally
        nothing; something when its agent died without stopping them)."""
        for i in indices:
            if i not in self.down and self.send_index(i, msg(b"drop", {"part": part})):
                hint = next(h for h, j in self.index_of.items() if j == i)
                self.pulse.dropped(hint)  # (its daemon starts nothing until it has it)

    def send_index(self, index: int, frames: list[bytes]) -> bool:
        hint = next((h for h, i in self.index_of.items() if i == index), None)
        return hint is not None and hint in self.by_hint and self._send(hint, frames)

    def start_agent(
        self, index: int, uid: str, argv: list[str], log_path: str, cfg: tuple[str, str]
    ) -> HostedAgent:
        """The agent of partition `uid` started by the daemon of node `index`, which first
        writes its config `cfg` (path, JSON text)."""
        proc = HostedAgent(self, index, uid)
        self.hosted[uid] = proc
        body = {"uid": uid, "argv": argv, "log": log_path, "cfg": cfg[0], "cfg_text": cfg[1]}
        if index in self.down or not self.send_index(index, msg(b"agent", body)):
            proc.lost(f"could not be started: node {self.label.get(index, index)} is down")
        return proc

    def heartbeat(self) -> None:
        """Called every loop turn: `hb` on the pulse of every live daemon, every period."""
        if time.monotonic() >= self.pulse.next_beat:  # (the walk over the nodes: when due)
            self.pulse.beat(self.live_hints())

    def all_down(self) -> bool:
        """Every node of the pilot is down (lost, missing at bring-up, or given back)."""
        return all(i in self.down for i in self.index_of.values())

    def check(self) -> list[tuple[int, str]]:
        """Nodes lost since the last look: [(index, reason)]; called every loop turn, it looks
        every CHECK_EVERY s (a daemon's exit, a silence and a `bye` wait that long at most)."""
        now = time.monotonic()
        if now < self.next_check:
            return []
        self.next_check = now + CHECK_EVERY
        silent = self.pulse.silent()
        exited = self.launch.exited()
        # a daemon that halted itself said why (`bye`) before it exited 0: its words may still
        # be on their way (they are read here, bounded), so its node is lost for its reason
        halted = [h for h in self.live_hints() if exited.get(h) == 0]
        deadline = time.monotonic() + BYE_WAIT
        while halted and time.monotonic() < deadline:
            self.read(deadline - time.monotonic())
            halted = [h for h in halted if h not in self.byes]
        lost = []
        self._all_silent(silent)
        for h in self.live_hints():
            index = self.index_of[h]
            name = self.table[index]["name"]
            code = exited.get(h)
            if code is not None:
                lost.append((index, f"node {name} lost: its daemon exited with code {code}"))
            elif ALL_NODES in exited and h < self.n:  # (the first job's step: its nodes)
                lost.append((index, f"node {name} lost: the srun step ended ({exited[ALL_NODES]})"))
            elif h in silent and (heard := self.pulse.heard_through(h)) is not None:
                heard = self.table[self.index_of[heard]]["name"]
                lost.append(
                    (
                        index,
                        f"node {name} lost: no word from its daemon for "
                        f"{self.rcfg.node_timeout:g} s (node_timeout), nor in the "
                        f"{liveness.rejoin(self.pulse.period):g} s more a link that came back "
                        "needs "
                        f"({silent[h]:.1f} s in all), while node {heard} was heard",
                    )
                )
        for h in self.by_hint:
            index = self.index_of[h]
            if index in self.down and index not in self.lost_reported:
                lost.append((index, self.down[index]))
        out = []
        for index, why in lost:
            if index in self.lost_reported:
                continue
            self.lost_reported.add(index)
            self.down.setdefault(index, why)
            for h, i in self.index_of.items():
                if i == index:
                    self.pulse.lost(h, why)
            for proc in self.hosted.values():  # agents on that node are gone with it
                if proc.index == index:
                    proc.lost(f"was lost with its node: {why}")
            log.error("node.lost: %s", why)
            out.append((index, why))
        return out

    def _all_silent(self, silent: dict) -> None:
        """node.silent, once, when every live daemon is silent beyond the tolerance."""
        live = self.live_hints()
        quiet = [h for h in live if h in silent]
        if not quiet or len(quiet) < len(live):
            self.all_silent = False
            return
        if not self.all_silent:
            self.all_silent = True
            log.warning(
                "node.silent: no word from any of the %d live daemon(s) for %.1f s or more: "
                "the bootstrap's own link (or its host) is the likely cause; no node is lost "
                "for it, their units run on",
                len(live),
                min(silent[h] for h in quiet),
            )

    def halt(self, reason: str) -> None:
        hints = [h for h in self.by_hint if h not in self.byes]
        for h in hints:
            self._send(h, msg(b"halt", {"reason": reason}))
        deadline = time.monotonic() + HALT_GRACE
        exited = self.launch.exited
        while time.monotonic() < deadline:
            gone = exited()
            if all(h in self.byes or h in gone for h in hints):
                break
            self.read(0.05)
        missing = [h for h in hints if h not in self.byes]
        log.info(
            "down.nodes: %d daemon(s) said bye%s",
            len(hints) - len(missing),
            f"; no bye from hint(s) {missing}" if missing else "",
        )
        self.launch.stop()
        self.sock.close()
        self.pulse.close()


# what the bootstrap receives from node daemons on the node channel (pilot/wire/links.py), by kind:
# handler(nodeset, hint, body), once bring-up's gathers are over (they take `up` and `ready`)
FROM_DAEMONS = links.Dispatch(
    "node",
    "bootstrap",
    {
        b"up": NodeSet.daemon_up,
        b"ready": NodeSet.daemon_ready,
        b"agent_exit": NodeSet.daemon_agent_exit,
        b"bye": NodeSet.daemon_bye,
    },
)
