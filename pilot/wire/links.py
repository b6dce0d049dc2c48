"""The protocol table: every message kind on every link, who sends it, who receives it, its
body, the check its body passes (pilot/wire/messages.py) and what it means.

Each receiving process builds its dispatch from this table (`Dispatch`): it names a handler for
every kind the table says it receives on a link, and `Dispatch` refuses, at import, a handler for
a kind the table does not list for that receiver and a kind the table lists without a handler
(ProtocolTableError: a bug of ours).  At run time a kind the table does not list for the
receiver is a bad message (`route` raises ProtocolError: logged, answered with an error where a
reply is expected, never stopping the component), and so is a body its check refuses.
A message whose `check` is None is read by its handler from the raw frames (`frames` says
which; `ustates`: pilot/wire/updates.py `read`; `units` at the bootstrap: forwarded undecoded).

The manual's protocol page (docs/reference/protocol.md) is made from TABLE and LINKS by
docs/hooks.py; pilot/wire/protocol.py has the framing, heartbeats, journal and timeouts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pilot.wire import messages as m
from pilot.wire.protocol import ProtocolError


class ProtocolTableError(RuntimeError):
    """A dispatcher whose handlers are not what the table says its process receives."""


@dataclass(frozen=True)
class Message:
    """One message kind on one link: `frames` after the kind (BODY: the JSON body; DATA...:
    frames of bytes values, pilot/wire/framed.py), `check` of BODY (None: the handler reads the
    frames itself), `meaning` in one line."""

    link: str
    kind: bytes
    sender: str
    receiver: str
    frames: str
    body: str
    check: Callable | None
    meaning: str


# link -> (its sockets, in one line)
LINKS = {
    "pilot": "client ROUTER (pmgr/core/channel.py) <-> bootstrap DEALER (identity = pilot uid)",
    "agent": "bootstrap ROUTER (127.0.0.1, node address) <-> agent DEALER (identity = partition)",
    "node": "bootstrap ROUTER <-> node daemon DEALER (identity = d<hint>): "
    "partition/nodes/node_set.py",
    "pulse": "bootstrap ROUTER <-> node daemon DEALER (d<hint>): liveness, pilot/wire/liveness.py",
    "ranks": "node daemon ROUTER <-> agent ROUTER (one an agent, connected to each of its "
    "nodes; identity = partition uid), and a parent "
    "daemon's table: agent/node/daemon.py",
}

C, B, A, D = "client", "bootstrap", "agent", "daemon"
_BODY = "BODY"


def _m(link, kind, sender, receiver, body, check, meaning, frames=_BODY) -> Message:
    return Message(link, kind.encode(), sender, receiver, frames, body, check, meaning)


# fmt: off
TABLE: tuple[Message, ...] = (
    # -- the pilot link: bootstrap -> client
    _m("pilot", "hello", B, C, "{pilot, pid, control, size, attach, nodes: {index: {name, "
       "state}}, protocol, version, python}", m.HELLO,
       "the bootstrap is up (pilot ACTIVE), or a new client attached; what it speaks "
       "(pilot/wire/peer_version.py)"),
    _m("pilot", "state", B, C, "[[kind, uid, state, ts, info], ...]", m.STATE,
       "batched partition state updates (kind: part)"),
    _m("pilot", "ustates", B, C, "columns (pilot/wire/updates.py)", None,
       "unit moves, an agent's forwarded raw", "HEAD TIMES DATA..."),
    _m("pilot", "back", B, C, "{part, units: [unit dicts], stays}", m.BACK,
       "units a partition handed back: route them again"),
    _m("pilot", "lost", B, C, "{part, started, killed, reason}", m.LOST,
       "the partition's agent died: `started` may have run, the others never did"),
    _m("pilot", "output", B, C, "[[uid, node, rank, stream, text], ...]", m.OUTPUT,
       "unit output forwarded by node daemons"),
    _m("pilot", "synced", B, C, "{cid, part, unknown: [uids], started?: [uids]}", m.SYNCED,
       "after a sync: the uids nothing of the pilot knows (`started`: a gone agent's start "
       "journal has them: they may have run)"),
    _m("pilot", "reply", B, C, "{cid, ok, result | error}", m.REPLY, "the answer to a cmd"),
    _m("pilot", "hb", B, C, "{}", m.EMPTY, "liveness, every HEARTBEAT s"),
    _m("pilot", "bye", B, C, "{state, reason}", m.PILOT_BYE,
       "the pilot's final state; the bootstrap exits"),
    _m("pilot", "grow", B, C,
       "{job, nodes, hint, exclude, positions, endpoint, pulse, pulse_s, runtime, reason}",
       m.GROW, "submit a job of `nodes` nodes for the pilot, its daemons from hint `hint` on, "
       "their heartbeats every pulse_s s (partition/growth.py)"),
    _m("pilot", "release", B, C, "{job, reason}", m.RELEASE,
       "the pilot gave that job's nodes back: end the job"),
    _m("pilot", "jobs", B, C, "{jobs: [{job, nodes, state, id, names, ...}], nodes}", m.JOBS,
       "a job of the pilot changed state: all its jobs and nodes now"),
    _m("pilot", "taken_over", B, C, "{by}", m.TAKEN_OVER,
       "another client took the pilot over; answered `released`"),
    _m("pilot", "put_ack", B, C, "HEADER", None, "a staged file's part arrived "
       "(partition/client/data_port.py)", "HEADER"),
    _m("pilot", "got", B, C, "HEADER CHUNK", None, "a part of a file asked for with `get`",
       "HEADER CHUNK"),
    # -- the pilot link: client -> bootstrap
    _m("pilot", "units", C, B, "[unit dicts] (pilot/unit_record.py)", None,
       "units for a partition's agent, forwarded raw", "PART_UID BODY DATA..."),
    _m("pilot", "cmd", C, B, "{cid, op, args}", m.CMD,
       "a command (partition/control.py), answered `reply`"),
    _m("pilot", "ack", C, B, "{uids}", m.ACK,
       "the store has these units' final states: the pilot lets go of them"),
    _m("pilot", "job", C, B, "{job, state: queued | failed | ended, id, reason}", m.JOB,
       "what the batch system did with a job the pilot asked for"),
    _m("pilot", "released", C, B, "{}", m.EMPTY, "the old owner's answer to `taken_over`"),
    _m("pilot", "hb", C, B, "{}", m.EMPTY, "liveness, every HEARTBEAT s"),
    _m("pilot", "put", C, B, "HEADER CHUNK", None, "a part of a file to stage in",
       "HEADER CHUNK"),
    _m("pilot", "get", C, B, "HEADER", None, "ask for a part of a pilot-side file", "HEADER"),
    # -- the agent link: agent -> bootstrap
    _m("agent", "ready", A, B, "{pid, runner, data}", m.READY,
       "the agent is up: partition ACTIVE (data: its workers see the client's data files)"),
    _m("agent", "ustates", A, B, "columns (pilot/wire/updates.py)", None,
       "unit moves: forwarded raw to the client; final ones kept (partition/client/outbox.py)",
       "HEAD TIMES DATA..."),
    _m("agent", "back", A, B, "{part, units: [{uid}], stays}", m.BACK,
       "queued units handed back when stopping, or asked for (`give_back`: stays true)"),
    _m("agent", "output", A, B, "[[uid, node, rank, stream, text], ...]", m.OUTPUT,
       "forwarded raw to the client"),
    _m("agent", "synced", A, B, "{cid, part, unknown}", m.SYNCED,
       "answer to sync: the units it has not, or no longer"),
    _m("agent", "bye", A, B, "{state, reason}", m.AGENT_BYE,
       "the agent's last word: the partition's final state"),
    _m("agent", "load", A, B, "{nodes: [[index, busy cores, busy GPUs, ranks], ...]}", m.LOAD,
       "how busy its nodes are, when it changed, at most once a second (`pilot top`, the "
       "dashboard's node view)"),
    # -- the agent link: bootstrap -> agent
    _m("agent", "units", B, A, "[unit dicts | bulks] (pilot/unit_record.py)", m.UNITS,
       "units to run, forwarded from the client unchanged", "BODY DATA..."),
    _m("agent", "cancel", B, A, "{uids, reason}", m.CANCEL, "cancel these units"),
    _m("agent", "sync", B, A, "{cid, uids}", m.SYNC, "say again all updates of these units"),
    _m("agent", "node_lost", B, A, "{index, name, reason}", m.NODE_LOST,
       "units running on that node end FAILED"),
    _m("agent", "data", B, A, "{data: {dir, token, sync} | None}", m.DATA,
       "an attaching client's data directory: large values by reference there, or bytes"),
    _m("agent", "stop", B, A, "{reason, units: CANCELED | back}", m.STOP,
       "end: cancel running units, cancel or hand back queued ones, then bye and exit"),
    _m("agent", "give_back", B, A, "{uids}", m.GIVE_BACK,
       "hand back those of these units still queued, not started (`back`, stays: the "
       "partition goes on): another partition has free cores and the client none to send it"),
    # -- the node channel: node daemon -> bootstrap
    _m("node", "up", D, B, "{hint, pid, endpoint, node}", m.UP,
       "the daemon is up: its node and its ROUTER for agents"),
    _m("node", "ready", D, B, "{index, forwarded}", m.DAEMON_READY,
       "the channel table arrived (and went on to its children)"),
    _m("node", "agent_exit", D, B, "{uid, code}", m.AGENT_EXIT,
       "an agent it started ended (code < 0: signal)"),
    _m("node", "bye", D, B, "{reason, killed}", m.DAEMON_BYE, "the daemon halted"),
    # -- the node channel: bootstrap -> node daemon
    _m("node", "table", B, D, "{index, width} + zlib(JSON)", m.TABLE,
       "the channel table: node index -> {name, host_id, endpoint}", "BODY TABLE"),
    _m("node", "agent", B, D, "{uid, argv, log, cfg, cfg_text}", m.AGENT,
       "start a partition's agent on this node"),
    _m("node", "agent_kill", B, D, "{uid}", m.AGENT_KILL, "SIGKILL that agent"),
    _m("node", "drop", B, D, "{part}", m.DROP, "a partition ended: kill what of it runs"),
    _m("node", "halt", B, D, "{reason}", m.HALT, "kill what runs, say bye, exit"),
    _m("node", "hb", B, D, "{}", m.EMPTY, "accepted and ignored (the pulse carries liveness)"),
    # -- the pulse
    _m("pulse", "hb", D, B, "{n}", m.PULSE_HB, "the daemon lives, every period "
       "(liveness.period); n: its number"),
    _m("pulse", "hb", B, D, "{n, d}", m.PULSE_HB, "the bootstrap lives, every period; "
       "n: the daemon's last hb heard, d: drops sent to it (its lease to start ranks)"),
    _m("pulse", "halt", B, D, "{reason}", m.HALT, "this node was declared lost: halt"),
    # -- the ranks channel: agent (or parent daemon) -> node daemon, and back
    _m("ranks", "exec", A, D, "{env, node, prof, gpus, ranks: [{uid, rank, ranks, argv, "
       "sandbox, files, cpus, ids, unit, env}]}", m.EXEC, "start ranks of units on this node "
       "(agent/rank_env.py exec_env: their environments)"),
    _m("ranks", "kill", A, D, "{uids, sig}", m.KILL, "signal those units' process groups"),
    _m("ranks", "hb", A, D, "{}", m.EMPTY, "accepted and ignored"),
    _m("ranks", "table", D, D, "{index, width} + zlib(JSON)", m.TABLE,
       "the channel table, from a parent daemon of the fan-out tree", "BODY TABLE"),
    _m("ranks", "events", D, A, "{out: [[uid, node, rank, stream, text]], exit: [[uid, rank, "
       "code, error]]}", None, "ranks' output and exits, once per loop turn (its own check)"),
)
# fmt: on


def received(link: str, receiver: str) -> dict[bytes, Message]:
    """The messages `receiver` gets on `link`, by kind."""
    return {e.kind: e for e in TABLE if e.link == link and e.receiver == receiver}


DISPATCHERS: list[Dispatch] = []  # every Dispatch made (tests/test_protocol.py looks at them)


class Dispatch:
    """What one process does with what it receives on one link: `handlers` maps each kind
    the table lists for (`link`, `receiver`) to its handler, no more and no less, or
    ProtocolTableError.  The mapping is kept, not copied (a test may put another handler in)."""

    def __init__(self, link: str, receiver: str, handlers: dict[bytes, Callable]) -> None:
        if link not in LINKS:
            raise ProtocolTableError(f"Dispatch: link={link!r} must be one of {sorted(LINKS)}")
        self.link, self.receiver = link, receiver
        self.messages = received(link, receiver)
        extra = sorted(set(handlers) - set(self.messages))
        missing = sorted(set(self.messages) - set(handlers))
        if extra or missing:
            raise ProtocolTableError(
                f"the {receiver}'s dispatch of the {link} link: handlers for kinds the table "
                f"does not list for it: {extra}; kinds the table lists without a handler: "
                f"{missing} (pilot/wire/links.py TABLE)"
            )
        self.handlers = handlers
        DISPATCHERS.append(self)

    def route(self, kind: bytes) -> tuple[Callable, Message]:
        """The handler of `kind` and its table entry; ProtocolError (a bad message) for a kind
        this receiver does not get on this link."""
        entry = self.messages.get(kind)
        if entry is None:
            raise ProtocolError(f"unknown message type {kind[:16]!r}")
        return self.handlers[kind], entry

    def read(self, kind: bytes, frame: bytes | None, data=()) -> tuple[Callable, Message, object]:
        """(handler, table entry, checked body) of a `kind` message, the kind looked up once:
        the body is None when the table says the handler reads the frames itself (its `check`
        is None).  ProtocolError for a kind not received here, validate.Invalid for a body of the
        wrong shape."""
        handler, entry = self.route(kind)
        if entry.check is None:
            return handler, entry, None
        return handler, entry, m.body(entry.check, kind, frame, data)

    def body(self, kind: bytes, frame: bytes | None, data=()):
        """The checked body of a `kind` message (pilot/wire/messages.py): ProtocolError for a kind
        not received here, validate.Invalid for a body of the wrong shape."""
        _, entry = self.route(kind)
        if entry.check is None:
            raise ProtocolError(f"{kind[:16]!r} has no JSON body to check")
        return m.body(entry.check, kind, frame, data)
