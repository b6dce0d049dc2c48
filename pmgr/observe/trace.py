"""`pilot export SESSION --format chrome-trace`: a session as Trace Event Format JSON, for
Perfetto (ui.perfetto.dev) or chrome://tracing.

    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"session": ..., "start": ...}}

Timestamps (`ts`, `dur`) are microseconds since the session started (`otherData.start`, epoch s).

    pid 1             "pilots": one thread per pilot, its states as slices (cat "pilot");
                      every reconfig an instant event across the whole trace ("ph": "i",
                      "s": "g", cat "reconfig", args: pilot, stopped, started)
    pid 2..n+1        one process per partition (named by its uid, in uid order):
      tid 0             its states as slices and each change as an instant event
                        (cat "partition", "s": "p")
      tid 1..           one thread per node and lane ("node1 #0", "node1 #1", ...): a unit goes
                        on the lowest lane of its node that is free for its whole span, so the
                        slices of one thread never overlap
    pid n+2           "not placed": units that never reached a partition (if any)

Every unit is exactly one complete slice ("ph": "X", cat "unit", name its uid) from its first
state to its final one (to the session's last change while not final), args: state, states
([[state, ts], ...], ts in us), partition, node, slots, exit_code, reason.  Inside it one
child slice per state it passed through (cat "unit.state", named by the state), so its
EXECUTING phase is a slice of its own.  "M" events name the processes and threads.  (A unit
without history rows, which the client never writes, would have no time to be drawn at.)

A session of more than MAX_UNITS units (or `pilot export --max-units N`): the trace holds the
first MAX_UNITS to change (~125 MB of JSON, written in ~5 s whatever the session's size;
Perfetto's in-browser limit is about 2 GB), and says how many it left out in otherData
(units, units_in_trace, units_left_out) and, through `write`'s return value, on the command's
stderr.  `write` streams the events to the file as they are made, a chunk at a time, so memory
holds the loaded units, not their events.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable
from typing import TextIO

from pilot.pmgr.observe.timeline import Entity, Timeline, UnitRow
from pilot.states import FINAL

MAX_UNITS = 50_000  # units in a trace unless asked for more (~2.5 KB of JSON each: ~125 MB)
PILOTS_PID = 1  # (not 0: a trace's pid 0 may be taken for the kernel's idle task)
Micros = Callable[[float], float]  # epoch s -> us since the session started


def trace(tl: Timeline) -> dict:
    """The Trace Event Format document of Timeline `tl`."""
    return {"traceEvents": list(events(tl)), "displayTimeUnit": "ms", "otherData": other(tl)}


def events(tl: Timeline):
    """The trace's events, one at a time."""

    def us(ts: float) -> float:
        return round(max(0.0, ts - tl.start) * 1e6, 3)

    yield from _pilot_events(tl, us)
    pids = {p.uid: i for i, p in enumerate(tl.partitions, start=PILOTS_PID + 1)}
    for p in tl.partitions:
        yield from _partition_events(p, pids[p.uid], tl.end, us)
    yield from _unit_events(tl, pids, us)


def other(tl: Timeline) -> dict:
    """otherData: the session, its start, and (when some were left out) the unit counts."""
    data = {"session": tl.session, "start": tl.start}
    if tl.left_out:
        data.update(
            units=tl.units_total,
            units_in_trace=len(tl.units),
            units_left_out=tl.left_out,
            note=f"only the first {len(tl.units)} units to change are in this trace",
        )
    return data


def _pilot_events(tl: Timeline, us: Micros) -> list[dict]:
    """pid 1: a thread per pilot with its states, and every reconfig across the trace."""
    events: list[dict] = [_name("process_name", PILOTS_PID, 0, "pilots")]
    for i, pilot in enumerate(tl.pilots, start=1):
        events.append(_name("thread_name", PILOTS_PID, i, pilot.uid))
        events += _phases(pilot.history, tl.end, us, PILOTS_PID, i, "pilot")
    for r in tl.reconfigs:
        events.append(
            {
                "ph": "i",
                "s": "g",
                "name": r.label(),
                "cat": "reconfig",
                "ts": us(r.ts),
                "pid": PILOTS_PID,
                "tid": 0,
                "args": {"pilot": r.pilot, "stopped": r.stopped, "started": r.started},
            }
        )
    return events


def _partition_events(p: Entity, pid: int, end: float, us: Micros) -> list[dict]:
    """Partition `p`'s process: its name and place, its states on tid 0, each change marked."""
    events = [_name("process_name", pid, 0, p.uid)]
    events.append(
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": pid},
        }
    )
    events.append(_name("thread_name", pid, 0, "partition states"))
    events += _phases(p.history, end, us, pid, 0, "partition")
    for state, ts in p.history:
        events.append(
            {
                "ph": "i",
                "s": "p",
                "name": state,
                "cat": "partition",
                "ts": us(ts),
                "pid": pid,
                "tid": 0,
                "args": {"partition": p.uid, "reason": p.reason},
            }
        )
    return events


