"""A session's store as plain text: `pilot status SESSION` (its pilots, their partitions and
its units per state, a line each) and `pilot export SESSION` (every state change of its
history as one JSON line, oldest first).

    session.0000  dir /home/u/.pilot/sessions/session.0000
    pilot.0000                   ACTIVE    2 node(s), 16 cores, 0 GPUs
      pilot.0000.part.0000       ACTIVE       8 cores   0 GPUs
    units: 12, DONE 10, EXECUTING 2
"""

from __future__ import annotations

import json
from typing import TextIO

from pilot.pmgr.store.base import StateStore


def print_status(store: StateStore, session: str) -> None:
    """`pilot status`: `session`'s pilots and partitions as `store` has them, and its units
    counted per state."""
    doc = store.get("sessions", session)
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
    units = store.find("units", session=session)
    counts = {}
    for u in units:
        counts[u["state"]] = counts.get(u["state"], 0) + 1
    print(f"units: {len(units)}" + "".join(f", {k} {v}" for k, v in sorted(counts.items())))


def write_history(store: StateStore, session: str, out: TextIO) -> None:
    """`pilot export --format jsonl`: `session`'s history rows, one JSON object a line."""
    for row in store.history(session=session):
        out.write(json.dumps(row) + "\n")
