"""The embedded state store: one sqlite file (WAL mode) in the session directory."""

from __future__ import annotations

import json
import sqlite3
import threading

from pmgr.store.base import KINDS, Batch, StateStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (uid TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pilots (uid TEXT PRIMARY KEY, session TEXT, state TEXT, doc TEXT);
CREATE TABLE IF NOT EXISTS partitions (uid TEXT PRIMARY KEY, session TEXT, pilot TEXT,
                                       state TEXT, doc TEXT);
CREATE TABLE IF NOT EXISTS units (uid TEXT PRIMARY KEY, session TEXT, pilot TEXT,
                                  partition TEXT, state TEXT, doc TEXT);
CREATE TABLE IF NOT EXISTS history (id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT,
                                    kind TEXT, uid TEXT, state TEXT, ts REAL, reason TEXT);
CREATE INDEX IF NOT EXISTS history_uid ON history (uid);
CREATE INDEX IF NOT EXISTS history_session ON history (session);
CREATE INDEX IF NOT EXISTS units_session_state ON units (session, state);
CREATE INDEX IF NOT EXISTS units_partition ON units (partition);
CREATE INDEX IF NOT EXISTS partitions_pilot ON partitions (pilot);
CREATE INDEX IF NOT EXISTS pilots_session ON pilots (session);
"""
_COLUMNS = {
    "sessions": ("uid",),
    "pilots": ("uid", "session", "state"),
    "partitions": ("uid", "session", "pilot", "state"),
    "units": ("uid", "session", "pilot", "partition", "state"),
}


class SqliteStore(StateStore):
    def __init__(self, url: str) -> None:
        self.url = url
        self.path = url[len("sqlite:///") :]  # sqlite:///rel.db, sqlite:////abs/path.db
        self.db = sqlite3.connect(
            self.path, timeout=10, check_same_thread=False, isolation_level=None
        )
        self.lock = threading.Lock()
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)

    def write_batch(self, batch: Batch) -> None:
        with self.lock:
            self.db.execute("BEGIN")
            try:
                for kind in KINDS:
                    docs = batch.docs[kind]
                    if not docs:
                        continue
                    cols = _COLUMNS[kind]
                    sql = (
                        f"INSERT OR REPLACE INTO {kind} ({', '.join(cols)}, doc) "
                        f"VALUES ({', '.join('?' * (len(cols) + 1))})"
                    )
                    self.db.executemany(
                        sql,
                        [tuple(d.get(c) for c in cols) + (json.dumps(d),) for d in docs.values()],
                    )
                if batch.history:
                    self.db.executemany(
                        "INSERT INTO history (session, kind, uid, state, ts, "
                        "reason) VALUES (?, ?, ?, ?, ?, ?)",
                        batch.history,
                    )
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def get(self, kind: str, uid: str) -> dict | None:
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} must be one of {KINDS}")
        with self.lock:
            row = self.db.execute(f"SELECT doc FROM {kind} WHERE uid = ?", (uid,)).fetchone()
        return json.loads(row[0]) if row else None

    def find(self, kind: str, **where) -> list[dict]:
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} must be one of {KINDS}")
        bad = set(where) - set(_COLUMNS[kind])
        if bad:
            raise ValueError(
                f"find({kind}): cannot filter on {sorted(bad)}; accepted: {_COLUMNS[kind]}"
            )
        sql = f"SELECT doc FROM {kind}"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        with self.lock:
            rows = self.db.execute(sql + " ORDER BY uid", tuple(where.values())).fetchall()
        return [json.loads(r[0]) for r in rows]

    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]:
        sql, args = "SELECT session, kind, uid, state, ts, reason FROM history", []
        cond = []
        if uid is not None:
            cond.append("uid = ?")
            args.append(uid)
        if session is not None:
            cond.append("session = ?")
            args.append(session)
        if cond:
            sql += " WHERE " + " AND ".join(cond)
        with self.lock:
            rows = self.db.execute(sql + " ORDER BY id", args).fetchall()
        keys = ("session", "kind", "uid", "state", "ts", "reason")
        return [dict(zip(keys, r)) for r in rows]

    def close(self) -> None:
        with self.lock:
            self.db.close()
