"""What a node daemon (agent/node/daemon.py) does with each message it receives, by channel,
built from pilot/wire/links.py's table: the node channel (from the bootstrap), the ranks channel
(its ROUTER: agents, and a parent daemon's table) and the pulse.  Each handler is called as
handler(daemon, ident, frames, body): `ident` the sending agent's identity on the ranks channel
(None on the others), `frames` from the kind on, `body` checked by the table's check.
"""

from __future__ import annotations

import signal

from pilot.wire import links
from pilot.wire.protocol import ProtocolError


def got_exec(daemon, ident, frames: list[bytes], body: dict) -> None:
    ranks = body.pop("ranks")
    daemon.turn_ranks += len(ranks)
    for rank in ranks:  # (each keeps what the message carries once: agent/rank_env.py exec_env)
        rank["head"] = body
        daemon.exec_rank(ident, rank)  # (now, or held outside its lease, or refused)


def got_kill(daemon, ident, frames: list[bytes], body: dict) -> None:
    daemon.kill(body["uids"], int(body.get("sig", signal.SIGTERM)))


def got_table(daemon, ident, frames: list[bytes], body: dict) -> None:
    if len(frames) < 3:
        raise ProtocolError(f"table of {len(frames) - 1} frames (body, table)")
    daemon.on_table(body, frames[2])


def got_hb(daemon, ident, frames: list[bytes], body: dict) -> None:
    pass  # (word from the bootstrap: the daemon's receive loop noted it)


def got_pulse_hb(daemon, ident, frames: list[bytes], body: dict) -> None:
    daemon.echoed(body or {})  # (its lease: agent/node/daemon.py)


def got_agent(daemon, ident, frames: list[bytes], body: dict) -> None:
    daemon.start_agent(body)


def got_agent_kill(daemon, ident, frames: list[bytes], body: dict) -> None:
    daemon.kill_agent(body["uid"])


def got_drop(daemon, ident, frames: list[bytes], body: dict) -> None:
    daemon.drop(body["part"].encode())


def got_halt(daemon, ident, frames: list[bytes], body: dict) -> None:
    daemon.halting = body.get("reason") or "halt"


FROM_NODE = links.Dispatch(
    "node",
    "daemon",
    {
        b"table": got_table,
        b"agent": got_agent,
        b"agent_kill": got_agent_kill,
        b"drop": got_drop,
        b"halt": got_halt,
        b"hb": got_hb,
    },
)
FROM_RANKS = links.Dispatch(
    "ranks",
    "daemon",
    {b"exec": got_exec, b"kill": got_kill, b"hb": got_hb, b"table": got_table},
)
FROM_PULSE = links.Dispatch("pulse", "daemon", {b"hb": got_pulse_hb, b"halt": got_halt})
