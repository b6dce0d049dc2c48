"""`pilot top [SESSION|PILOT|SESSION/PILOT]`: a live terminal view of one running pilot.

Which pilot: the one named; in a session, its newest running pilot; by default the newest
running pilot under the sessions directory ($PILOT_SESSIONS_DIR), found as the CLI finds them,
by a `control.json` in the pilot's sandbox whose bootstrap is alive (pilot/cli.py).  When none
runs it says so, with how the last pilot ended, and exits non-zero.

What it reads, every refresh (`--interval`, 1 s):
  - the pilot's control socket (the `partitions` command, partition/control.py, with the
    session's CURVE keys): the bootstrap's own view of its partitions (state, resources) and
    of its size and free cores.  Live whichever process runs the client, and even without one.
  - the session's state store, read-only (sqlite: SQL aggregates and the history's new rows
    since the last refresh; other stores through the StateStore API): the pilot's state and
    runtime, units per partition and state, the cores that EXECUTING units hold (their slots,
    pmgr/observe/timeline.py), and the latest events (pilot and partition state changes,
    reconfigs, FAILED units with their reason).  Only the client writes it, from its writer
    thread in batches, so it trails the pilot by the writer's lag and stops moving when the
    client process is gone (the header then says where each part came from).
How it refreshes: rich.live.Live on the terminal's alternate screen, redrawn after each poll;
between polls keys are read from stdin in cbreak mode with select() (q quits; no mouse).  The
terminal is restored on every way out (q, Ctrl-C, SIGTERM, an error).  Colour follows rich:
none with NO_COLOR or TERM=dumb.  Without cursor control (TERM=dumb, or stdout not a
terminal) a plain frame is printed whenever something changed; `--once` prints one frame.
"""

from __future__ import annotations

import glob
import json
import os
import select
import signal
import socket
import sqlite3
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import zmq

from pilot import security
from pilot import states as S
from pilot.pmgr.observe.extras import require
from pilot.pmgr.observe.timeline import STOPPED_BY_RECONFIG, held
from pilot.pmgr.session import sessions_dir
from pilot.protocol import pack, unpack

CONTROL_TIMEOUT = 2.0  # s a refresh waits for the pilot's answer
GONE_GRACE = 5.0  # s the client gets to store a pilot's end once its bootstrap is gone
UNIT_COLUMNS = (S.QUEUED, S.EXECUTING, S.DONE, S.FAILED, S.CANCELED)
EVENTS_KEPT = 200
HELD_FIELDS = (  # the description fields pmgr/observe/timeline.py's held() reads
    "ranks",
    "cpu_processes",
    "cores_per_rank",
    "cores",
    "cpu_threads",
    "gpu_processes",
    "gpus_per_rank",
    "gpus",
)
STYLE = {
    S.ACTIVE: "green",
    S.EXECUTING: "green",
    S.DONE: "blue",
    S.FAILED: "bold red",
    S.CANCELED: "yellow",
    S.PENDING: "cyan",
    S.STARTING: "cyan",
    S.QUEUED: "cyan",
}


class NothingRuns(ValueError):
    """No running pilot where the user looked (the message says how the last one ended)."""


# -- which pilot -----------------------------------------------------------------------------
@dataclass
class Target:
    session: str
    pilot: str
    control: dict | None  # control.json, plus "keys": the session's keys directory
    others: list[str] = field(default_factory=list)  # other running pilots of the session


def live_controls(session: str = "*", pilot: str = "*") -> list[tuple[float, dict]]:
    """(mtime, control record) of every running pilot matching, oldest first."""
    base = sessions_dir()
    found = []
    for path in glob.glob(os.path.join(base, session, pilot, "control.json")):
        try:
            mtime = os.stat(path).st_mtime
        except OSError:  # the pilot just ended
            continue
        control = _control(path)
        if control is not None:
            session_dir = os.path.dirname(os.path.dirname(path))
            control["session"] = os.path.basename(session_dir)
            control["keys"] = os.path.join(session_dir, "keys")
            control["path"] = path
            found.append((mtime, control))
    return sorted(found, key=lambda f: (f[0], f[1]["session"], f[1]["pilot"]))


