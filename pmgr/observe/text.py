"""A session's store as plain text: `pilot status SESSION` (its pilots, their partitions and
its units per state, a line each) and `pilot export SESSION` (every state change of its
history as one JSON line, oldest first).  Both hold a count per state or a page of rows, never
the session's units or history: the counts are the store's aggregate (`unit_counts`), the
rows are streamed (`iter_history`).

    session.0000  dir /home/u/.pilot/sessions/session.0000
    pilot.0000                   ACTIVE    2 node(s), 16 cores, 0 GPUs
      pilot.0000.part.0000       ACTIVE       8 cores   0 GPUs
    units: 12, DONE 10, EXECUTING 2
"""

from __future__ import annotations

import json
from typing import TextIO

from pilot.pmgr.store.base import HISTORY, StateStore

_encode = json.JSONEncoder().encode  # (json.dumps' output, without its per-call set-up)
_str = json.encoder.encode_basestring_ascii  # (what json.dumps does to a str, in C)


def print_status(store: StateStore, session: str) -> None:
    """`pilot status`: `session`'s pilots and partitions as `store` has them, and its units
    counted per state."""
    doc = store.get("sessions", session)
    if doc is None:  # (its store holds no record of it)
        raise ValueError(f"session={session!r}: the store has no record of it")
    print(f"{session}  dir {doc['dir']}")
    for p in store.find("pilots", session=session):
        size = p.get("size") or {}
        print(
            f"{p['uid']:28} {p['state']:9} {size.get('nodes', '?')} node(s), "
            f"{size.get('cores', '?')} cores, {size.get('gpus', '?')} GPUs"
            + (f"  {p['reason']}" if p.get("reason") else "")
        )
        for part in store.find("partitions", pilot=p["uid"]):
            r = part.get("resources") or {}
            print(
                f"  {part['uid']:26} {part['state']:9} {r.get('cores', 0):>4} cores "
                f"{r.get('gpus', 0):>3} GPUs"
                + (f"  {part['reason']}" if part.get("reason") else "")
            )
    counts = {state: n for (state,), n in store.unit_counts(session, by=("state",)).items()}
    total = sum(counts.values())
    print(f"units: {total}" + "".join(f", {k} {v}" for k, v in sorted(counts.items())))


def write_history(store: StateStore, session: str, out: TextIO) -> None:
    """`pilot export --format jsonl`: `session`'s history rows, one JSON object a line."""
    write = out.write
    for row in store.iter_history(session):
        write(_line(row))


def _line(row: tuple) -> str:
    """json.dumps of the row as a dict, and a newline; rows of the usual types are written
    here (3 x quicker: 10^7 units have 5 x 10^7 rows), others by json itself."""
    session, kind, uid, state, ts, reason, seq = row
    if (
        type(session) is str
        and type(kind) is str
        and type(uid) is str
        and type(state) is str
        and type(ts) is float
        and ts - ts == 0  # (not inf or nan, which json writes its own way)
        and type(seq) is int
        and (reason is None or type(reason) is str)
    ):
        why = "null" if reason is None else _str(reason)
        return (
            f'{{"session": {_str(session)}, "kind": {_str(kind)}, "uid": {_str(uid)}, '
            f'"state": {_str(state)}, "ts": {ts!r}, "reason": {why}, "seq": {seq}}}\n'
        )
    return _encode(dict(zip(HISTORY, row))) + "\n"
