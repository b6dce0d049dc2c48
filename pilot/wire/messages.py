"""The shape of every message body a component acts on, checked before any handler runs.

docs/guarantees.md ("Who may talk to a pilot"): every message is validated (types, sizes,
depth, uid format) before it is acted on.
`body(check, kind, frame)` decodes a message's body and checks it with its kind's check, one of
the named checks below, which pilot/wire/links.py's table gives each message (a kind the table does
not list for its receiver is refused before: wire.Dispatch); a message that fails is a bad
message (validate.Invalid: ProtocolError, or a check's ValueError naming the field).  What a
handler raises after that is a bug of our own, never a peer's: it is an internal error, logged
with its traceback (checks.InternalErrors), and the test suite fails on one.

`ustates` (unit moves in columns: two frames) is checked by pilot/wire/updates.py's `read` instead,
wherever it arrives.
"""

from __future__ import annotations

import re

from pilot import validate
from pilot.validate import (
    LINE_MAX,
    count,
    flag,
    items,
    mapping,
    number,
    one_of,
    optional,
    text,
)
from pilot.wire import checks, framed
from pilot.wire.protocol import unpack

# the checks of the tables: pilot/validate.py's and pilot/wire/checks.py's themselves where they fit
# as they are (no wrapper: a message runs ~10 of them)
_number = number
_uid = checks.uid
_uids = checks.uids
_text = text
_list = items
_opt_dict = optional(mapping)
_opt_uids = optional(checks.uids)
_opt_list = optional(items)
_opt_number = optional(number)


def _any(where: str, value) -> None:
    return None


def _state_batch(where: str, value) -> None:
    for i, rec in enumerate(items(where, value)):
        if not isinstance(rec, list) or len(rec) != 5:
            raise validate.bad(f"{where}[{i}]", rec, "[kind, uid, state, ts, info]")
        if rec[0] != "part":  # (units' moves come in columns: pilot/wire/updates.py)
            raise validate.bad(f"{where}[{i}].kind", rec[0], "part")
        checks.uid(f"{where}[{i}].uid", rec[1])
        text(f"{where}[{i}].state", rec[2], optional=False)
        _number(f"{where}[{i}].ts", rec[3])
        mapping(f"{where}[{i}].info", rec[4])


def _output(where: str, value) -> None:
    for i, chunk in enumerate(items(where, value)):
        if not isinstance(chunk, list) or len(chunk) != 5:
            raise validate.bad(f"{where}[{i}]", chunk, "[uid, node, rank, stream, text]")


def _loads(where: str, value) -> None:
    for i, row in enumerate(items(where, value)):
        if (
            not isinstance(row, list)
            or len(row) != 4
            or not all(type(v) is int and 0 <= v < 1 << 31 for v in row)
        ):
            raise validate.bad(f"{where}[{i}]", row, "[node index, busy cores, busy GPUs, ranks]")


def fields(**spec):
    """A check of a mapping whose keys `spec` names (key -> check(where, value)); keys it does
    not name are let through (a newer peer may send more)."""

    def check(where: str, value) -> None:
        body = mapping(where, value)
        for key, field_check in spec.items():
            field_check(f"{where}.{key}", body.get(key))

    return check


def _req_text(w, v):
    return text(w, v, optional=False, most=LINE_MAX)


def _line(w, v):
    return text(w, v, most=LINE_MAX)


def _texts(w, v):
    for i, item in enumerate(items(w, v)):
        text(f"{w}[{i}]", item, optional=False, most=LINE_MAX)


def _job(w, v):  # a job the pilot grew by: its name is a path in the sandbox (jobs/JOB)
    if not isinstance(v, str) or not re.fullmatch(r"job\.\d{4,9}", v):
        raise validate.bad(w, v, "a job name job.NNNN")
    return v


def _positions(w, v):
    for i, item in enumerate(items(w, v or [])):
        count(0, 1_000_000)(f"{w}[{i}]", item)


_JOB_STATES = ("asked", "queued", "joined", "released", "failed", "ended")


def _jobs(w, v):  # the jobs a pilot grew by (partition/growth.py Job.to_dict)
    for i, job in enumerate(items(w, v)):
        mapping(f"{w}[{i}]", job)
        _job(f"{w}[{i}].job", job.get("job"))
        count(0, 100_000)(f"{w}[{i}].nodes", job.get("nodes"))
        one_of(_JOB_STATES)(f"{w}[{i}].state", job.get("state"))
        for key in ("asked", "joined", "ended"):
            optional(number)(f"{w}[{i}].{key}", job.get(key))
        _texts(f"{w}[{i}].names", job.get("names") or [])