def _control(path: str) -> dict | None:
    """The control record at `path`, None when unreadable or left by a bootstrap that died
    on this host (as pilot/cli.py judges it: another host's pilot counts as running)."""
    try:
        with open(path) as f:
            control = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(control, dict) or "endpoint" not in control:
        return None
    if control.get("host") == socket.gethostname() and isinstance(control.get("pid"), int):
        try:
            os.kill(control["pid"], 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
    return control


def resolve(name: str | None, database_url: str | None = None) -> Target:
    """The running pilot `name` (None, SESSION, PILOT or SESSION/PILOT) points at; NothingRuns
    (a ValueError) saying what the store knows when none runs there."""
    base = sessions_dir()
    try:
        os.listdir(base)
    except PermissionError:
        raise ValueError(f"cannot read {base}: permission denied") from None
    except FileNotFoundError:
        raise NothingRuns(f"no running pilot: {base} does not exist") from None
    session, pilot = None, None
    if name:
        session, _, pilot = name.rpartition("/")
        if not session and os.path.isdir(os.path.join(base, pilot)):
            session, pilot = pilot, None  # a session's name
        session, pilot = session or None, pilot or None
    url = database_url or os.environ.get("PILOT_DATABASE_URL")
    if session and not url and not os.path.isdir(os.path.join(base, session)):
        raise NothingRuns(f"no session {session!r} under {base}")
    found = live_controls(
        glob.escape(session) if session else "*", glob.escape(pilot) if pilot else "*"
    )
    if pilot and not session and len({c["session"] for _, c in found}) > 1:
        names = [f"{c['session']}/{c['pilot']}" for _, c in found]
        raise ValueError(f"pilot {pilot!r} is ambiguous; name one of {names}")
    if found:
        control = found[-1][1]
        others = [c["pilot"] for _, c in found[:-1] if c["session"] == control["session"]]
        return Target(control["session"], control["pilot"], control, others)
    raise NothingRuns(last_words(base, session, pilot, database_url))


def last_words(base: str, session: str | None, pilot: str | None, url: str | None) -> str:
    """'no running pilot ... (last: pilot.0000 DONE at ...)' for where the user looked."""
    where = f"pilot {pilot!r}" if pilot else "pilot"
    if session is None:  # the newest session (holding that pilot, when one is named)
        dirs = [
            d
            for d in glob.glob(os.path.join(base, "*", glob.escape(pilot) if pilot else ""))
            if os.path.isdir(d)
        ]
        if pilot:
            dirs = [os.path.dirname(d.rstrip(os.sep)) for d in dirs]
        dirs = [d for d in dirs if url or os.path.exists(os.path.join(d, "state.db"))]
        if not dirs:
            return f"no running {where} under {base}"
        session = os.path.basename(max(dirs, key=_last_change).rstrip(os.sep))
    try:
        reader = open_reader(session, url)
    except ValueError as exc:
        return f"no running {where} in session {session} ({exc})"
    try:
        docs = [p for p in reader.pilots(session) if pilot is None or p["uid"] == pilot]
        if not docs:
            return f"no running {where} in session {session} (the store has no such pilot)"
        doc = max(docs, key=lambda p: p["uid"])
        ts = max((t for _, t in reader.state_times(doc["uid"])), default=None)
    finally:
        reader.close()
    when = f" at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(ts))}" if ts else ""
    why = f": {doc['reason']}" if doc.get("reason") else ""
    if doc["state"] in S.FINAL:
        last = f"last: {doc['uid']} {doc['state']}{when}{why}"
    elif doc["state"] in (S.NEW, S.LAUNCHING, S.PENDING):  # a batch job still in the queue
        last = f"last: {doc['uid']} {doc['state']}{when}: its job has not started (yet)"
    else:  # the store was not told the end: its client went away first
        last = f"last: {doc['uid']} {doc['state']} in the store{when}, but its bootstrap is gone"
    return f"no running {where} in session {session} ({last})"


def _last_change(session_dir: str) -> float:
    try:
        return os.stat(os.path.join(session_dir, "state.db")).st_mtime
    except OSError:
        return os.stat(session_dir).st_mtime


# -- the store, read-only ----------------------------------------------------------------------
def open_reader(session: str, url: str | None):
    url = url or os.environ.get("PILOT_DATABASE_URL")
    if url is None:
        path = os.path.join(sessions_dir(), session, "state.db")
        if not os.path.exists(path):
            raise ValueError(f"no store at {path}; give --database-url")
        return SqliteReader(path)
    if url.startswith("sqlite:///"):
        return SqliteReader(url[len("sqlite:///") :])
    from pilot.pmgr.store import open_store

    return StoreReader(open_store(url))


def _json(text):
    return json.loads(text) if isinstance(text, str) else text


class SqliteReader:
    """The embedded store, opened read-only (readers never hold up the client's writer in WAL
    mode); counts are SQL aggregates, events the history's rows since the last refresh."""

    def __init__(self, path: str) -> None:
        if not os.path.exists(path):
            raise ValueError(f"no store at {path}")
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        self.tail: deque = deque(maxlen=EVENTS_KEPT)
        self.last_id: int | None = None

    def close(self) -> None:
        self.db.close()

    def _docs(self, sql: str, *args) -> list[dict]:
        cur = self.db.execute(sql, args)
        cols = [c[0] for c in cur.description]
        out = []
        for row in cur.fetchall():
            doc = dict(zip(cols, row))
            for key in ("description", "size", "resources", "slots"):
                if key in doc:
                    doc[key] = _json(doc[key])
            out.append(doc)
        return out

    def pilots(self, session: str) -> list[dict]:
        return self._docs(
            "SELECT uid, state, reason, description, size FROM pilots WHERE session = ?", session
        )

    def partitions(self, pilot: str) -> list[dict]:
        return self._docs(
            "SELECT uid, state, reason, description, resources FROM partitions WHERE pilot = ?",
            pilot,
        )

    def unit_counts(self, session: str, pilot: str) -> dict:
        rows = self.db.execute(
            "SELECT partition, state, COUNT(*) FROM units WHERE session = ? AND pilot = ? "
            "GROUP BY partition, state",
            (session, pilot),
        )
        return {(part, state): n for part, state, n in rows}

    def executing(self, session: str, pilot: str) -> list[dict]:
        """partition, slots and (of the description) what timeline.held reads."""
        sql = (
            "SELECT partition, slots, {} AS description FROM units "
            "WHERE session = ? AND state = ? AND pilot = ?"
        )
        paths = ", ".join(f"'$.{k}'" for k in HELD_FIELDS)
        try:  # a whole description is long (environment, arguments): only these fields
            docs = self._docs(
                sql.format(f"json_extract(description, {paths})"), session, S.EXECUTING, pilot
            )
        except sqlite3.OperationalError:  # an sqlite without its JSON functions
            return self._docs(sql.format("description"), session, S.EXECUTING, pilot)
        for doc in docs:
            doc["description"] = dict(zip(HELD_FIELDS, doc["description"] or ()))
        return docs

    def state_times(self, uid: str) -> list[tuple[str, float]]:
        rows = self.db.execute("SELECT state, ts FROM history WHERE uid = ? ORDER BY seq", (uid,))
        return [(state, ts) for state, ts in rows]

    def events(self, session: str) -> list[dict]:
        """Pilot and partition state changes and FAILED units (with the unit's pilot and
        partition), oldest first; only the rows added since the last call are read."""
        select_ = (
            "SELECT h.id, h.kind, h.uid, h.state, h.ts, h.reason, u.pilot, u.partition "
            "FROM history h LEFT JOIN units u ON h.kind = 'units' AND u.uid = h.uid "
            "WHERE +h.session = ? AND (h.kind != 'units' OR h.state = 'FAILED') "
        )
        if self.last_id is None:  # the newest ones: a scan back from the end, once
            self.last_id = self.db.execute("SELECT COALESCE(MAX(id), 0) FROM history").fetchone()[0]
            rows = self.db.execute(
                select_ + "AND h.id <= ? ORDER BY h.id DESC LIMIT ?",
                (session, self.last_id, EVENTS_KEPT),
            ).fetchall()[::-1]
        else:  # the rowid range after the last one seen
            rows = self.db.execute(
                select_ + "AND h.id > ? ORDER BY h.id", (session, self.last_id)
            ).fetchall()
        for row in rows:
            self.last_id = max(self.last_id, row[0])
            self.tail.append(dict(zip(("kind", "uid", "state", "ts", "reason"), row[1:6])))
            self.tail[-1].update(pilot=row[6], partition=row[7])
        return list(self.tail)


class StoreReader:
    """Any other store (MongoDB), through the StateStore API: each refresh reads the pilot's
    units and the session's history whole, so it suits sessions of moderate size."""

    def __init__(self, store) -> None:
        self.store = store

    def close(self) -> None:
        self.store.close()

    def pilots(self, session: str) -> list[dict]:
        return self.store.find("pilots", session=session)

    def partitions(self, pilot: str) -> list[dict]:
        return self.store.find("partitions", pilot=pilot)

    def unit_counts(self, session: str, pilot: str) -> dict:
        counts: dict = {}
        for u in self.store.find("units", session=session, pilot=pilot):
            key = (u.get("partition"), u["state"])
            counts[key] = counts.get(key, 0) + 1
        return counts

    def executing(self, session: str, pilot: str) -> list[dict]:
        return self.store.find("units", session=session, state=S.EXECUTING, pilot=pilot)

    def state_times(self, uid: str) -> list[tuple[str, float]]:
        return [(r["state"], r["ts"]) for r in self.store.history(uid=uid)]

    def events(self, session: str) -> list[dict]:
        rows = [
            r
            for r in self.store.history(session=session)
            if r["kind"] != "units" or r["state"] == S.FAILED
        ][-EVENTS_KEPT:]
        units = {
            u["uid"]: u
            for uid in {r["uid"] for r in rows if r["kind"] == "units"}
            for u in [self.store.get("units", uid) or {}]
        }
        return [
            {
                **{k: r.get(k) for k in ("kind", "uid", "state", "ts", "reason")},
                "pilot": units.get(r["uid"], {}).get("pilot"),
                "partition": units.get(r["uid"], {}).get("partition"),
            }
            for r in rows
        ]


# -- one look at the pilot ---------------------------------------------------------------------
@dataclass
class Snapshot:
    session: str
    pilot: str
    state: str
    reason: str | None
    size: dict
    free: dict | None
    runtime: float | None  # s, as described
    active_since: float | None  # epoch s
    ended_at: float | None
    # uid, state, reason, cores, gpus, busy (cores, gpus), units {state: n}, runner
    parts: list[dict]
    unrouted: dict  # units of the pilot at no partition: {state: n}
    totals: dict  # all of the pilot's units: {state: n}
    events: list[tuple[float, str, str]]  # (ts, text, style)
    live: bool  # the control socket answered
    lost: bool = False  # its bootstrap is gone, and the store was not told how it ended
    note: str = ""  # why it did not
    others: list[str] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.state in S.FINAL or self.lost


class Source:
    """Polls one pilot: its control socket and its session's store (module docstring)."""

    def __init__(self, target: Target, database_url: str | None = None) -> None:
        self.target = target
        self.reader = open_reader(target.session, database_url)
        self.keys = None
        if target.control is not None:
            try:
                self.keys = security.load(target.control["keys"])
            except OSError as exc:
                raise ValueError(
                    f"cannot read the session's keys ({exc}): only the user who runs "
                    f"{target.pilot} may watch it"
                ) from None
        self.gone: float | None = None if target.control else time.monotonic()  # since when

    def close(self) -> None:
        self.reader.close()

    def ask(self) -> tuple[dict | None, str]:
        """The bootstrap's `partitions` answer, or None and why not."""
        if self.gone is None and _control(self.target.control["path"]) is None:
            self.gone = time.monotonic()
        if self.gone is not None:
            return None, "its bootstrap is gone"
        sock = zmq.Context.instance().socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(CONTROL_TIMEOUT * 1000))
        try:
            self.keys.client(sock)
            sock.connect(self.target.control["endpoint"])
            sock.send(pack({"cid": f"top.{os.getpid()}", "op": "partitions", "args": {}}))
            reply = unpack(sock.recv())
        except zmq.Again:
            return None, f"no answer within {CONTROL_TIMEOUT:g} s"
        except zmq.ZMQError as exc:
            return None, str(exc)
        finally:
            sock.close()
        if not reply.get("ok"):
            return None, f"refused: {reply.get('error')}"
        return reply["result"], ""

    def poll(self) -> Snapshot:
        t = self.target
        listing, note = self.ask()
        doc = next((p for p in self.reader.pilots(t.session) if p["uid"] == t.pilot), None) or {}
        times = self.reader.state_times(t.pilot)
        state = doc.get("state") or (S.ACTIVE if listing else "?")
        if listing and state in S.FINAL:
            state = S.ACTIVE  # still answering: the store's word is not the last one yet
        lost = (  # gone, and its client did not write the end within the grace: it is gone too
            self.gone is not None
            and state not in S.FINAL
            and time.monotonic() - self.gone > GONE_GRACE
        )
        runtime = (doc.get("description") or {}).get("runtime")
        active = next((ts for s, ts in times if s == S.ACTIVE), None)
        ended = times[-1][1] if times and times[-1][0] in S.FINAL else None
        stored = {p["uid"]: p for p in self.reader.partitions(t.pilot)}
        parts = {}
        for p in (listing or {}).get("partitions", []) or stored.values():
            parts[p["uid"]] = p
        for uid, p in stored.items():
            parts.setdefault(uid, p)
        counts = self.reader.unit_counts(t.session, t.pilot)
        busy: dict = {}
        for u in self.reader.executing(t.session, t.pilot):
            cores, gpus = held(u.get("slots"), u.get("description") or {})
            c, g = busy.get(u.get("partition"), (0, 0))
            busy[u.get("partition")] = (c + cores, g + gpus)
        rows = []
        for uid in sorted(parts, key=_natural):
            p = parts[uid]
            r = p.get("resources") or (stored.get(uid) or {}).get("resources") or {}
            rows.append(
                {
                    "uid": uid,
                    "state": p.get("state"),
                    "reason": p.get("reason"),
                    "cores": r.get("cores", 0),
                    "gpus": r.get("gpus", 0),
                    "busy": busy.get(uid, (0, 0)),
                    "units": {s: n for (part, s), n in counts.items() if part == uid},
                    "runner": p.get("runner"),  # (the live listing's: how its agent starts units)
                }
            )
        unrouted: dict = {}
        totals: dict = {}
        for (part, s), n in counts.items():
            totals[s] = totals.get(s, 0) + n
            if part not in parts:
                unrouted[s] = unrouted.get(s, 0) + n
        n_initial = len((doc.get("description") or {}).get("parts") or ())
        return Snapshot(
            session=t.session,
            pilot=t.pilot,
            state=state,
            reason=doc.get("reason"),
            size=(listing or {}).get("size") or doc.get("size") or {},
            free=(listing or {}).get("free"),
            runtime=runtime * 60 if isinstance(runtime, (int, float)) else None,
            active_since=active,
            ended_at=ended,
            parts=rows,
            unrouted=unrouted,
            totals=totals,
            events=describe_events(self.reader.events(t.session), t.pilot, stored, n_initial),
            live=listing is not None,
            lost=lost,
            note=note,
            others=t.others,
        )


