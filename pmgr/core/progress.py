"""A progress bar on stderr for long waits: `UnitManager.wait_units(..., progress=True)`, or
PILOT_PROGRESS=1 in the environment (progress=False wins over it).  Off by default.

What it reads: the states of the units being waited for, plain attribute reads without the
session lock (a count may lag a change by one refresh; the bar never changes a unit).  How it
refreshes: rich.progress draws on its own refresh thread, 4 times a second; each redraw first
asks its counter: a wait on listed units moves those that reached a wanted state out of the
list still pending and counts them by state (DONE / FAILED / CANCELED), a wait on all of a
manager's units reads its UnitTable's counts (the released ones are counted there, by state,
and the live ones walked), so a redraw costs what is in flight, not every unit.
The rate is rich's estimate over the last 30 s.  When the wait ends (or raises) the bar is
drawn once more with the final counts and left on the screen.

Silent when stderr is not a terminal (a log file, a pipe, a batch job): nothing is drawn or
printed at all.  Needs rich (`pip install 'pilot-partitions[observe]'`); without it the wait
goes on without a bar and says so once in the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from pilot import states as S

log = logging.getLogger("pmgr.progress")
REFRESH_PER_SECOND = 4
TRUE = ("1", "true", "yes", "on")  # PILOT_PROGRESS values that ask for the bar


def asked(progress: bool | None) -> bool:
    """Whether a bar is wanted: `progress`, else PILOT_PROGRESS (1/true/yes/on)."""
    if progress is None:
        progress = os.environ.get("PILOT_PROGRESS", "").strip().lower() in TRUE
    return bool(progress)


def unit_progress(counter, progress: bool | None = None):
    """A context manager showing a bar while the block runs, when asked for and stderr is a
    terminal (else one that does nothing); `counter()` -> (reached, total, {final state: n})
    is asked before each redraw (list_counter, table_counter)."""
    if not asked(progress) or not _is_tty(sys.stderr):
        return contextlib.nullcontext()
    try:
        return UnitProgress(counter)
    except ImportError as exc:
        log.warning("no progress bar: %s (pip install 'pilot-partitions[observe]')", exc)
        return contextlib.nullcontext()


def list_counter(units: list, wanted, there: int = 0):
    """Counts for a wait on these units (a state in `wanted`), `there` more already final: the
    units that arrived leave the list, so a count costs what is still pending."""
    pending = list(units)
    counts = dict.fromkeys(S.FINAL, 0)
    reached = there
    total = len(units) + there

    def count() -> tuple[int, int, dict]:
        nonlocal pending, reached
        still = []
        for unit in pending:
            state = unit.state
            if state in wanted:
                reached += 1
                if state in counts:
                    counts[state] += 1
            else:
                still.append(unit)
        pending = still
        return reached, total, counts

    return count


def table_counter(umgr):
    """Counts for a wait on all of a manager's units: what its UnitTable counts."""
    table = umgr.units

    def count() -> tuple[int, int, dict]:
        counts = dict(table.ledger.by_state)
        for unit in list(table.live.values()):
            if unit.state in counts:
                counts[unit.state] += 1
        return sum(counts.values()), len(table), counts

    return count


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


class UnitProgress:
    def __init__(self, counter) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.counter = counter
        self.task = None  # rich draws (and counts) once before the task is there
        bar = self

        class _Progress(Progress):  # counts the units just before each redraw
            def get_renderables(self):
                bar.count()
                yield from super().get_renderables()

        self.progress = _Progress(
            TextColumn("units"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            refresh_per_second=REFRESH_PER_SECOND,
            redirect_stdout=False,  # never move the script's own output to stderr
            redirect_stderr=False,
        )
        self.task = self.progress.add_task("units", total=counter()[1], detail="", rate="")

    def count(self) -> None:
        if self.task is None:
            return
        reached, total, counts = self.counter()
        detail = "  ".join(
            f"{name} {counts[state]}"
            for state, name in ((S.DONE, "done"), (S.FAILED, "failed"), (S.CANCELED, "canceled"))
        )
        self.progress.update(self.task, completed=reached, total=total, detail=detail)
        task = self.progress.tasks[0]
        speed = task.finished_speed or task.speed
        self.progress.update(self.task, rate=f"{speed:.1f} units/s" if speed else "- units/s")

    def __enter__(self) -> UnitProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()  # a last redraw (with the final counts), the bar is kept
