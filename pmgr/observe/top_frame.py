"""One frame of `pilot top`, drawn from a Snapshot (top_snapshot.py) with rich.

From the top: a panel with the pilot (state, size and free cores, how long it has been up and
has left, or how it ended; where the partitions came from when its control socket did not
answer), a table of its partitions (state, busy/total cores and GPUs, units per state), a line
per partition's reason (or, when ACTIVE, how its agent starts units) and the units' totals,
its nodes (a pilot of more than one node, while it answers: a row each up to NODE_ROWS nodes,
beyond that one character each, its shade how busy its cores are, NODES_A_LINE to a line, and a
line that sums them up), then a panel with as many of the latest events as the height leaves
room for.  rich is
imported when a frame is drawn: it is an optional extra (extras.py).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from pilot import states as S
from pilot.pmgr.observe.top_snapshot import STYLE, Snapshot

if TYPE_CHECKING:
    from rich.console import Group, RenderableType
    from rich.table import Table
    from rich.text import Text

UNIT_COLUMNS = (S.QUEUED, S.EXECUTING, S.DONE, S.FAILED, S.CANCELED)
NODE_ROWS = 16  # nodes shown a row each; beyond that, a character each
NODES_A_LINE = 64
SHADES = "·▂▄▆█"  # a node's busy cores: none, up to 1/4, 1/2, 3/4, all


def render(snap: Snapshot, now: float | None = None, height: int = 40, footer: str = "") -> Group:
    """One frame: the pilot, its partitions, its units, the latest events."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    now = time.time() if now is None else now
    units = _units_text(snap)
    nodes = _nodes_view(snap)
    lines = 13 + len(snap.parts) + units.plain.count("\n") + 2 * bool(snap.others)
    lines += (nodes.plain.count("\n") + 3) if nodes is not None else 0
    room = max(3, min(20, height - lines))
    events = _events_text(snap, room)
    parts: list[RenderableType] = [
        Panel(_header(snap, now), title="pilot", title_align="left"),
        _partition_table(snap),
        units,
    ]
    if nodes is not None:
        parts.append(Panel(nodes, title="nodes", title_align="left"))
    parts.append(
        Panel(events or Text("none yet", style="dim"), title="latest events", title_align="left")
    )
    if footer:
        parts.append(Text(footer, style="dim"))
    return Group(*parts)


def _header(snap: Snapshot, now: float) -> Text:
    """The pilot panel's text: state, size, free cores, time up and left (or how it ended)."""
    from rich.text import Text

    size, free = snap.size, snap.free
    head = Text()
    head.append(snap.pilot, style="bold")
    head.append("  ")
    head.append(snap.state, style=STYLE.get(snap.state, "bold"))
    head.append(
        f"  {size.get('nodes', '?')} node(s), {size.get('cores', '?')} cores, "
        f"{size.get('gpus', '?')} GPUs"
    )
    if free is not None:
        head.append(f"; free {free.get('cores', 0)} cores, {free.get('gpus', 0)} GPUs")
    head.append("\n")
    if snap.lost:
        head.append("its bootstrap is gone and the store was not told how it ended", "yellow")
    elif snap.ended:
        when = time.strftime("%H:%M:%S", time.localtime(snap.ended_at)) if snap.ended_at else "?"
        head.append(f"ended at {when}" + (f": {snap.reason}" if snap.reason else ""))
    elif snap.active_since is None:
        head.append("not active yet")
    else:
        ran = now - snap.active_since
        head.append(f"up {_clock(ran)}")
        if snap.runtime is not None:
            head.append(f", runtime {_clock(snap.runtime)}, left ")
            left = snap.runtime - ran
            head.append(_clock(left), style="bold red" if left < 60 else "bold")
    head.append(f"   session {snap.session}")
    grown = [j for j in snap.jobs if j.get("state") in ("asked", "queued", "joined")]
    if grown:
        said = [
            f"{j['job']} {j['state']} ({j.get('nodes')} node(s)"
            + (f": {', '.join(j['names'])}" if j.get("names") else "")
            + ")"
            for j in grown
        ]
        head.append(f"\ngrown by: {'; '.join(said)}")
    if snap.others:
        head.append(f"\nalso running in this session: {', '.join(snap.others)}")
    if not snap.live and not snap.ended:
        head.append(f"\ncontrol socket: {snap.note}; partitions as the store has them", "yellow")
    return head