def _natural(uid: str) -> list:
    return [int(x) if x.isdigit() else x for x in uid.replace(".", " . ").split()]


def describe_events(rows: list[dict], pilot: str, parts: dict, n_initial: int) -> list[tuple]:
    """(ts, text, style) per event of `pilot`: its state changes, its partitions' (a start
    after the initial ones and a stop with the reconfig reason are shown as reconfigs), and
    its FAILED units with the reason."""
    out = []
    prefix = f"{pilot}.part."
    for r in rows:
        state, uid, reason = r["state"], r["uid"], r.get("reason")
        if r["kind"] == "pilots":
            if uid != pilot or state == S.NEW:
                continue
            text = f"{uid} {state}" + (f": {reason}" if reason else "")
        elif r["kind"] == "partitions":
            if not uid.startswith(prefix):
                continue
            index = uid[len(prefix) :]
            if state == S.NEW:
                if not index.isdigit() or int(index) < n_initial:
                    continue
                text = f"reconfig: started {uid}" + _size(parts.get(uid))
            elif state == S.CANCELED and reason == STOPPED_BY_RECONFIG:
                text = f"reconfig: stopped {uid}"
            else:
                text = f"{uid} {state}" + (f": {reason}" if reason else "")
        else:
            if r.get("pilot") not in (pilot, None):
                continue
            where = f" in {r['partition']}" if r.get("partition") else ""
            text = f"{uid} FAILED{where}" + (f": {reason}" if reason else "")
        out.append((r["ts"], text, STYLE.get(state, "")))
    return out


