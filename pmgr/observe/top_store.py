"""The session's state store as `pilot top` reads it: read-only, once per refresh.

Only the client writes the store, from its writer thread in batches, so what is read here
trails the pilot by the writer's lag and stops moving when the client process is gone.  Two
readers answer the same questions (pilots, partitions, units per partition and state, the
EXECUTING units' slots, state times, the latest events):
  - SqliteReader: the embedded store, opened read-only; counts are unit_tally's rows (a scan
    of the units in a file made before it), the EXECUTING units come through the partial
    index of EXECUTING units (pmgr/store/sqlite.py: both cost nothing that grows with the session's
    finished units), and events the history's new rows since the last refresh (the first
    time, the newest EVENTS_KEPT of them, through the partial index history_events when the
    file has it: a walk back over the few event rows, not over every unit's).
  - StoreReader: any other store (MongoDB) through the StateStore API: counts by the store's
    aggregate (`unit_counts`), the latest events by `last_events`; nothing it reads grows
    with the session's finished units.
`pilot dashboard` (pmgr/observe/dashboard_data.py) reads these too, and three more: `span`
(the session's creation and the first and last ts of its history: session_span's row),
`flow` (unit_flow's rows of one series in a range of ticks, through its primary key; None where
the store keeps no such series, MongoDB: then the dashboard samples) and `holding` (the
EXECUTING units' uid, partition, node and slots, through units_executing, at most `limit`).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import deque

from pilot import states as S
from pilot.pmgr.core import sessions_dir
from pilot.pmgr.store.sqlite import expand_row
from pilot.pmgr.store.sqlite_schema import DESCRIPTION, EXECUTING_NOW, ROW
from pilot.wire import framed

EVENTS_KEPT = 200
HELD_FIELDS = (  # the description fields pmgr/store/held.py's held() reads
    "ranks",
    "cpu_processes",
    "cores_per_rank",
    "cores",
    "cpu_threads",
    "gpu_processes",
    "gpus_per_rank",
    "gpus",
)


def open_reader(session: str, url: str | None) -> SqliteReader | StoreReader:
    """The reader of `session`'s store: `url`, else $PILOT_DATABASE_URL, else its sqlite file."""
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
    if isinstance(text, bytes):  # (a description holding a call's large arguments)
        return framed.decode(text)
    return json.loads(text) if isinstance(text, str) else text


