"""Which pilot `pilot top` watches, and what to say when none runs where the user looked.

A running pilot is found as the CLI finds one (pilot/cli.py): by a `control.json` in its
sandbox under the sessions directory ($PILOT_SESSIONS_DIR) whose bootstrap is alive; one that
died on this host left a stale file, and another host's pilot counts as running.  `resolve`
turns the user's name (none, SESSION, PILOT or SESSION/PILOT) into a Target: the newest running
pilot there.  When none runs it raises NothingRuns, whose message (`last_words`) says how the
last pilot there ended, as the session's store has it.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import time
from dataclasses import dataclass, field

from pilot import states as S
from pilot.pmgr.core import sessions_dir
from pilot.pmgr.observe.top_store import open_reader


class NothingRuns(ValueError):
    """No running pilot where the user looked (the message says how the last one ended)."""


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
        control = read_control(path)
        if control is not None:
            session_dir = os.path.dirname(os.path.dirname(path))
            control["session"] = os.path.basename(session_dir)
            control["keys"] = os.path.join(session_dir, "keys")
            control["path"] = path
            found.append((mtime, control))
    return sorted(found, key=lambda f: (f[0], f[1]["session"], f[1]["pilot"]))


def read_control(path: str) -> dict | None:
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