def _size(doc: dict | None) -> str:
    d = (doc or {}).get("description") or {}
    parts = [f"{k}={d[k]}" for k in ("size", "cores", "gpus", "nodes") if d.get(k) is not None]
    return f" ({', '.join(parts)})" if parts else ""


# -- drawing -----------------------------------------------------------------------------------
def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def render(snap: Snapshot, now: float | None = None, height: int = 40, footer: str = ""):
    """One frame: the pilot, its partitions, its units, the latest events."""
    from rich import box
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    now = time.time() if now is None else now
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
    if snap.others:
        head.append(f"\nalso running in this session: {', '.join(snap.others)}")
    if not snap.live and not snap.ended:
        head.append(f"\ncontrol socket: {snap.note}; partitions as the store has them", "yellow")

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
    lines = 13 + len(snap.parts) + units.plain.count("\n") + 2 * bool(snap.others)
    room = max(3, min(20, height - lines))
    events = Text()
    for i, (ts, text, style) in enumerate(snap.events[-room:]):
        if i:
            events.append("\n")
        events.append(time.strftime("%H:%M:%S ", time.localtime(ts)), style="dim")
        events.append(text, style=style)
    parts = [
        Panel(head, title="pilot", title_align="left"),
        table,
        units,
        Panel(events or Text("none yet", style="dim"), title="latest events", title_align="left"),
    ]
    if footer:
        parts.append(Text(footer, style="dim"))
    return Group(*parts)


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


# -- the terminal ------------------------------------------------------------------------------
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
        try:
            if console.is_interactive:
                return _live(source, console, interval)
            return _plain(source, console, interval)
        except KeyboardInterrupt:
            return 0
        finally:
            signal.signal(signal.SIGTERM, old)
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