def _partition_table(snap: Snapshot) -> Table:
    """A row per partition: state, busy/total cores and GPUs, its units per state."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # 78 columns with partition uids of 20 (reasons are lines below it: they are long)
    table = Table(box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)
    longest = max((len(p["uid"]) for p in snap.parts), default=9)
    table.add_column("partition", no_wrap=True, min_width=longest)
    table.add_column("state", no_wrap=True, min_width=8)
    table.add_column("cores\nbusy", justify="right", no_wrap=True)  # busy/total
    table.add_column("GPUs\nbusy", justify="right", no_wrap=True)
    for s in UNIT_COLUMNS:
        table.add_column(s, justify="right", no_wrap=True)
    for p in snap.parts:
        units = p["units"]
        table.add_row(
            p["uid"],
            Text(str(p["state"]), style=STYLE.get(p["state"], "")),
            f"{_num(p['busy'][0])}/{p['cores']}",
            f"{_num(p['busy'][1])}/{p['gpus']}",
            *(
                Text(str(units.get(s, 0)), style=STYLE[s] if units.get(s) else "dim")
                for s in UNIT_COLUMNS
            ),
        )
    return table


def _units_text(snap: Snapshot) -> Text:
    """The lines below the table: each partition's reason (or runner), the units' totals."""
    from rich.text import Text

    units = Text()
    for p in snap.parts:
        if p["reason"]:
            units.append(f"{p['uid']} {p['state']}: {p['reason']}\n", STYLE.get(p["state"], ""))
        elif p.get("runner") and p["state"] == S.ACTIVE:
            units.append(f"{p['uid']}: {p['runner']}\n", "dim")
    total = sum(snap.totals.values())
    units.append(f"units {total}: ")
    units.append(
        ", ".join(f"{s} {snap.totals[s]}" for s in _ordered(snap.totals)) if total else "none yet"
    )
    waiting = sum(snap.unrouted.values())
    if waiting:
        units.append(
            "; at the client: "
            + ", ".join(f"{s} {snap.unrouted[s]}" for s in _ordered(snap.unrouted))
        )
    return units


def _nodes_view(snap: Snapshot) -> Text | None:
    """The pilot's nodes (module header): a row each, or a character each, and a sum."""
    from rich.text import Text

    rows = snap.nodes
    if not rows:
        return None
    out = Text()
    if len(rows) <= NODE_ROWS:
        for _, name, state, cores, gpus, busy_c, busy_g, ranks, part in rows:
            out.append(f"{name:<12} ", style="bold")
            out.append(f"{state:<8} ", style="" if state == "up" else "red")
            out.append(f"cores {busy_c:>4}/{cores:<4} GPUs {busy_g:>2}/{gpus:<2} ")
            out.append(f"ranks {ranks:<5} {part or '-'}\n", style="dim" if not part else "")
    else:
        for k, row in enumerate(rows):
            if k and k % NODES_A_LINE == 0:
                out.append("\n")
            _, _, state, cores, _, busy_c, _, _, part = row
            if state != "up":
                out.append("x" if state == "down" else " ", style="red")
                continue
            share = busy_c / cores if cores else 0.0
            shade = SHADES[0 if share == 0 else min(4, 1 + int(share * 4 - 1e-9))]
            out.append(shade, style="green" if share else "dim")
        out.append("\n")
    up = [r for r in rows if r[2] == "up"]
    cores, busy_c = sum(r[3] for r in up), sum(r[5] for r in up)
    gpus, busy_g = sum(r[4] for r in up), sum(r[6] for r in up)
    full = sum(1 for r in up if r[3] and r[5] == r[3])
    idle = sum(1 for r in up if r[5] == 0 and r[6] == 0)
    down = len(rows) - len(up)
    out.append(
        f"{len(rows)} nodes: {len(up)} up" + (f", {down} down or given back" if down else "")
        + f"; {full} fully busy, {len(up) - full - idle} partly, {idle} idle; "
        f"cores {busy_c}/{cores}, GPUs {busy_g}/{gpus}, ranks {sum(r[7] for r in up)}",
        style="dim",
    )  # fmt: skip
    return out


def _events_text(snap: Snapshot, room: int) -> Text:
    """The latest `room` events, a line each."""
    from rich.text import Text

    events = Text()
    for i, (ts, text, style) in enumerate(snap.events[-room:]):
        if i:
            events.append("\n")
        events.append(time.strftime("%H:%M:%S ", time.localtime(ts)), style="dim")
        events.append(text, style=style)
    return events


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _ordered(counts: dict) -> list[str]:
    return [s for s in S.UNIT_STATES if s in counts] + sorted(set(counts) - set(S.UNIT_STATES))


def signature(snap: Snapshot) -> tuple:
    """What a plain (non-live) display prints a new frame for: everything but the clock."""
    return (
        snap.state,
        snap.live,
        snap.lost,
        json.dumps([snap.parts, snap.totals, snap.unrouted], sort_keys=True, default=str),
        len(snap.events),
        snap.events[-1:] if snap.events else None,
    )