def _node_map(w, v):  # {index: {name, state}}: a pilot's nodes (hello, jobs)
    for key, node in mapping(w, v or {}).items():
        if not (isinstance(key, str) and key.isdigit() and len(key) < 10):
            raise validate.bad(f"{w} key", key, "a node index")
        mapping(f"{w}[{key}]", node)


# The body checks, one per message body; pilot/wire/links.py's table names which message each
# checks.
HELLO = fields(pilot=_uid, control=_text, nodes=_node_map, size=_opt_dict,
               jobs=optional(_jobs), protocol=optional(count(0, 1 << 31)), version=_text,
               python=_text)  # fmt: skip
PILOT_BYE = fields(state=lambda w, v: text(w, v, optional=False), reason=_text)
REPLY = fields(cid=_text)
STATE = _state_batch
BACK = fields(part=_uid, units=_list)
LOST = fields(part=_uid, started=_uids, killed=_list, reason=_text)
SYNCED = fields(cid=_text, part=_uid, unknown=_uids, started=_opt_uids)
OUTPUT = _output
EMPTY = _any  # hb, released: nothing in the body is used
TAKEN_OVER = fields(by=_opt_dict)
GROW = fields(job=_job, nodes=count(1, 100_000), hint=count(0), exclude=_texts,
              positions=_positions, endpoint=checks.endpoint, pulse=checks.endpoint,
              pulse_s=_opt_number, runtime=_opt_number, reason=_text)  # fmt: skip
RELEASE = fields(job=_job, reason=_text)
JOBS = fields(jobs=_jobs, nodes=_node_map)
JOB = fields(job=_job, state=one_of(("queued", "failed", "ended")), id=_text, reason=_text)
CMD = fields(cid=_text, op=_text, args=_opt_dict)
ACK = fields(uids=_uids)
READY = fields(pid=_number, runner=_text, data=optional(validate.flag()))
AGENT_BYE = fields(reason=_text)
LOAD = fields(nodes=_loads)
UNITS = _list  # (each unit: pilot/unit_record.py, at the agent)
CANCEL = fields(uids=_uids, reason=_text)
SYNC = fields(cid=_text, uids=_uids)
NODE_LOST = fields(index=_number, reason=_text)
STOP = fields(reason=_text)
GIVE_BACK = fields(uids=_uids)
DATA = fields(data=_opt_dict)

_EXEC_UNIT = optional(
    fields(name=_text, environment=_opt_dict, prof=_text, policy=_opt_dict, nodes=_text)
)
EXEC_RANK = fields(
    uid=_uid,
    rank=_number,
    ranks=_opt_number,
    sandbox=_req_text,
    argv=_texts,
    env=_opt_dict,
    cpus=_opt_list,
    files=_opt_list,
    ids=_opt_dict,
    unit=_EXEC_UNIT,
)
EXEC_MAX = 4096  # ranks in one `exec` (agent/runners/daemons.py sends at most EXEC_BATCH)


def _exec_ranks(where: str, value) -> None:
    for i, rank in enumerate(items(where, value, EXEC_MAX)):
        EXEC_RANK(f"{where}[{i}]", rank)


EXEC = fields(env=_opt_dict, node=_text, prof=_text, gpus=optional(flag()), ranks=_exec_ranks)
KILL = fields(uids=_uids, sig=_opt_number)
TABLE = fields(index=_number, width=_number)
AGENT = fields(uid=_uid, argv=_texts, log=_req_text, cfg=_text, cfg_text=_line)
AGENT_KILL = fields(uid=_uid)
DROP = fields(part=_uid)
_seq = optional(count(0, None))
PULSE_HB = fields(n=_seq, d=_seq)  # (agent/node/daemon.py: the lease)
HALT = fields(reason=_text)
UP = fields(hint=_number, pid=_number, endpoint=_text, node=_opt_dict)
DAEMON_READY = fields(index=_number, forwarded=_opt_list)
AGENT_EXIT = fields(uid=_uid, code=_number)
DAEMON_BYE = fields(reason=_text, killed=_opt_number)


def body(check, kind: bytes, frame: bytes | None, data=()):
    """The decoded body of a message of `kind`, checked by `check` (one of the above, as
    pilot/wire/links.py's table names it); ProtocolError / ValueError (both validate.Invalid) for a
    body of the wrong shape.  `data`: the frames of the bytes values the body refers to
    (pilot/wire/framed.py: a `units` message's)."""
    value: object
    if frame is None:
        value = {}
    else:
        value = framed.loads(frame, data) if data else unpack(frame)
    check(kind.decode(errors="replace"), value)
    return value
