"""What `pilot dashboard` shows of a session: one look a poll (`Watch.poll`), as plain JSON.

A poll reads, as `pilot top` does (top_snapshot.py), nothing that grows with the session's
finished units:
  - each running pilot's control socket (the `partitions` op, pilot/control_client.py, with
    the session's CURVE keys; CONTROL_TIMEOUT): its own view of its partitions, size and free
    cores; running pilots are found by their control.json (top_target.live_controls);
  - the store, read-only (top_store.py's reader): pilots, partitions, units per partition and
    state (unit_tally), the EXECUTING units (their slots: cores and GPUs busy, the node view;
    at most NODE_UNITS of them for the node view), the latest events (FAILED units with their
    reasons, partition changes), the partitions' state times (reconfigs, timeline.py's
    find_reconfigs, read again only when a partition changed state), and the series below.
The state (`Look.state`) is the whole picture, sent when it changed; the series go as changes
(`Look.series`: points from index `from` on replace the client's).

The series (FlowSeries): cores and GPUs busy per partition, units per state, units finished
per second, as means over points of `width` s.  Where the store keeps unit_flow (sqlite,
pmgr/store/flow.py: per series and second, s1 = the sum of the changes and s2 = the sum of
change * seconds into the second), the mean over second k is V_k + s1_k - s2_k, where V_k is the
sum of s1 over the seconds before k (a value series), and the units finished in it the s1 of
the final states.  A poll reads each series' rows from the first second not settled on (the
primary key's range): seconds older than the store's last change minus SETTLE, or than now
minus LATE, are settled and folded into points (and V) for good; the rest is sent again each
poll.  Points are one second wide until there are MAX_POINTS of them, then pairs merge (width
doubles; the client gets the whole series again), so memory stays O(MAX_POINTS) for a session
of any length.  A new partition (a reconfig) makes the series be read again from the start
(rare, and bounded like the rest).  A store without unit_flow (MongoDB): SampledSeries, one
point per poll from the counts and the EXECUTING units, since the dashboard started.
"""

from __future__ import annotations

import glob
import math
import time
from collections import deque
from dataclasses import dataclass

import zmq

from pilot import states as S
from pilot.control_client import UsageError, command
from pilot.pmgr.observe.extras import require
from pilot.pmgr.observe.timeline import Entity, find_reconfigs
from pilot.pmgr.observe.top_snapshot import (
    busy_per_partition,
    describe_events,
    merged_partitions,
    partition_row,
)
from pilot.pmgr.observe.top_store import open_reader
from pilot.pmgr.observe.top_target import live_controls
from pilot.pmgr.store.flow import TICK

CONTROL_TIMEOUT = 2.0  # s a poll waits for a pilot's answer
MAX_POINTS = 1800  # points a series keeps before pairs merge
SETTLE = 5  # s: rows of seconds within this of the store's last change may still change
LATE = 60  # s: rows of seconds older than this are taken as written (a slow writer's batch)
CHUNK = 100_000  # seconds a read of the series covers at a time (a long session's first poll)
NODE_UNITS = 4096  # EXECUTING units read for the node view
NODES_SHOWN = 64  # nodes in the node view
FAILED_SHOWN = 50  # latest FAILED units listed
EVENTS_SHOWN = 30  # latest pilot / partition events listed
RATE_WINDOW = 10.0  # s over which "units/s now" is measured (from the counts)
STATE_SERIES = [f"state:{s}" for s in S.UNIT_STATES]
FINAL_SERIES = frozenset(f"state:{s}" for s in S.FINAL)


@dataclass
class Look:
    state: dict  # the whole picture (module docstring)
    series: dict  # the series' change: {reset, from, width, t, cols}


