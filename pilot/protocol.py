"""The ZeroMQ channels between client, bootstrap and agents, and their messages.

Every message is a multipart ZeroMQ message: [TYPE, BODY] where TYPE is a short ASCII word and
BODY is compact JSON (UTF-8).  Unit batches are forwarded by the bootstrap as raw frames, never
decoded on the way.  A message that does not decode, or has an unknown TYPE, is logged and answered
with an error where a reply is expected; it never stops a component.

Pilot link: client ROUTER (binds 127.0.0.1:random, or every address: pmgr/core/channel.py) <->
bootstrap DEALER (identity = pilot uid; connected to the first client address that answers)
  bootstrap -> client
    hello   {pilot, pid, control, size, attach,      bootstrap is up: pilot ACTIVE; nodes:
             nodes: {index: {name, state}}}          multi-node pilots, up or down
    state   [[kind, uid, state, ts, info], ...]      batched partition state updates (kind:
                                                     part)
    ustates HEAD TIMES DATA...                       unit moves in columns (pilot/updates.py),
                                                     an agent's forwarded raw
    back    {part, units: [unit dicts]}              units a partition handed back (route again)
    lost    {part, started, killed, reason}          the partition's agent died: `started` (its
                                                     start journal) may have run, the others
                                                     never did; `killed`: processes it left
    output  [[uid, node, rank, stream, text], ...]   unit output forwarded by node daemons
    synced  {cid, part, unknown: [uids]}             after a sync: the uids nothing of the pilot
                                                     knows (neither the agent nor the outbox)
    reply   {cid, ok, result | error}                answer to a cmd
    hb      {}                                       liveness, every HEARTBEAT s
    bye     {state, reason}                          the pilot's final state; bootstrap exits
  client -> bootstrap
    units   [PART_UID, BODY, DATA...]  (units, part uid, JSON list of unit dicts, and a frame
                              for each bytes value in them: a call's large arguments,
                              pilot/framed.py)
    cmd     {cid, op, args}   ops, their args and results: partition/control.py
                              (reconfig, cancel_units, stop_parts, cancel_pilot, partitions,
                              sync; attach on the control socket: a new client process
                              takes over the pilot link, once it answered a handshake)
    ack     {uids}            the store has these units' final states: the pilot lets go of
                              them (partition/outbox.py keeps outcomes until then)
    hb      {}

Agent link: bootstrap ROUTER (binds 127.0.0.1:random) <-> agent DEALER (identity = partition uid)
  agent -> bootstrap
    ready   {pid}                                    agent is up: partition ACTIVE
    ustates HEAD TIMES DATA...                       unit moves in columns (pilot/updates.py):
                                                     forwarded raw to the client; its final
                                                     moves are kept (partition/outbox.py)
    back    {part, units: [{uid}]}                   queued units handed back when stopping
    output  [[uid, node, rank, stream, text], ...]   forwarded raw to the client
    synced  {cid, part, unknown}                     answer to sync (after its state updates):
                                                     the units it has not, or no longer (ended)
    bye     {state, reason}                          the agent's last word: partition final
  bootstrap -> agent
    units   BODY DATA...                             forwarded from the client unchanged
    cancel  {uids, reason}
    sync    {cid, uids}                              say again all updates of these units
    node_lost {index, name, reason}                  units running there end FAILED (reason)
    stop    {reason, units: CANCELED | back}         end: cancel running units; queued ones are
                                                     canceled or handed back; then bye + exit

Node channels (multi-node pilots): bootstrap <-> node daemons, agents <-> node daemons; the
messages are documented in partition/node_set.py and agent/node_daemon.py, the keys that guard
them beyond loopback in pilot/security.py.  Node liveness is not on these channels: each
daemon has a pulse channel of its own to the bootstrap, `hb` both ways every liveness.PULSE
(0.5 s), a node lost after node_timeout + liveness.REJOIN s of silence while another node
is heard (pilot/liveness.py, partition/node_pulse.py); a daemon never halts for silence.

Start journal (agent -> bootstrap, through the pilot sandbox): before an agent starts a unit,
it appends the unit's uid and a newline to PILOT_SANDBOX/<partition uid>.started.  When the
agent dies, the bootstrap reads it (`lost` to the client): a unit in it may have run.

Timeouts: the client declares a pilot lost when it has heard nothing for client_timeout seconds
after it was ACTIVE; a bootstrap tears down when it has not heard from its client for
client_timeout seconds (so a new client can attach within that time); an agent that loses its
parent (ppid changes) tears down.  The bootstrap never blocks sending to its client: with no
client listening, messages queue to the high-water mark, then are dropped and counted; an
attaching client reconciles with sync.
"""

from __future__ import annotations

import json
import math

import zmq

from pilot.checks import Invalid

HEARTBEAT = 1.0  # seconds between heartbeats on the pilot link (node pulses: liveness.PULSE)

_dumps = json.JSONEncoder(separators=(",", ":")).encode
_loads = json.loads


class ProtocolError(Invalid):
    """A message that cannot be decoded or has a wrong shape (a peer's bad message)."""


def pack(obj) -> bytes:
    return _dumps(obj).encode()


def unpack(data: bytes):
    """The JSON body of a message; ProtocolError for anything else (not JSON, nested too deep
    for the parser: a hostile body never raises anything but ProtocolError)."""
    try:
        return _loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"undecodable message body: {exc}") from None
    except RecursionError:
        raise ProtocolError("message body nested too deep") from None


def msg(kind: bytes, body=None) -> list[bytes]:
    return [kind, pack({} if body is None else body)]


def drain(sock: zmq.Socket, limit: int):
    """The messages waiting on `sock`, at most `limit`, without blocking: the one receive loop
    of every component (a bounded batch per turn keeps one busy socket from starving the
    others)."""
    for _ in range(limit):
        try:
            yield sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return


def wait_ms(seconds: float) -> int:
    """A poll timeout in whole milliseconds, rounded up: pyzmq truncates a float, so a wait of
    less than 1 ms would be poll(0), and a loop waiting for a deadline would spin through its
    last millisecond instead of sleeping (the agent spun ~2.5 turns a unit that way, before
    every batch of state updates)."""
    return max(0, math.ceil(seconds * 1000))


def journal_path(pilot_sandbox: str, part_uid: str) -> str:
    """Where the agent of `part_uid` records the units it starts (one uid a line)."""
    return f"{pilot_sandbox}/{part_uid}.started"