class SqliteReader:
    """The embedded store, opened read-only (a read holds up the client's writer for as long
    as it takes: each is one short query); counts are SQL aggregates, events the history's
    rows since the last refresh."""

    def __init__(self, path: str) -> None:
        if not os.path.exists(path):
            raise ValueError(f"no store at {path}")
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        self.tail: deque = deque(maxlen=EVENTS_KEPT)
        self.last_id: int | None = None
        self.tally: bool | None = None  # whether the file has unit_tally (not known yet)
        self.templates: bool | None = None  # whether units name templates (not known yet)
        self.flow_kept: bool | None = None  # whether unit_flow holds every session (not known)

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
        """unit_tally's rows (pmgr/store/sqlite.py), a few; a scan of a store without it."""
        if self.tally is None:
            found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'unit_tally'"
            self.tally = bool(self.db.execute(found).fetchone())
        if self.tally:
            rows = self.db.execute(
                "SELECT partition, state, n FROM unit_tally "
                "WHERE session = ? AND pilot = ? AND n != 0",
                (session, pilot),
            )
            return {(part or None, state or None): n for part, state, n in rows}
        rows = self.db.execute(
            "SELECT partition, state, COUNT(*) FROM units WHERE session = ? AND pilot = ? "
            "GROUP BY partition, state",
            (session, pilot),
        )
        return {(part, state): n for part, state, n in rows}

    def executing(self, session: str, pilot: str) -> list[dict]:
        """partition, slots and (of the description) what store/held.py's held reads."""
        sql = (  # (through the partial index units_executing, where the file has it)
            "SELECT partition, slots, {} AS description FROM units u "
            f"WHERE {EXECUTING_NOW} AND session = ? AND state = ? AND pilot = ?"
        )
        paths = ", ".join(f"'$.{k}'" for k in HELD_FIELDS)
        desc = DESCRIPTION if self._has_templates() else "description"
        try:  # a whole description is long (environment, arguments): only these fields
            docs = self._docs(
                sql.format(  # (a framed one, a BLOB, is read whole: pilot/wire/framed.py)
                    f"CASE WHEN typeof({desc}) = 'blob' THEN {desc} "
                    f"ELSE json_extract({desc}, {paths}) END"
                ),
                session,
                S.EXECUTING,
                pilot,
            )
        except sqlite3.OperationalError:  # an sqlite without its JSON functions
            return self._docs(sql.format(desc), session, S.EXECUTING, pilot)
        for doc in docs:
            d = doc["description"]
            if isinstance(d, dict):
                doc["description"] = {k: d[k] for k in HELD_FIELDS if k in d}
            else:
                doc["description"] = dict(zip(HELD_FIELDS, d or ()))
        return docs

    def _has_templates(self) -> bool:
        if self.templates is None:
            cols = {row[1] for row in self.db.execute("PRAGMA table_info(units)")}
            self.templates = "template" in cols
        return self.templates

    def state_times(self, uid: str) -> list[tuple[str, float]]:
        rows = self.db.execute("SELECT state, ts FROM history WHERE uid = ? ORDER BY seq", (uid,))
        return [(state, ts) for state, ts in rows]

    def events(self, session: str) -> list[dict]:
        """Pilot and partition state changes and FAILED units (with the unit's pilot and
        partition), oldest first; only the rows added since the last call are read (a
        record of units' moves is a row: its FAILED units are read out of it)."""
        bulk = self._has_templates()  # (a file with records of moves has templates too)
        select_ = (
            f"SELECT id, {ROW if bulk else ROW.split(', uids')[0]} FROM history "
            "WHERE +session = ? AND (kind != 'units' OR state = 'FAILED') "
        )
        if self.last_id is None:  # the newest ones: a scan back from the end, once
            self.last_id = self.db.execute("SELECT COALESCE(MAX(id), 0) FROM history").fetchone()[0]
            found = self.db.execute(
                select_ + "AND id <= ? ORDER BY id DESC LIMIT ?",
                (session, self.last_id, EVENTS_KEPT),
            ).fetchall()[::-1]
        else:  # the rowid range after the last one seen
            found = self.db.execute(
                select_ + "AND id > ? ORDER BY id", (session, self.last_id)
            ).fetchall()
        rows: list = []
        for row in found:
            self.last_id = max(self.last_id, row[0])
            rows += expand_row(row[1:]) if bulk else [row[1:8]]
        rows = rows[-EVENTS_KEPT:]
        uids = [r[2] for r in rows if r[1] == "units"]
        where: dict = {}
        for i in range(0, len(uids), 500):
            chunk = uids[i : i + 500]
            where.update(
                (u, (pilot, part))
                for u, pilot, part in self.db.execute(
                    "SELECT uid, pilot, partition FROM units "
                    f"WHERE uid IN ({', '.join('?' * len(chunk))})",
                    chunk,
                )
            )
        for r in rows:
            self.tail.append(dict(zip(("kind", "uid", "state", "ts", "reason"), r[1:6])))
            pilot, part = where.get(r[2], (None, None)) if r[1] == "units" else (None, None)
            self.tail[-1].update(pilot=pilot, partition=part)
        return list(self.tail)

    def span(self, session: str) -> tuple[float | None, float | None, float | None]:
        """(created, first ts, last ts) of `session`: its doc and session_span's row."""
        row = self.db.execute("SELECT created FROM sessions WHERE uid = ?", (session,)).fetchone()
        created = row[0] if row else None
        if not self._flow_kept():
            return created, None, None
        row = self.db.execute(
            "SELECT lo, hi FROM session_span WHERE session = ?", (session,)
        ).fetchone()
        return (created, row[0], row[1]) if row else (created, None, None)

    def _flow_kept(self) -> bool:
        """unit_flow and session_span hold every session of the file (it was made with them:
        pmgr/store/sqlite.py's `_kept`); else the dashboard samples."""
        if self.flow_kept is None:
            try:
                row = self.db.execute("SELECT id FROM unit_flow_since").fetchone()
            except sqlite3.OperationalError:  # a file made before unit_flow
                row = (1,)
            self.flow_kept = row is not None and not row[0]
        return self.flow_kept

    def flow(self, session: str, series: str, since: int, until: int) -> list[tuple] | None:
        """(tick, s1, s2) of unit_flow's `series` for ticks in [since, until), by tick (the
        primary key's range); None when the file does not keep unit_flow for every session."""
        if not self._flow_kept():
            return None
        return self.db.execute(
            "SELECT tick, s1, s2 FROM unit_flow "
            "WHERE session = ? AND series = ? AND tick >= ? AND tick < ? ORDER BY tick",
            (session, series, since, until),
        ).fetchall()

    def holding(self, session: str, pilot: str, limit: int) -> list[dict]:
        """uid, partition, node and slots of at most `limit` of the pilot's EXECUTING units."""
        docs = self._docs(
            "SELECT uid, partition, node, slots FROM units u "
            f"WHERE {EXECUTING_NOW} AND session = ? AND state = ? AND pilot = ? LIMIT ?",
            session,
            S.EXECUTING,
            pilot,
            limit,
        )
        for doc in docs:
            doc["node"] = _json(doc["node"])
        return docs


