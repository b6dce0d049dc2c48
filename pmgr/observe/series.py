"""Step series aggregated from a Timeline (timeline.py) with numpy: what `pilot plot` draws.

A Step is a step function over seconds since the session's start: `values[i]` holds from
`times[i]` until `times[i + 1]` (the last value until the end; 0 before `times[0]`); times are
sorted and distinct.  Built by an event sweep: every interval [start, stop) of weight w is a
+w at start and a -w at stop; sorted by time, the cumulative sum is the value after each
event, and of several events at one time the last sum counts.  O(n log n) in the number of
state changes, never a Python object per point drawn.

    busy(tl)          {partition uid: (cores Step, gpus Step)} held by its running units
    capacity(tl)      (cores Step, gpus Step) held by ACTIVE partitions (all pilots)
    unit_states(tl)   {state: Step} how many units are in each state (final states add up)
    on_grid(steps)    one shared time grid and each Step's values on it (for stacking)
    bin_means(...)    step values averaged over equal time bins (what a plot too dense for its
                      pixels draws: the time-weighted mean of each bin, so areas stay exact)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pilot.pmgr.observe.extras import require
from pilot.states import ACTIVE, UNIT_STATES


@dataclass
class Step:
    times: Any  # numpy float array, seconds since the session's start (numpy: an extra)
    values: Any  # numpy float array

    @property
    def peak(self) -> float:
        return float(self.values.max()) if len(self.values) else 0.0

    def at(self, t):
        """The value at time(s) t (seconds since the session's start)."""
        np = require("numpy")
        if not len(self.times):
            return np.zeros(np.shape(t))
        idx = np.searchsorted(self.times, t, side="right") - 1
        return np.where(idx >= 0, self.values[np.maximum(idx, 0)], 0.0)


def sweep(starts, stops, weights) -> Step:
    """The sum over intervals [starts[i], stops[i]) of weights[i], as a Step."""
    np = require("numpy")
    starts, stops = np.asarray(starts, dtype=float), np.asarray(stops, dtype=float)
    weights = np.broadcast_to(np.asarray(weights, dtype=float), starts.shape)
    return accumulate(np.concatenate([starts, stops]), np.concatenate([weights, -weights]))


def accumulate(times, deltas) -> Step:
    """The running sum of `deltas`, each applied at its time, as a Step."""
    np = require("numpy")
    times, deltas = np.asarray(times, dtype=float), np.asarray(deltas, dtype=float)
    order = np.argsort(times, kind="stable")
    times, values = times[order], np.cumsum(deltas[order])
    if len(times):
        last = np.append(times[1:] != times[:-1], True)  # the last event at each time counts
        times, values = times[last], values[last]
    return Step(times, np.round(values, 9))  # sums of fractions: no -1e-17 left over


def busy(tl) -> dict:
    """{partition uid: (cores Step, gpus Step)}: what its units held while they ran."""
    spans: dict[str, list] = {p.uid: [] for p in tl.partitions}
    for u in tl.units:
        if u.partition is None or not (u.cores or u.gpus):
            continue
        for a, b in u.executing(tl.end):
            spans.setdefault(u.partition, []).append((a - tl.start, b - tl.start, u.cores, u.gpus))
    out = {}
    for uid, rows in spans.items():
        a, b, cores, gpus = zip(*rows) if rows else ((), (), (), ())
        out[uid] = (sweep(a, b, cores), sweep(a, b, gpus))
    return out


def capacity(tl) -> tuple[Step, Step]:
    """(cores, gpus) held by partitions from ACTIVE until they ended."""
    rows = []
    for p in tl.partitions:
        up = p.first(ACTIVE)
        if up is not None:
            down = p.ended if p.ended is not None else tl.end
            rows.append((up - tl.start, down - tl.start, p.cores, p.gpus))
    a, b, cores, gpus = zip(*rows) if rows else ((), (), (), ())
    return sweep(a, b, cores), sweep(a, b, gpus)


def unit_states(tl) -> dict:
    """{state: Step}: the number of units in each state; a state never visited is left out."""
    np = require("numpy")
    entered: dict[str, list] = {}
    left: dict[str, list] = {}
    for u in tl.units:
        h = u.history
        for i, (state, ts) in enumerate(h):
            entered.setdefault(state, []).append(ts)
            if i + 1 < len(h):
                left.setdefault(state, []).append(h[i + 1][1])
    order = [s for s in UNIT_STATES if s in entered] + sorted(set(entered) - set(UNIT_STATES))
    out = {}
    for state in order:
        ins = np.asarray(entered[state], dtype=float) - tl.start
        outs = np.asarray(left.get(state, ()), dtype=float) - tl.start
        signs = np.concatenate([np.ones(len(ins)), -np.ones(len(outs))])
        out[state] = accumulate(np.concatenate([ins, outs]), signs)
    return out


def on_grid(steps: list[Step]):
    """(grid, [values of each Step on it]): the union of their change times."""
    np = require("numpy")
    grid = np.unique(np.concatenate([s.times for s in steps])) if steps else np.zeros(0)
    return grid, [s.at(grid) for s in steps]


def bin_means(grid, values: list, end: float, bins: int):
    """(edges, [means]) of step values on `grid` over `bins` equal bins of [0, end]: each mean
    is the integral of the step function over its bin divided by the bin's width.  `edges`
    has bins + 1 entries and each means array too (its last value repeated, to step to end)."""
    np = require("numpy")
    edges = np.linspace(0.0, end, bins + 1)
    t = np.append(grid, max(end, grid[-1] if len(grid) else end))
    out = []
    for v in values:
        area = np.concatenate([[0.0], np.cumsum(v * np.diff(t))])  # the integral up to t[i]
        means = np.diff(np.interp(edges, t, area, left=0.0)) / np.diff(edges)
        out.append(np.append(means, means[-1]))
    return edges, out