def _unit_events(tl: Timeline, pids: dict[str, int], us: Micros):
    """Every unit with a history, in order of its first change, on a lane of its node in its
    partition's process (units at no partition: the "not placed" process after them)."""
    unplaced = PILOTS_PID + len(pids) + 1
    lanes = Lanes()
    for u in sorted((u for u in tl.units if u.history), key=lambda u: u.history[0][1]):
        pid = pids.get(u.partition or "", unplaced)
        first, last = u.history[0][1], u.history[-1][1] if u.state in FINAL else tl.end
        tid, named = lanes.take(pid, _node_name(u.node), first, max(first, last))
        if named:
            yield _name("thread_name", pid, tid, named)
        stamps = [us(ts) for _, ts in u.history]  # (each change's us, once)
        yield _unit_slice(u, stamps, first, last, pid, tid)
        yield from _phases(u.history, last, us, pid, tid, "unit.state", stamps)
    if lanes.used(unplaced):
        yield _name("process_name", unplaced, 0, "not placed")


def _unit_slice(u: UnitRow, stamps: list, first: float, last: float, pid: int, tid: int) -> dict:
    """Unit `u`'s one complete slice, from `first` to `last`, with what is known of it
    (`stamps`: its changes' times in us)."""
    return {
        "ph": "X",
        "name": u.uid,
        "cat": "unit",
        "ts": stamps[0],
        "dur": round(max(0.0, last - first) * 1e6, 3),
        "pid": pid,
        "tid": tid,
        "args": {
            "state": u.state,
            "states": [[s, t] for (s, _), t in zip(u.history, stamps)],
            "partition": u.partition,
            "node": u.node,
            "slots": u.slots,
            "exit_code": u.exit_code,
            "reason": u.reason,
        },
    }


def write(tl: Timeline, out: TextIO, chunk: int = 2000) -> int:
    """Write the trace of `tl` to `out`, `chunk` events an encoding (one encoder call per
    event cost as much as the encoding); returns the units left out."""
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # strict JSON
    out.write('{"traceEvents":[')
    buf: list[dict] = []
    sep = ""
    for event in events(tl):
        buf.append(event)
        if len(buf) >= chunk:
            out.write(sep + encode(buf)[1:-1])
            sep, buf = ",", []
    if buf:
        out.write(sep + encode(buf)[1:-1])
    out.write('],"displayTimeUnit":"ms","otherData":' + encode(other(tl)) + "}\n")
    return tl.left_out


def _name(kind: str, pid: int, tid: int, name: str) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def _phases(
    history, end: float, us: Micros, pid: int, tid: int, cat: str, stamps: list | None = None
) -> list[dict]:
    """One slice per non-final state: from its change until the next (or `end`); `stamps`:
    the changes' times in us, if made already."""
    if stamps is None:
        stamps = [us(ts) for _, ts in history]
    out = []
    n = len(history)
    for i, (state, _) in enumerate(history):
        if state in FINAL:
            break
        start = stamps[i]
        nxt = stamps[i + 1] if i + 1 < n else us(end)
        out.append(
            {
                "ph": "X",
                "name": state,
                "cat": cat,
                "ts": start,
                "dur": max(0.0, nxt - start),
                "pid": pid,
                "tid": tid,
            }
        )
    return out


def _node_name(node) -> str:
    if node is None:
        return "no node"
    return "+".join(map(str, node)) if isinstance(node, list) else str(node)


class Lanes:
    """Threads of a process per node: a span takes the lowest lane of its node that is free
    from its start (lanes whose last span ended by then), else a new one."""

    def __init__(self) -> None:
        self.busy: dict[tuple, list] = {}  # (pid, node) -> heap of (end, lane)
        self.free: dict[tuple, list] = {}  # (pid, node) -> heap of lanes
        self.tids: dict[tuple, int] = {}  # (pid, node, lane) -> tid
        self.count: dict[int, int] = {}  # pid -> tids given (tid 0 is the partition's)

    def take(self, pid: int, node: str, start: float, end: float) -> tuple[int, str | None]:
        """(tid, thread name if the thread is new else None) for a span on `node`."""
        key = (pid, node)
        busy, free = self.busy.setdefault(key, []), self.free.setdefault(key, [])
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy) + len(free)
        heapq.heappush(busy, (end, lane))
        if (pid, node, lane) in self.tids:
            return self.tids[(pid, node, lane)], None
        tid = self.count[pid] = self.count.get(pid, 0) + 1
        self.tids[(pid, node, lane)] = tid
        return tid, f"{node} #{lane}"

    def used(self, pid: int) -> bool:
        return pid in self.count