class StoreReader:
    """Any other store (MongoDB), through the StateStore API: counts by aggregate, events the
    latest EVENTS_KEPT (their units' docs fetched by uid), the EXECUTING units' docs."""

    def __init__(self, store) -> None:
        self.store = store

    def close(self) -> None:
        self.store.close()

    def pilots(self, session: str) -> list[dict]:
        return self.store.find("pilots", session=session)

    def partitions(self, pilot: str) -> list[dict]:
        return self.store.find("partitions", pilot=pilot)

    def unit_counts(self, session: str, pilot: str) -> dict:
        return self.store.unit_counts(session, pilot=pilot, by=("partition", "state"))

    def executing(self, session: str, pilot: str) -> list[dict]:
        return self.store.find("units", session=session, state=S.EXECUTING, pilot=pilot)

    def state_times(self, uid: str) -> list[tuple[str, float]]:
        return [(r["state"], r["ts"]) for r in self.store.history(uid=uid)]

    def events(self, session: str) -> list[dict]:
        rows = self.store.last_events(session, EVENTS_KEPT)
        units = self.store.get_many(
            "units", {r["uid"] for r in rows if r["kind"] == "units"}, ("pilot", "partition")
        )
        return [
            {
                **{k: r.get(k) for k in ("kind", "uid", "state", "ts", "reason")},
                "pilot": units.get(r["uid"], {}).get("pilot"),
                "partition": units.get(r["uid"], {}).get("partition"),
            }
            for r in rows
        ]

    def span(self, session: str) -> tuple[float | None, float | None, float | None]:
        created = (self.store.get("sessions", session) or {}).get("created")
        return (created, *self.store.history_span(session))

    def flow(self, session: str, series: str, since: int, until: int) -> None:
        return None  # (no per-second series kept here: the dashboard samples)

    def holding(self, session: str, pilot: str, limit: int) -> list[dict]:
        docs = self.store.find("units", session=session, state=S.EXECUTING, pilot=pilot)
        return [{k: d.get(k) for k in ("uid", "partition", "node", "slots")} for d in docs[:limit]]
