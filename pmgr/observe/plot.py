"""`pilot plot SESSION -o FILE`: one figure of what a session's pilots did, over seconds since
the session started.  The format follows FILE's extension: .png, .svg or .pdf.

    cores      cores busy per partition, stacked (filled steps), against the cores held by
               ACTIVE partitions (dashed) and the pilots' size (a horizontal line)
    GPUs       the same for GPUs (left out when no pilot has any)
    units      how many units are in each state (stepped lines): waiting and running ones on
               the left axis, ended ones (final states, which only grow) dashed on the right

Each reconfig is a dotted vertical line through all panels, labelled on the top one with the
partitions it stopped (-) and started (+); each batch job a pilot grew by (max_nodes, adapt)
a dash-dotted one where it was asked for and one where it was given back or ended.
Everything is drawn from the aggregated Step series of series.py, a few artists per partition
and state, so 100,000 units cost no more artists than ten; a series with more than MAX_STEPS
changes (more than the pixels can show) is drawn as the time-weighted mean of each of BINS
bins, and the axis says so.  matplotlib is imported
here only, on the Agg canvas (no display needed).

A session of more than EXACT_UNITS units is not loaded: bins.py gives the time-weighted mean
of each of BINS bins (what the dense plot above would draw), and the axes and the title say
"mean per bin" (`plot_session` picks the way): from the store's unit_flow, the series the
store writer keeps as it writes (pmgr/store/flow.py; sqlite), in bins of whole seconds; else
from the units' history rows streamed through it in O(BINS) memory per series.
"""

from __future__ import annotations

from pilot.pmgr.observe import series
from pilot.pmgr.observe.extras import require
from pilot.states import FINAL

FORMATS = ("png", "svg", "pdf")
FIGSIZE = (12.0, 9.0)  # inches, at DPI: 1200 x 900 pixels
DPI = 100
EXACT_UNITS = 50_000  # more units than this: bin means streamed from the store (bins.py)
MAX_STEPS = 4000  # a series with more changes than this is drawn as BINS bin means
BINS = 1200
STATE_COLORS = {
    "NEW": "#bbbbbb",
    "SCHEDULING": "#9467bd",
    "QUEUED": "#ff7f0e",
    "EXECUTING": "#1f77b4",
    "DONE": "#2ca02c",
    "FAILED": "#d62728",
    "CANCELED": "#7f7f7f",
}


def plot_session(store, session: str, path: str, exact_units: int = EXACT_UNITS) -> dict:
    """Draw `session` of `store` into `path`: exactly when it has at most `exact_units` units,
    else as bin means: from the store's unit_flow when it keeps one for the session (a few
    thousand rows), or streamed from its history; returns what was drawn."""
    from pilot.pmgr.observe import bins, timeline

    ext = output_format(path)
    total = sum(store.unit_counts(session, by=("state",)).values())
    flow = store.unit_flow(session) if total > exact_units else None
    binned: bins.Binned | None
    if flow is not None:
        tl = timeline.load(store, session, max_units=0)
        binned = bins.from_flow(flow, tl, BINS)
    else:
        tl = timeline.load(store, session, max_units=exact_units)
        binned = bins.aggregate(store, tl, BINS) if tl.left_out else None
    fig, drawn = figure(tl, binned)
    fig.savefig(path, format=ext)
    return drawn


def plot(tl, path: str) -> dict:
    """Draw Timeline `tl` into `path`; returns what was drawn (for the command's summary)."""
    ext = output_format(path)
    fig, drawn = figure(tl)
    fig.savefig(path, format=ext)
    return drawn


