"""`pilot top [SESSION|PILOT|SESSION/PILOT]`: a live terminal view of one running pilot.

Which pilot (top_target.py): the one named; in a session, its newest running pilot; by default
the newest running pilot under the sessions directory ($PILOT_SESSIONS_DIR), found as the CLI
finds them, by a `control.json` in the pilot's sandbox whose bootstrap is alive (pilot/cli.py).
When none runs it says so, with how the last pilot ended, and exits non-zero.

What it reads, every refresh (`--interval`, 1 s), into a Snapshot (top_snapshot.py):
  - the pilot's control socket (the `partitions` command, partition/control.py, with the
    session's CURVE keys): the bootstrap's own view of its partitions (state, resources) and
    of its size and free cores.  Live whichever process runs the client, and even without one.
  - the session's state store, read-only (top_store.py; sqlite: SQL aggregates and the
    history's new rows since the last refresh; other stores through the StateStore API): the
    pilot's state and runtime, units per partition and state, the cores that EXECUTING units
    hold (their slots, pmgr/observe/timeline.py), and the latest events (pilot and partition
    state changes, reconfigs, FAILED units with their reason).  Only the client writes it, from
    its writer thread in batches, so it trails the pilot by the writer's lag and stops moving
    when the client process is gone (the header then says where each part came from).
How it refreshes (here; a frame is drawn by top_frame.py): rich.live.Live on the terminal's
alternate screen, redrawn after each poll; between polls keys are read from stdin in cbreak
mode with select() (q quits; no mouse).  The terminal is restored on every way out (q,
Ctrl-C, SIGTERM, an error).  Colour follows rich: none with NO_COLOR or TERM=dumb.  Without
cursor control (TERM=dumb, or stdout not a terminal) a plain frame is printed whenever
something changed; `--once` prints one frame.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from pilot.pmgr.observe.extras import require
from pilot.pmgr.observe.top_frame import render, signature
from pilot.pmgr.observe.top_snapshot import Source
from pilot.pmgr.observe.top_target import resolve


class Keys:
    """Keys typed at the terminal on stdin, in cbreak mode (no echo, no line buffering, Ctrl-C
    still interrupts); none when stdin is not a terminal.  Leaving the `with` block restores
    the terminal's modes as they were."""

    def __init__(self, stream) -> None:
        self.fd: int | None = None
        self.saved: tuple[int, list] | None = None
        try:
            fd = stream.fileno()
            is_tty = os.isatty(fd)
        except (AttributeError, OSError, ValueError):
            return
        if is_tty:
            import termios
            import tty

            self.saved = (fd, termios.tcgetattr(fd))
            tty.setcbreak(fd, termios.TCSANOW)
            self.fd = fd

    def read(self, timeout: float) -> str:
        """What was typed within `timeout` s ('' if nothing)."""
        if self.fd is None:
            time.sleep(max(0.0, timeout))
            return ""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return ""
        data = os.read(self.fd, 64)
        if not data:  # the terminal is gone
            self.fd = None
        return data.decode(errors="replace")

    def __enter__(self) -> Keys:
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            import termios

            fd, modes = self.saved
            self.saved = None
            termios.tcsetattr(fd, termios.TCSADRAIN, modes)


def _console():
    """stdout's console; a width of its own where rich would fall back to 80 columns."""
    import shutil

    rich_console = require("rich.console")
    probe = rich_console.Console()
    if probe.is_terminal and not probe.is_dumb_terminal:
        return rich_console.Console(highlight=False)  # follows the terminal's size
    size = shutil.get_terminal_size((120, 40))  # $COLUMNS, the terminal, else 120 columns
    return rich_console.Console(width=size.columns, height=size.lines, highlight=False)


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the finally blocks: the terminal is restored


def run(
    name: str | None,
    once: bool = False,
    interval: float = 1.0,
    database_url: str | None = None,
) -> int:
    """`pilot top`: 0 after q (or Ctrl-C), or once the pilot ended when there is no keyboard;
    NothingRuns (exit 2 in the CLI) when no pilot runs where asked."""
    require("rich")
    if not interval > 0:
        raise ValueError(f"--interval {interval!r} must be > 0")
    target = resolve(name, database_url)
    console = _console()
    source = Source(target, database_url)
    try:
        if once:
            console.print(render(source.poll(), height=console.height))
            return 0
        old = signal.signal(signal.SIGTERM, _on_sigterm)
        # Ctrl-C quits, even when started with SIGINT ignored (a job started in the background
        # of a non-interactive shell inherits that, and Python then keeps it)
        old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            if console.is_interactive:
                return _live(source, console, interval)
            return _plain(source, console, interval)
        except KeyboardInterrupt:
            return 0
        finally:
            signal.signal(signal.SIGTERM, old)
            signal.signal(signal.SIGINT, old_int)
    finally:
        source.close()


def _live(source: Source, console, interval: float) -> int:
    from rich.live import Live

    with Keys(sys.stdin) as keys:
        quits = "q quits" if keys.fd is not None else "Ctrl-C quits"

        def frame():
            snap = source.poll()
            footer = (
                f"{snap.pilot} {'is gone' if snap.lost else f'ended ({snap.state})'}; {quits}"
                if snap.ended
                else f"refreshes every {interval:g} s; {quits}"
            )
            return snap, render(snap, height=console.height, footer=footer)

        snap, first = frame()
        with Live(
            first,
            console=console,
            screen=True,  # the alternate screen: the shell's screen is back after q
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live:
            due = time.monotonic() + interval
            while not (snap.ended and keys.fd is None):
                if "q" in keys.read(due - time.monotonic()).lower():
                    return 0
                if time.monotonic() >= due:
                    snap, drawn = frame()
                    live.update(drawn, refresh=True)
                    due = time.monotonic() + interval
            return 0


def _plain(source: Source, console, interval: float) -> int:
    with Keys(sys.stdin) as keys:
        shown = None
        while True:
            snap = source.poll()
            if signature(snap) != shown:
                shown = signature(snap)
                console.print(render(snap, height=1000))
                console.print()
            if snap.ended:
                return 0
            if "q" in keys.read(interval).lower():
                return 0