class FlowSeries:
    """The series from the store's unit_flow (module docstring)."""

    def __init__(self, reader, session: str) -> None:
        self.np = require("numpy", "dashboard")
        self.reader, self.session = reader, session
        self.names: list[str] = []
        self.g0: int | None = None  # the first point's second

    def _restart(self, names: list[str], g0: int, seconds: int) -> None:
        self.names, self.g0 = names, g0
        # a width that keeps the session's seconds so far within half of MAX_POINTS
        self.w = 1 << max(0, math.ceil(math.log2(max(1, seconds) / (MAX_POINTS // 2))))
        self.t: list[float] = []
        self.cols: dict[str, list[float]] = {n: [] for n in (*names, "rate")}
        self.partial = dict.fromkeys(self.cols, 0.0)  # sums over the open point
        self.partial_n = 0  # seconds in the open point
        self.next = g0  # the first second not settled
        self.base = dict.fromkeys(names, 0.0)  # each value series just before `next`
        self.tail: dict = {"t": [], "cols": {n: [] for n in self.cols}}  # points not settled
        self.sent = 0  # settled points the clients have

    def update(self, parts: list[str], g0: int, end: int, settled: int) -> dict:
        """Read what changed; the change for the clients.  `end`: the last second to show;
        seconds before `settled` are settled (module docstring)."""
        names = STATE_SERIES + [f"{k}:{p}" for p in parts for k in ("cores", "gpus")]
        reset = names != self.names or self.g0 != g0
        if reset:
            self._restart(names, g0, end - g0 + 1)
        before, width = len(self.t), self.w
        while True:
            # (the chunk that holds the first second not settled runs to `end`: the seconds
            # after it are the tail, at most LATE of them)
            upto = end + 1 if settled <= self.next + CHUNK else self.next + CHUNK
            means, after, rate = self._means(self.next, max(self.next, upto))
            keep = max(0, min(settled, upto) - self.next)
            self._fold(means, after, rate, keep)
            if upto >= end + 1:
                self._tails(means, rate, keep)
                break
        reset = reset or self.w != width
        start = 0 if reset else min(before, self.sent)
        self.sent = len(self.t)
        return self._change(start, reset)

    def full(self) -> dict:
        """The whole series, for a client that just came."""
        return self._change(0, True)

    def _change(self, start: int, reset: bool) -> dict:
        cols = {n: _rounded(self.cols[n][start:] + self.tail["cols"][n]) for n in self.cols}
        return {
            "reset": reset,
            "from": start,
            "width": self.w * TICK,
            "t": self.t[start:] + self.tail["t"],
            "cols": cols,
            "kept": "per second, as the store keeps it",
        }

    def _means(self, lo: int, hi: int) -> tuple[dict, dict, object]:
        """Each series' mean in each second of [lo, hi), its value after each, and the units
        that reached a final state in each."""
        np = self.np
        n = hi - lo
        means, after = {}, {}
        rate = np.zeros(n)
        for name in self.names:
            s1, s2 = np.zeros(n), np.zeros(n)
            rows = self.reader.flow(self.session, name, lo, hi) if n else None
            if rows:
                tick, r1, r2 = (np.asarray(x, dtype=float) for x in zip(*rows))
                at = tick.astype(np.int64) - lo
                s1[at], s2[at] = r1, r2
            after[name] = self.base[name] + np.cumsum(s1)
            means[name] = after[name] - s2  # V_k + s1_k - s2_k
            if name in FINAL_SERIES:
                rate += s1
        return means, after, rate

    def _fold(self, means: dict, after: dict, rate, keep: int) -> None:
        """Settle the first `keep` seconds: into the open point, closing it (and merging pairs
        of points past MAX_POINTS) as it fills."""
        assert self.g0 is not None  # (update restarted the series first)
        i = 0
        while i < keep:
            k = min(self.w - self.partial_n, keep - i)
            for name, m in means.items():
                self.partial[name] += float(m[i : i + k].sum())
            self.partial["rate"] += float(rate[i : i + k].sum())
            self.partial_n += k
            i += k
            if self.partial_n == self.w:
                self.t.append((self.g0 + len(self.t) * self.w) * TICK)
                for name, total in self.partial.items():
                    self.cols[name].append(total / self.w)
                    self.partial[name] = 0.0
                self.partial_n = 0
                if len(self.t) > MAX_POINTS:
                    self._coarsen()
        if keep:
            for name, v in after.items():
                self.base[name] = float(v[keep - 1])
            self.next += keep

    def _coarsen(self) -> None:
        """Pairs of points merge: the width doubles; an odd last point opens the next one."""
        assert self.g0 is not None  # (update restarted the series first)
        odd = len(self.t) % 2
        for name, col in self.cols.items():
            if odd:
                self.partial[name] += col[-1] * self.w
            self.cols[name] = [(col[j] + col[j + 1]) / 2 for j in range(0, len(col) - odd, 2)]
        self.partial_n += self.w if odd else 0
        self.w *= 2
        self.t = [(self.g0 + j * self.w) * TICK for j in range(len(self.t) // 2)]

    def _tails(self, means: dict, rate, keep: int) -> None:
        """The points of the seconds not settled, and the open point (sent again each poll)."""
        assert self.g0 is not None  # (update restarted the series first)
        n = len(rate)
        t: list[float] = []
        cols: dict[str, list[float]] = {name: [] for name in self.cols}
        sums, have, i = dict(self.partial), self.partial_n, keep
        while i < n or have:
            k = min(self.w - have, n - i)
            for name, m in means.items():
                sums[name] += float(m[i : i + k].sum())
            sums["rate"] += float(rate[i : i + k].sum())
            have, i = have + k, i + k
            if have == self.w or i >= n:
                t.append((self.g0 + (len(self.t) + len(t)) * self.w) * TICK)
                for name in cols:
                    cols[name].append(sums[name] / have)
                    sums[name] = 0.0
                have = 0
        self.tail = {"t": t, "cols": cols}


class SampledSeries:
    """The series sampled once a poll (a store without unit_flow: MongoDB), since the
    dashboard started; pairs of points merge past MAX_POINTS."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.cols: dict[str, list[float]] = {}
        self.width = 0.0

    def add(self, now: float, values: dict, interval: float) -> dict:
        self.width = self.width or interval
        for name in values:
            self.cols.setdefault(name, [0.0] * len(self.t))
        self.t.append(now)
        for name, col in self.cols.items():
            col.append(float(values.get(name, 0.0)))
        if len(self.t) > MAX_POINTS:
            self.t = self.t[::2]
            self.cols = {n: c[::2] for n, c in self.cols.items()}
            self.width *= 2
            return self.full()
        change = self._change(len(self.t) - 1, False)
        return change

    def full(self) -> dict:
        return self._change(0, True)

    def _change(self, start: int, reset: bool) -> dict:
        return {
            "reset": reset,
            "from": start,
            "width": self.width,
            "t": self.t[start:],
            "cols": {n: _rounded(c[start:]) for n, c in self.cols.items()},
            "kept": "sampled by the dashboard since it started (this store keeps no series)",
        }


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 3) for v in values]


class Watch:
    """Polls one session (module docstring); every method runs in one thread (the reader's
    sqlite connection is that thread's)."""

    def __init__(self, session: str, database_url: str | None = None, interval: float = 1.0):
        self.session, self.interval = session, interval
        self.reader = open_reader(session, database_url)
        if self.reader.span(session)[0] is None and not self.reader.pilots(session):
            self.reader.close()
            raise ValueError(f"no session {session!r} in its store")
        self.flow = FlowSeries(self.reader, session) if self._keeps_flow() else None
        self.sampled = SampledSeries() if self.flow is None else None
        self.reconfigs: list[dict] = []
        self.seen: dict[str, str] = {}  # pilot / partition uid -> state (find_reconfigs)
        self.finals: deque = deque()  # (monotonic s, units in a final state)
        self.controls: dict[str, dict] = {}

    def _keeps_flow(self) -> bool:
        return self.reader.flow(self.session, STATE_SERIES[0], 0, 0) is not None

    def close(self) -> None:
        self.reader.close()

    def control(self, pilot: str) -> dict | None:
        """The control record (with the session's keys) of `pilot`, if it runs."""
        return self.controls.get(pilot)

    def series(self) -> dict:
        """The whole series, for a client that just came."""
        if self.flow is not None:
            return self.flow.full()
        assert self.sampled is not None  # (no flow: sampled, __init__)
        return self.sampled.full()

    def poll(self) -> Look:
        now = time.time()
        session = self.session
        self.controls = {c["pilot"]: c for _, c in live_controls(glob.escape(session), "*")}
        pilots = sorted(self.reader.pilots(session), key=lambda p: p["uid"])
        totals: dict[str, int]
        shown, totals, changed, events = [], {}, False, self.reader.events(session)
        described = []
        for doc in pilots:
            one, stored = self._pilot(doc)
            shown.append(one)
            for s, n in one["units"].items():
                totals[s] = totals.get(s, 0) + n
            for uid, p in [(doc["uid"], doc), *stored.items()]:  # (as stored: its histories
                if self.seen.get(uid) != p.get("state"):  # are what find_reconfigs reads)
                    self.seen[uid] = p.get("state")
                    changed = True
            n_initial = len((doc.get("description") or {}).get("parts") or ())
            described += describe_events(
                [e for e in events if e["kind"] != "units"], doc["uid"], stored, n_initial
            )
        if changed:
            self.reconfigs = self._reconfigs(pilots)
        failed = [
            {k: e.get(k) for k in ("uid", "ts", "reason", "partition")}
            for e in events
            if e["kind"] == "units" and e["state"] == S.FAILED
        ][::-1][:FAILED_SHOWN]
        rate = self._rate(totals)
        parts = [p["uid"] for one in shown for p in one["partitions"]]
        live = any(one["live"] for one in shown)
        state = {
            "session": session,
            "now": now,
            "interval": self.interval,
            "pilots": shown,
            "units": totals,
            "rate": round(rate, 1),
            "failed": failed,
            "failed_total": totals.get(S.FAILED, 0),
            "events": [{"ts": ts, "text": text} for ts, text, _ in sorted(described)][
                -EVENTS_SHOWN:
            ],
            "reconfigs": self.reconfigs,
        }
        return Look(state, self._series(now, live, parts, shown, totals, rate))

    def _pilot(self, doc: dict) -> tuple[dict, dict]:
        """One pilot: its state, size, partitions (merged as `pilot top` merges them), units
        and node view; and its partitions as stored."""
        uid, session = doc["uid"], self.session
        control = self.controls.get(uid)
        listing, note = None, "not running" if control is None else ""
        if control is not None:
            try:
                reply = command(control, "partitions", {}, f"dashboard.{uid}", CONTROL_TIMEOUT)
            except (UsageError, zmq.ZMQError) as exc:
                note = str(exc)
            else:
                if reply.get("ok"):
                    listing = reply["result"]
                else:
                    note = f"refused: {reply.get('error')}"
        stored = {p["uid"]: p for p in self.reader.partitions(uid)}
        parts = merged_partitions(listing, stored)
        counts = self.reader.unit_counts(session, uid)
        busy = busy_per_partition(self.reader.executing(session, uid))
        rows = []
        for puid in sorted(parts, key=_natural):
            row = partition_row(puid, parts[puid], stored, busy, counts)
            p = parts[puid]
            desc = p.get("description") or (stored.get(puid) or {}).get("description") or {}
            res = p.get("resources") or (stored.get(puid) or {}).get("resources") or {}
            row["busy"] = list(row["busy"])
            row["nodes"] = len(res.get("nodes") or ())
            row["asked"] = {k: desc[k] for k in ("size", "cores", "gpus", "nodes") if k in desc}
            row["final"] = row["state"] in S.FINAL
            rows.append(row)
        units: dict = {}
        for (_, s), n in counts.items():
            units[s] = units.get(s, 0) + n
        state = doc.get("state") or "?"
        if listing is not None and state in S.FINAL:
            state = S.ACTIVE  # (still answering: the store's word is not the last yet)
        return {
            "uid": uid,
            "state": state,
            "reason": doc.get("reason"),
            "size": (listing or {}).get("size") or doc.get("size") or {},
            "free": (listing or {}).get("free"),
            "live": listing is not None,
            "note": note,
            "partitions": rows,
            "units": units,
            "nodes": self._node_summary(control, listing) or self._nodes(uid, parts, stored),
        }, stored

    def _node_summary(self, control: dict | None, listing: dict | None) -> dict | None:
        """A pilot of more than NODES_SHOWN nodes that answers: a row per node, as its
        bootstrap says (the `nodes` op: its agents' load, no walk of the EXECUTING units):
        [name, partition, cores, busy cores, GPUs, busy GPUs, ranks, state]; None otherwise
        (then a cell per core and GPU: `_nodes`)."""
        if listing is None or (listing.get("size") or {}).get("nodes", 1) <= NODES_SHOWN:
            return None
        assert control is not None  # (listing: its answer)
        try:
            reply = command(control, "nodes", {}, "dashboard.nodes", CONTROL_TIMEOUT)
        except (UsageError, zmq.ZMQError):
            return None
        if not reply.get("ok"):
            return None
        rows = reply["result"].get("nodes") or []
        return {
            "nodes": [],
            "summary": [[r[1], r[8], r[3], r[5], r[4], r[6], r[7], r[2]] for r in rows],
            "total": len(rows),
            "units_shown": 0,
        }

    def _nodes(self, pilot: str, parts: dict, stored: dict) -> dict:
        """Which partition holds each core and GPU of each node, and which unit uses it now."""
        layout: dict[str, dict] = {}
        cell: dict | None  # (a node's: None below for a node not in the layout)
        for puid in sorted(parts, key=_natural):
            p = parts[puid]
            if p.get("state") in S.FINAL:
                continue
            res = p.get("resources") or (stored.get(puid) or {}).get("resources") or {}
            for node in res.get("nodes") or ():
                if not isinstance(node, dict):
                    continue
                cell = layout.setdefault(str(node.get("name")), {"cores": {}, "gpus": {}})
                for kind in ("cores", "gpus"):
                    for i in node.get(kind) or ():
                        cell[kind][str(i)] = [puid, None]
        units = self.reader.holding(self.session, pilot, NODE_UNITS)
        for u in units:
            nodes, ranks = u.get("node"), u.get("slots")
            ranks = ranks if isinstance(ranks, list) else [ranks]
            names: list = nodes if isinstance(nodes, list) else [nodes] * len(ranks)
            for name, rank in zip(names, ranks):
                cell = layout.get(str(name))
                if cell is None or not isinstance(rank, dict):
                    continue
                for kind, key in (("cores", "cpus"), ("gpus", "gpus")):
                    for i in rank.get(key) or ():
                        slot = cell[kind].get(str(i))
                        if slot is not None:
                            slot[1] = u["uid"]
        names = sorted(layout, key=_natural)
        return {
            "nodes": [
                {
                    "name": name,
                    "cores": [[i, *v] for i, v in layout[name]["cores"].items()],
                    "gpus": [[i, *v] for i, v in layout[name]["gpus"].items()],
                }
                for name in names[:NODES_SHOWN]
            ],
            "total": len(names),
            "units_shown": len(units),
        }

    def _reconfigs(self, pilots: list[dict]) -> list[dict]:
        """The session's reconfigs, read from its partitions' histories (timeline.py)."""
        ents, parts = [], []
        for doc in pilots:
            ents.append(_entity(doc, self.reader.state_times(doc["uid"])))
            for p in self.reader.partitions(doc["uid"]):
                parts.append(_entity({**p, "pilot": doc["uid"]}, self.reader.state_times(p["uid"])))
        return [
            {
                "pilot": r.pilot,
                "ts": r.ts,
                "stopped": r.stopped,
                "started": r.started,
                "label": r.label(),
            }
            for r in find_reconfigs(ents, parts)
        ]

    def _rate(self, totals: dict) -> float:
        """Units that reached a final state per second, over the last RATE_WINDOW s."""
        now = time.monotonic()
        self.finals.append((now, sum(totals.get(s, 0) for s in S.FINAL)))
        while len(self.finals) > 2 and now - self.finals[1][0] >= RATE_WINDOW:
            self.finals.popleft()
        (t0, n0), (t1, n1) = self.finals[0], self.finals[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def _series(
        self, now: float, live: bool, parts: list, pilots: list, totals: dict, rate: float
    ) -> dict:
        """The series' change since the last poll (module docstring)."""
        if self.flow is None:
            values = {f"state:{s}": n for s, n in totals.items()}
            for p in pilots:
                for row in p["partitions"]:
                    values[f"cores:{row['uid']}"] = row["busy"][0]
                    values[f"gpus:{row['uid']}"] = row["busy"][1]
            values["rate"] = rate
            assert self.sampled is not None  # (no flow: sampled, __init__)
            return self.sampled.add(now, values, self.interval)
        created, lo, hi = self.reader.span(self.session)
        starts = [t for t in (created, lo) if t is not None]
        first = min(starts) if starts else now
        last = hi if hi is not None else first
        g0 = int(first // TICK)
        end = max(g0, int(now // TICK) if live else int(last // TICK))
        settled = max(int(last // TICK) - SETTLE, int(now // TICK) - LATE)
        if not live and now - last > LATE:
            settled = end + 1  # (an ended session: all of it is written)
        return self.flow.update(sorted(set(parts), key=_natural), g0, end, settled)


def _entity(doc: dict, times: list) -> Entity:
    return Entity(
        uid=doc["uid"],
        state=doc.get("state"),
        history=times,
        reason=doc.get("reason"),
        pilot=doc.get("pilot"),
        description=doc.get("description") or {},
    )


def _natural(uid: str) -> list:
    return [int(x) if x.isdigit() else x for x in uid.replace(".", " . ").split()]