def figure(tl, binned=None):
    """(the matplotlib Figure of Timeline `tl`, what it shows: units, partitions, reconfigs and
    each partition's peak busy cores).  `binned` (a bins.Binned): draw its bin means instead
    of the steps of tl.units."""
    require("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    busy = binned.busy if binned else series.busy(tl)
    mean = f"\n(mean per {binned.width:.2g} s)" if binned else None
    cap_cores, cap_gpus = series.capacity(tl)
    with_gpus = tl.gpus > 0 or any(g.peak > 0 for _, g in busy.values())
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    rows = 3 if with_gpus else 2
    axes = fig.subplots(rows, 1, sharex=True, height_ratios=[3, 2, 3] if with_gpus else [3, 3])
    end = tl.rel(tl.end)
    colors = _colors(len(tl.partitions))
    _stacked(axes[0], busy, 0, cap_cores, tl.cores, "cores", colors, end, mean)
    if with_gpus:
        _stacked(axes[1], busy, 1, cap_gpus, tl.gpus, "GPUs", colors, end, mean)
    _states(axes[-1], binned.states if binned else series.unit_states(tl), end, mean)
    marks = [m for p in tl.pilots for m in p.job_marks()]
    for ax in axes:
        for r in tl.reconfigs:
            ax.axvline(tl.rel(r.ts), color="black", linestyle=":", linewidth=1.2)
        for ts, _ in marks:
            ax.axvline(tl.rel(ts), color="tab:purple", linestyle="-.", linewidth=1.0)
    _reconfig_labels(axes[0], tl)
    _labels(axes[0], tl, marks, 0.55)
    axes[-1].set_xlabel("seconds since the session started")
    axes[-1].set_xlim(0, max(end, 1e-3))
    n_units = max(tl.units_total, len(tl.units))
    fig.suptitle(
        f"{tl.session}: {n_units} units, {len(tl.partitions)} partitions, "
        f"{len(tl.reconfigs)} reconfig(s)"
        + (
            f"; units as means per {binned.width:.2g} s bin (of {len(binned.edges) - 1})"
            if binned
            else ""
        )
    )
    return fig, {
        "units": n_units,
        "partitions": len(tl.partitions),
        "reconfigs": len(tl.reconfigs),
        "jobs": len(marks),
        "peak_cores": {uid: cores.peak for uid, (cores, _) in busy.items()},
    }


def output_format(path: str) -> str:
    """png, svg or pdf, from `path`'s extension (ValueError naming the accepted ones)."""
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if ext not in FORMATS:
        raise ValueError(f"plot: {path!r} must end in one of {', '.join('.' + f for f in FORMATS)}")
    return ext


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _extended(grid, values: list, end: float):
    """The grid with `end` appended (the last step lasts until the session's last change)."""
    np = require("numpy")
    if not len(grid) or grid[-1] < end:
        grid = np.append(grid, end)
        values = [np.append(v, v[-1] if len(v) else 0.0) for v in values]
    return grid, values


def _drawn(grid, values: list, end: float):
    """(grid, values, binned): the steps up to `end`, or, denser than MAX_STEPS (more than
    the pixels show), the mean of each of BINS bins (areas kept)."""
    grid, values = _extended(grid, values, end)
    if len(grid) > MAX_STEPS:
        return (*series.bin_means(grid, values, end, BINS), True)
    return grid, values, False


def _stacked(ax, busy: dict, which, capacity, size, what: str, colors, end, mean=None) -> None:
    np = require("numpy")
    uids = list(busy)
    grid, values = series.on_grid([busy[u][which] for u in uids])
    grid, values, binned = _drawn(grid, values, end)
    label = f"{what} busy" + (mean or (f"\n(mean per {end / BINS:.2g} s)" if binned else ""))
    base = np.zeros(len(grid))
    for uid, vals, color in zip(uids, values, colors):
        if not vals.any():
            continue
        top = base + vals
        ax.fill_between(grid, base, top, step="post", color=color, linewidth=0, label=uid)
        base = top
    cgrid, (cvals,) = _extended(capacity.times, [capacity.values], end)
    ax.step(
        cgrid,
        cvals,
        where="post",
        color="dimgray",
        linestyle="--",
        linewidth=1,
        label="held by partitions",
    )
    if size:
        ax.axhline(size, color="firebrick", linewidth=1.5, label=f"pilot size: {size:g} {what}")
    ax.set_ylabel(label)
    ax.set_ylim(0, max(size, float(base.max()) if len(base) else 0, capacity.peak, 1) * 1.12)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)


def _states(ax, counts: dict, end: float, mean: str | None = None) -> None:
    """Units waiting or running on the left axis; units ended (final states, which only grow)
    dashed on a right axis of their own, so 100,000 DONE do not flatten 16 EXECUTING."""
    ended = ax.twinx()
    handles = []
    for state, step in counts.items():
        if step.peak <= 0:
            continue  # passed through within the same instant (NEW -> SCHEDULING)
        final = state in FINAL
        grid, (vals,), _ = _drawn(step.times, [step.values], end)
        handles += (ended if final else ax).step(
            grid,
            vals,
            where="post",
            linewidth=1.2 if final else 1.4,
            linestyle="--" if final else "-",
            color=STATE_COLORS.get(state),
            label=f"{state} (max {step.peak:g})"
            if mean is None
            else f"{state} (max mean {step.peak:.4g})",
        )
    ax.set_ylabel("units waiting / running" + (mean or ""))
    ended.set_ylabel("units ended (dashed)" + (mean or ""))
    for a in (ax, ended):
        a.set_ylim(bottom=0)
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.09, 1), fontsize=8,
                  frameon=False)  # fmt: skip
    else:
        ax.text(0.5, 0.5, "no units", transform=ax.transAxes, ha="center", color="gray")
    ax.grid(axis="y", alpha=0.3)


def _reconfig_labels(ax, tl) -> None:
    short = len(tl.pilots) <= 1
    _labels(ax, tl, [(r.ts, r.label(short)) for r in tl.reconfigs], 1.0)


def _labels(ax, tl, marks: list, y: float) -> None:
    for ts, label in marks:
        ax.annotate(
            label,
            xy=(tl.rel(ts), y),
            xycoords=("data", "axes fraction"),
            xytext=(3, -4),
            textcoords="offset points",
            rotation=90,
            va="top",
            ha="left",
            fontsize=7,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"},
        )
