"""The shape of every message body a component acts on, checked before any handler runs.

DESIGN.md: every message is validated (types, sizes, depth, uid format) before it is acted on.
`body(table, kind, frames)` decodes a message's body and checks it against its kind's check in
one of the tables below (pilot/protocol.py lists the messages); a message that fails is a bad
message (checks.Invalid: ProtocolError, or a check's ValueError naming the field).  What a
handler raises after that is a bug of our own, never a peer's: it is an internal error, logged
with its traceback (checks.InternalErrors), and the test suite fails on one.

    FROM_PILOT   what the client's channel gets from a bootstrap
    FROM_CLIENT  what a bootstrap gets from its client (units and data frames: their own checks)
    FROM_AGENT   what a bootstrap gets from an agent
    TO_AGENT     what an agent gets from its bootstrap (units: pilot/unit_record.py checks each)
    TO_DAEMON    what a node daemon gets from the bootstrap and from agents
    FROM_DAEMON  what the bootstrap gets from node daemons
A kind missing from its table is a bad message too.  `ustates` (unit moves in columns: two
frames) is checked by pilot/updates.py's `read` instead, wherever it arrives.
"""

from __future__ import annotations

from pilot import checks, framed
from pilot.protocol import ProtocolError, unpack
from pilot.validate import LINE_MAX, items, mapping, number, optional, text

# the checks of the tables: pilot/validate.py's and pilot/checks.py's themselves where they fit
# as they are (no wrapper: a message runs ~10 of them)
_number = number
_uid = checks.uid
_uids = checks.uids
_text = text
_list = items
_opt_dict = optional(mapping)
_opt_list = optional(items)
_opt_number = optional(number)


def _any(where: str, value) -> None:
    return None


def _state_batch(where: str, value) -> None:
    for i, rec in enumerate(items(where, value)):
        if not isinstance(rec, list) or len(rec) != 5:
            raise checks.bad(f"{where}[{i}]", rec, "[kind, uid, state, ts, info]")
        if rec[0] != "part":  # (units' moves come in columns: pilot/updates.py)
            raise checks.bad(f"{where}[{i}].kind", rec[0], "part")
        checks.uid(f"{where}[{i}].uid", rec[1])
        text(f"{where}[{i}].state", rec[2], optional=False)
        _number(f"{where}[{i}].ts", rec[3])
        mapping(f"{where}[{i}].info", rec[4])


def _output(where: str, value) -> None:
    for i, chunk in enumerate(items(where, value)):
        if not isinstance(chunk, list) or len(chunk) != 5:
            raise checks.bad(f"{where}[{i}]", chunk, "[uid, node, rank, stream, text]")


def fields(**spec):
    """A check of a mapping whose keys `spec` names (key -> check(where, value)); keys it does
    not name are let through (a newer peer may send more)."""

    def check(where: str, value) -> None:
        body = mapping(where, value)
        for key, field_check in spec.items():
            field_check(f"{where}.{key}", body.get(key))

    return check


FROM_PILOT = {
    b"hello": fields(pilot=_uid, control=_text, nodes=_opt_dict, size=_opt_dict),
    b"bye": fields(state=lambda w, v: text(w, v, optional=False), reason=_text),
    b"reply": fields(cid=_text),
    b"state": _state_batch,
    b"back": fields(part=_uid, units=_list),
    b"lost": fields(part=_uid, started=_uids, killed=_list, reason=_text),
    b"synced": fields(cid=_text, part=_uid, unknown=_uids),
    b"output": _output,
    b"hb": _any,
    b"taken_over": fields(by=_opt_dict),
}
FROM_CLIENT = {
    b"cmd": fields(cid=_text, op=_text, args=_opt_dict),
    b"ack": fields(uids=_uids),
    b"released": _any,
    b"hb": _any,
}
FROM_AGENT = {
    b"ready": fields(pid=_number, runner=_text),
    b"back": fields(part=_uid, units=_list),
    b"output": _output,
    b"synced": fields(cid=_text, part=_uid, unknown=_uids),
    b"bye": fields(reason=_text),
}
TO_AGENT = {
    b"units": _list,
    b"cancel": fields(uids=_uids, reason=_text),
    b"sync": fields(cid=_text, uids=_uids),
    b"node_lost": fields(index=_number, reason=_text),
    b"stop": fields(reason=_text),
}


def _req_text(w, v):
    return text(w, v, optional=False, most=LINE_MAX)


def _line(w, v):
    return text(w, v, most=LINE_MAX)


def _texts(w, v):
    for i, item in enumerate(items(w, v)):
        text(f"{w}[{i}]", item, optional=False, most=LINE_MAX)


TO_DAEMON = {
    b"exec": fields(
        uid=_uid,
        rank=_number,
        sandbox=_req_text,
        argv=_texts,
        env=_opt_dict,
        gpu_var=_text,
        cpus=_opt_list,
        files=_opt_list,
    ),
    b"kill": fields(uids=_uids, sig=_opt_number),
    b"table": fields(index=_number, width=_number),
    b"hb": _any,
    b"agent": fields(uid=_uid, argv=_texts, log=_req_text, cfg=_text, cfg_text=_line),
    b"agent_kill": fields(uid=_uid),
    b"drop": fields(part=_uid),
    b"halt": fields(reason=_text),
}
FROM_DAEMON = {
    b"up": fields(hint=_number, pid=_number, endpoint=_text, node=_opt_dict),
    b"ready": fields(index=_number, forwarded=_opt_list),
    b"agent_exit": fields(uid=_uid, code=_number),
    b"bye": fields(reason=_text, killed=_opt_number),
    b"hb": _any,
}


def body(table: dict, kind: bytes, frame: bytes | None, data=()):
    """The decoded body of a message of `kind`, checked; ProtocolError / ValueError (both
    checks.Invalid) for an unknown kind or a body of the wrong shape.  `data`: the frames of
    the bytes values the body refers to (pilot/framed.py: a `units` message's)."""
    check = table.get(kind)
    if check is None:
        raise ProtocolError(f"unknown message type {kind[:16]!r}")
    if frame is None:
        value = {}
    else:
        value = framed.loads(frame, data) if data else unpack(frame)
    check(kind.decode(errors="replace"), value)
    return value
