"""Time-weighted means per time bin: what `pilot plot` draws of a session with more units than
plot.EXACT_UNITS (series.py's exact steps hold every state change in memory; this holds
O(bins) numbers per series).  `from_flow` computes them from the per-second series the sqlite
store's writer keeps (pmgr/store/flow.py: a few thousand rows, bins of whole seconds);
`aggregate` streams the units' history rows (MongoDB, a session older than its file's
series; below).

    aggregate(store, tl, bins) -> Binned
        edges       bins + 1 times, seconds since the session's start (0 .. its end)
        busy        {partition uid: (cores Step, gpus Step)}: the mean cores / GPUs its
                    EXECUTING units held in each bin
        states      {state: Step}: the mean number of units in each state in each bin
        width       the bins' width, s

A bin's mean is the integral of the step function over the bin divided by its width: the same
numbers series.bin_means gives for the exact steps (plot.py draws those for a dense session),
computed without the steps.  How: every interval [a, b) of weight w is an event (a, +w) and an
event (b, -w); for the events that fall in bin k, S1[k] = sum of v and S2[k] = sum of v * t.
The integral from 0 to edge e_j is then C1[j-1] * e_j - C2[j-1] (C: cumulative sums over the
bins before j), since an event at t < e_j adds v * (e_j - t) to it.  O(1) per event.

The rows are the units' history, streamed oldest first (`iter_history`); a unit is in a state
from its row until its next one (until the session's end for its last state), and holds what
store/held.py says from EXECUTING until its next row.  Each row is a +1 for its state and a
-1 for the unit's state before it; the -1 at the end of a last state falls on the last edge,
where it changes no bin, so it is not added.  Memory: the bins, plus the last row of
each unit that has not reached a final state at that point of the stream (as many as were in
flight at once: streaming submission keeps that to its window) and a page of EXECUTING spans
whose units' docs are fetched (`get_many`) a page at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pilot.pmgr.observe.extras import require
from pilot.pmgr.observe.series import Step
from pilot.pmgr.observe.timeline import Timeline
from pilot.pmgr.store.base import PAGE
from pilot.pmgr.store.flow import TICK
from pilot.pmgr.store.held import held
from pilot.states import EXECUTING, FINAL, UNIT_STATES


@dataclass
class Binned:
    edges: object
    busy: dict
    states: dict
    width: float


class _Sums:
    """S1 and S2 of the module docstring, per series key, filled a page of events at a time."""

    def __init__(self, start: float, width: float, bins: int) -> None:
        self.np = require("numpy")
        self.start, self.width, self.bins = start, width, bins
        self.keys: dict = {}
        self.s1 = self.np.zeros((0, bins))
        self.s2 = self.np.zeros((0, bins))
        self.buf: list = []  # (key index, epoch s, weight)

    def index(self, key) -> int:
        """Series `key`'s row (a new one for a new key)."""
        i = self.keys.get(key)
        if i is None:
            i = self.keys[key] = len(self.keys)
        return i

    def add(self, key, a: float, b: float, w: float) -> None:
        """An interval [a, b) (epoch s) of weight `w` in series `key`."""
        i = self.index(key)
        self.buf.append((i, a, w))
        self.buf.append((i, b, -w))
        if len(self.buf) >= 2 * PAGE:
            self.flush()

    def flush(self) -> None:
        np = self.np
        if not self.buf:
            return
        idx, t, v = (np.asarray(x) for x in zip(*self.buf))
        self.buf.clear()
        t = t.astype(float) - self.start
        k = np.clip((t // self.width).astype(np.int64), 0, self.bins - 1)
        n = len(self.keys)
        if self.s1.shape[0] < n:
            grow = np.zeros((n - self.s1.shape[0], self.bins))
            self.s1, self.s2 = np.vstack([self.s1, grow]), np.vstack([self.s2, grow])
        flat = idx.astype(np.int64) * self.bins + k
        size = n * self.bins
        self.s1 += np.bincount(flat, weights=v, minlength=size).reshape(n, self.bins)
        self.s2 += np.bincount(flat, weights=v * t, minlength=size).reshape(n, self.bins)

    def means(self, key, edges):
        """The mean of series `key` in each bin, its last repeated (bins + 1 values)."""
        np = self.np
        self.flush()
        i = self.keys.get(key)
        if i is None:
            return np.zeros(len(edges))
        c1, c2 = np.cumsum(self.s1[i]), np.cumsum(self.s2[i])
        area = np.concatenate([[0.0], c1 * edges[1:] - c2])
        m = np.round(np.diff(area) / self.width, 9)
        return np.append(m, m[-1])


def aggregate(store, tl: Timeline, bins: int) -> Binned:
    """The busy cores / GPUs per partition and the units per state of `tl`'s session, as means
    over `bins` equal bins of [0, its end] (module docstring)."""
    np = require("numpy")
    span = max(tl.end - tl.start, 1e-9)
    width = span / bins
    edges = np.linspace(0.0, span, bins + 1)
    sums = _Sums(tl.start, width, bins)
    index, buf, keys = sums.index, sums.buf, sums.keys
    executing = index(EXECUTING)
    last: dict[str, tuple] = {}  # uid -> (seq, its state's series, ts) of its latest row
    spans: list[tuple] = []  # (uid, a, b): EXECUTING, its doc not read yet
    for _, _, uid, state, ts, _, seq in store.iter_history(tl.session, kinds=("units",)):
        i = keys.get(state)
        if i is None:
            i = index(state)
        prev = last.get(uid)
        if prev is None:
            buf.append((i, ts, 1.0))
        else:
            if seq < prev[0]:  # (MongoDB: rows of one ts in no set order: entered and
                continue  # left at that ts, nothing to add)
            buf.append((prev[1], ts, -1.0))  # left its state
            buf.append((i, ts, 1.0))
            if prev[1] == executing:
                spans.append((uid, prev[2], ts))
                if len(spans) >= PAGE:
                    _held(store, spans, sums)
                    spans = []
        if state in FINAL:  # (its count holds to the end: a -1 there adds nothing)
            last.pop(uid, None)
        else:
            last[uid] = (seq, i, ts)
        if len(buf) >= PAGE:
            sums.flush()
    for uid, (_, i, ts) in last.items():  # EXECUTING in the store: until the end
        if i == executing:
            spans.append((uid, ts, tl.end))
    _held(store, spans, sums)
    known = [p.uid for p in tl.partitions]
    others = sorted({k[1] for k in sums.keys if isinstance(k, tuple)} - set(known))
    busy = {
        p: (
            Step(edges, sums.means(("cores", p), edges)),
            Step(edges, sums.means(("gpus", p), edges)),
        )
        for p in known + others
    }
    seen = [k for k in sums.keys if isinstance(k, str)]
    order = [s for s in UNIT_STATES if s in seen] + sorted(set(seen) - set(UNIT_STATES))
    states = {s: Step(edges, sums.means(s, edges)) for s in order}
    return Binned(edges, busy, states, width)


def from_flow(rows: list[tuple], tl: Timeline, bins: int) -> Binned:
    """`aggregate`'s series from the store's unit_flow rows (series, tick, s1, s2: see
    pmgr/store/flow.py), in at most `bins` bins of whole ticks from the tick of the session's
    start (the first edge up to a tick before 0); exact at every edge.  O(rows)."""
    np = require("numpy")
    e0 = math.floor(tl.start / TICK) * TICK
    ticks = max(1, math.ceil((tl.end - e0) / TICK))
    per = math.ceil(ticks / bins)  # ticks a bin
    width = per * TICK
    n = math.ceil(ticks / per)
    ends = width * np.arange(1, n + 1)  # the bins' right edges, s since e0
    by_series: dict[str, list] = {}
    for name, tick, s1, s2 in rows:
        by_series.setdefault(name, []).append((tick, s1, s2))

    def means(name: str):
        got = by_series.get(name)
        if not got:
            return np.zeros(n + 1)
        tick, s1, s2 = (np.asarray(x, dtype=float) for x in zip(*got))
        into = tick * TICK - e0  # the tick's start, s since e0
        k = np.clip((into // width).astype(np.int64), 0, n - 1)
        c1 = np.cumsum(np.bincount(k, weights=s1, minlength=n))
        c2 = np.cumsum(np.bincount(k, weights=s2 + s1 * into, minlength=n))  # sum v * (t - e0)
        area = np.concatenate([[0.0], c1 * ends - c2])
        m = np.round(np.diff(area) / width, 9)
        return np.append(m, m[-1])

    edges = np.concatenate([[0.0], ends]) + (e0 - tl.start)
    known = [p.uid for p in tl.partitions]
    named = {s.split(":", 1)[1] for s in by_series if s.startswith(("cores:", "gpus:"))}
    busy = {
        p: (Step(edges, means("cores:" + p)), Step(edges, means("gpus:" + p)))
        for p in known + sorted(named - set(known))
    }
    seen = [s.split(":", 1)[1] for s in by_series if s.startswith("state:")]
    order = [s for s in UNIT_STATES if s in seen] + sorted(set(seen) - set(UNIT_STATES))
    states = {s: Step(edges, means("state:" + s)) for s in order}
    return Binned(edges, busy, states, width)


def _held(store, spans: list[tuple], sums: _Sums) -> None:
    """Add each EXECUTING span's cores and GPUs to its partition's series."""
    if not spans:
        return
    docs = store.get_many(
        "units", {uid for uid, _, _ in spans}, ("partition", "slots", "description")
    )
    for uid, a, b in spans:
        doc = docs.get(uid)
        if doc is None or doc.get("partition") is None:
            continue
        cores, gpus = held(doc.get("slots"), doc.get("description") or {})
        if cores:
            sums.add(("cores", doc["partition"]), a, b, cores)
        if gpus:
            sums.add(("gpus", doc["partition"]), a, b, gpus)
