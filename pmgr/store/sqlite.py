"""The embedded state store: one sqlite file (rollback journal) in the session directory.

One table per kind with a column per field (structured fields as JSON text), and a history
table.  A batch is one transaction: an upsert per doc (INSERT ... ON CONFLICT DO UPDATE; a doc
without `description` keeps the stored one) and one insert per history row, ignored when its
(uid, seq) is there already (a retried batch).

The views' counts (`pilot status`, `pilot top`) are read from unit_tally, a row per (session,
pilot, partition, state) with its number of units, kept by write_batch in the same transaction
as the units' rows: each unit doc's key before and after (the doc itself: an upsert replaces
every field but `description`).  Before is what this store last wrote of the unit (`placed`,
kept for units not final: those in flight), else its stored row, read by uid for the batch at
once (a new unit, or one written by another process); `placed` is forgotten whenever another
connection has written the file since this one's last batch (PRAGMA data_version).  So the
counts cost a read of a few rows, not a scan of 10^7, and the writer about a dict lookup a
unit doc and an index probe a new unit (bench/store.py's views table).  A store made before
unit_tally gets it filled by one GROUP BY the first time a SqliteStore opens it (in one
transaction with its creation, so a tally that exists is whole).  The EXECUTING units (what
`pilot top` shows busy) are read through the partial index units_executing, which holds only
them.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import sqlite3
import threading

from pilot.pmgr.store.base import (
    FIELDS,
    FINAL,
    HISTORY,
    KEPT,
    KINDS,
    PAGE,
    STRUCTURED,
    Batch,
    StateStore,
    check_kind,
)
from pilot.pmgr.store.flow import FlowKeeper

# Indexes cost every write (a unit's state changes 5 times): only the ones reads need.  A store
# file usually holds one session, so no index leads with `session` (measured: those two doubled
# the cost of a state change, 7 -> 13 us per upsert, 13 -> 26 us per unit's history).
INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS history_uid_seq ON history (uid, seq);
CREATE INDEX IF NOT EXISTS units_partition ON units (partition);
CREATE INDEX IF NOT EXISTS partitions_pilot ON partitions (pilot);
CREATE INDEX IF NOT EXISTS pilots_session ON pilots (session);
CREATE INDEX IF NOT EXISTS history_events ON history (id) WHERE kind != 'units' OR state = 'FAILED';
CREATE INDEX IF NOT EXISTS units_executing ON units (pilot) WHERE state = 'EXECUTING';
"""
# units_executing: a query uses it only if its WHERE has this term word for word, not `state = ?`
EXECUTING_NOW = "state = 'EXECUTING'"
TALLY = (
    "CREATE TABLE unit_tally (session TEXT NOT NULL, pilot TEXT NOT NULL, partition TEXT NOT "
    "NULL, state TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (session, pilot, partition, "
    "state)) WITHOUT ROWID"
)
TALLY_FILL = (  # (a store made before unit_tally: once, as it is created)
    "INSERT INTO unit_tally SELECT IFNULL(session, ''), IFNULL(pilot, ''), "
    "IFNULL(partition, ''), IFNULL(state, ''), COUNT(*) FROM units GROUP BY 1, 2, 3, 4"
)
TALLY_ADD = (
    "INSERT INTO unit_tally VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET n = n + excluded.n"
)
FLOW = (  # (pmgr/store/flow.py; unit_flow_since: the last history row before it was kept)
    "CREATE TABLE unit_flow (session TEXT NOT NULL, series TEXT NOT NULL, tick INTEGER NOT "
    "NULL, s1 REAL NOT NULL, s2 REAL NOT NULL, PRIMARY KEY (session, series, tick)) WITHOUT ROWID"
)
FLOW_SINCE = "CREATE TABLE unit_flow_since (id INTEGER NOT NULL)"
SPAN = "CREATE TABLE session_span (session TEXT PRIMARY KEY, lo REAL, hi REAL) WITHOUT ROWID"
SPAN_ADD = (
    "INSERT INTO session_span VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET "
    "lo = MIN(lo, excluded.lo), hi = MAX(hi, excluded.hi)"
)
FLOW_ADD = (
    "INSERT INTO unit_flow VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
    "s1 = s1 + excluded.s1, s2 = s2 + excluded.s2"
)
# history_events is partial: it holds only the rows `pilot top` lists (pilots' and partitions'
# changes, FAILED units), a few bytes per FAILED unit and nothing for the rest, so the latest
# events of a session of 10^7 units are an index walk back from its end, not a scan of 5 x 10^7
# rows.  The views' counts are unit_tally's (module docstring), not an index on (session,
# pilot, partition, state), which would cost each of a unit's ~4 upserts an index update.
# units_executing is partial too: the units running now only, an entry made and dropped a
# unit (one of every unit not final cost each of its ~4 upserts two changes of it, measured
# +15-18 us a unit against +6-8 us for this one, tally included: see bench/store.py).


def _schema() -> str:
    tables = []
    for kind in KINDS:
        cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "uid" else c for c in FIELDS[kind])
        tables.append(f"CREATE TABLE IF NOT EXISTS {kind} ({cols});")
    tables.append(
        "CREATE TABLE IF NOT EXISTS history (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "session TEXT, kind TEXT, uid TEXT, state TEXT, ts REAL, reason TEXT, seq INTEGER);"
    )
    tables.append("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, next INTEGER);")
    return "\n".join(tables) + INDEXES


def _upsert_sql(kind: str) -> str:
    cols = FIELDS[kind]
    sets = ", ".join(
        f"{c} = COALESCE(excluded.{c}, {kind}.{c})" if c in KEPT else f"{c} = excluded.{c}"
        for c in cols
        if c != "uid"
    )
    return (
        f"INSERT INTO {kind} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT(uid) DO UPDATE SET {sets}"
    )


UPSERT = {kind: _upsert_sql(kind) for kind in KINDS}
HISTORY_INSERT = (
    "INSERT OR IGNORE INTO history (session, kind, uid, state, ts, reason, seq) VALUES "
    "(?, ?, ?, ?, ?, ?, ?)"
)
# the rows it inserted, when it ignored some (a retry): what unit_flow counts
HISTORY_SINCE = "SELECT session, kind, uid, state, ts, reason, seq FROM history WHERE id > ?"

# Rows go in statements of several rows each (sizes from this set, so few statements are ever
# prepared): sqlite3 lets other threads run while each statement steps, and a writer thread that
# waits to get back into Python once per row crawls while the client's other threads are busy
# (measured: 200 rows, one at a time, 43 ms while units were being made; 2 ms alone).
_SIZES = (256, 64, 16, 4, 1)
UID_CHUNK = 500  # uids bound in one `WHERE uid IN (...)`
_MULTI: dict = {}  # (sql, rows) -> that statement for so many rows


def _multi_sql(sql: str, n: int) -> str:
    key = (sql, n)
    text = _MULTI.get(key)
    if text is None:
        head, rest = sql.split(" VALUES ", 1)
        one, _, tail = rest.partition(")")
        text = _MULTI[key] = f"{head} VALUES {', '.join([one + ')'] * n)}{tail}"
    return text


def execute_rows(db, sql: str, rows: list) -> None:
    """`sql` (one row's INSERT ... VALUES (...) ...) for every row, several rows a statement."""
    i, n = 0, len(rows)
    for size in _SIZES:
        if n - i < size:
            continue
        text = _multi_sql(sql, size)
        while n - i >= size:
            db.execute(text, list(_flat(rows[i : i + size])))
            i += size


_flat = itertools.chain.from_iterable
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_ENCODED = {kind: [i for i, c in enumerate(FIELDS[kind]) if c in STRUCTURED] for kind in KINDS}
_FIELDS_OF = {kind: operator.itemgetter(*FIELDS[kind]) for kind in KINDS}
_TEXT_JSON: dict[str, str] = {}  # a structured field that is a string (a node's name): as JSON
_TEXT_JSON_MAX = 4096


def _row(kind: str, doc: dict) -> list:
    """The doc's column values, structured fields as JSON text (a unit's row is written about
    four times: this is on the store writer's hot path)."""
    try:
        row = list(_FIELDS_OF[kind](doc))
    except KeyError:  # (a plain doc need not have every field)
        get = doc.get
        row = [get(c) for c in FIELDS[kind]]
    for i in _ENCODED[kind]:  # structured fields as JSON text
        v = row[i]
        if v is None:
            continue
        if type(v) is str:
            text = _TEXT_JSON.get(v)
            if text is None:
                text = _dumps(v)
                if len(_TEXT_JSON) < _TEXT_JSON_MAX:
                    _TEXT_JSON[v] = text
            row[i] = text
        else:
            row[i] = _dumps(v)
    return row


class StoreFileLost(OSError):
    """The sqlite file was deleted or replaced under the open store: writes would vanish."""


class SqliteStore(StateStore):
    # a commit costs ~3 ms of fsyncs (rollback journal, synchronous=FULL) whatever its size:
    # 2,000 records a batch, 5,000 once the writer is behind (pmgr/store/writer.py)
    BATCH_RECORDS = (2_000, 5_000)

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = url[len("sqlite:///") :]  # sqlite:///rel.db, sqlite:////abs/path.db
        self.db = sqlite3.connect(
            self.path, timeout=10, check_same_thread=False, isolation_level=None
        )
        self.lock = threading.Lock()
        if os.stat(self.path).st_uid == os.getuid():
            os.chmod(self.path, 0o600)  # (its -journal file takes this mode)
        # a rollback journal, not WAL: WAL's index is a shared-memory file every connection
        # maps, and a write into the mapping of a full (or immutable) file system is a SIGBUS
        # that kills the client (measured: 192 of 300 units never persisted); FULL, because in
        # this mode NORMAL may corrupt the file on a power loss.  Cost: 5,000 null units 1-2 %
        # slower end to end; raw batch writes 25 -> 15 k units/s (the writer needs ~1.5 k/s)
        self.db.execute("PRAGMA journal_mode=TRUNCATE")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_schema())
        self._add_columns()
        self._add_tally()
        self._add_flow()
        self.flow = FlowKeeper()  # unit_flow's changes (pmgr/store/flow.py)
        self.placed: dict[str, tuple] = {}  # uid -> its tally key as written here, if not final
        self.version: int | None = None  # PRAGMA data_version as of this store's last write
        self.inode = os.stat(self.path).st_ino

    def _add_tally(self) -> None:
        """unit_tally, filled from the units there, if the store has none (module docstring)."""
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'unit_tally'"
        if self.db.execute(exists).fetchone():
            return
        self.db.execute("BEGIN IMMEDIATE")  # (another process may be making it: checked again)
        try:
            if not self.db.execute(exists).fetchone():
                self.db.execute(TALLY)
                self.db.execute(TALLY_FILL)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise

    def _add_flow(self) -> None:
        """unit_flow and session_span (each session's first and last history ts), kept from
        now on: sessions whose history began before are not in them (unit_flow_since), and
        their plots and spans stream the history instead."""
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'unit_flow'"
        if self.db.execute(exists).fetchone():
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if not self.db.execute(exists).fetchone():
                self.db.execute(FLOW)
                self.db.execute(SPAN)
                self.db.execute(FLOW_SINCE)
                self.db.execute(
                    "INSERT INTO unit_flow_since SELECT IFNULL(MAX(id), 0) FROM history"
                )
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise

    def _add_columns(self) -> None:
        """A store made by an earlier version lacks the fields added since: added (empty)."""
        for kind in KINDS:
            have = {row[1] for row in self.db.execute(f"PRAGMA table_info({kind})")}
            for col in FIELDS[kind]:
                if col not in have:
                    self.db.execute(f"ALTER TABLE {kind} ADD COLUMN {col}")

    def write_batch(self, batch: Batch) -> None:
        try:
            lost = os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            lost = True
        if lost:  # sqlite would go on writing to the deleted file, and nobody would know
            raise StoreFileLost(f"the store file {self.path} was deleted or replaced")
        with self.lock:
            units = batch.docs["units"]
            # IMMEDIATE: the tally reads before it writes, and a deferred transaction that
            # must then take the write lock from another client's would fail at once (BUSY)
            self.db.execute("BEGIN IMMEDIATE" if units else "BEGIN")
            placed = None
            try:
                if units:
                    version = self.db.execute("PRAGMA data_version").fetchone()[0]
                    if version != self.version:  # another connection wrote: what is
                        self.placed.clear()  # remembered may be stale
                        self.flow.forget()
                    placed = self.tally(units)
                for kind in KINDS:
                    docs = batch.docs[kind]
                    if docs:
                        rows = [_row(kind, d) for d in docs.values()]
                        execute_rows(self.db, UPSERT[kind], rows)
                if batch.history:
                    self.keep_flows(units, self._insert_history(batch.history))
                    self.keep_spans(batch.history)
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:  # (sqlite rolls back by itself on a full disk:
                    self.db.execute("ROLLBACK")  # a second ROLLBACK would hide why)
                raise
            if placed is not None:  # (once committed: a batch that failed changed nothing)
                self.version = version  # (this connection's commits leave it as it was)
                for uid, key in placed.items():
                    if key is None:
                        self.placed.pop(uid, None)
                    else:
                        self.placed[uid] = key

    def _insert_history(self, history: list) -> list:
        """Insert the rows (a row stored already is ignored); the rows inserted, in order."""
        last = self.db.execute("SELECT MAX(id) FROM history").fetchone()[0] or 0
        changes = self.db.total_changes
        execute_rows(self.db, HISTORY_INSERT, history)
        if self.db.total_changes - changes == len(history):
            return history  # (all of them: a batch not retried)
        return self.db.execute(HISTORY_SINCE + " ORDER BY id", (last,)).fetchall()

    def keep_flows(self, units: dict, new: list) -> None:
        """unit_flow's changes for the history rows this batch inserted (`new`)."""
        changes = self.flow.changes(units, new, self._rows_of, self._placement_of)
        if changes:
            self.db.executemany(FLOW_ADD, [(*key, s1, s2) for key, (s1, s2) in changes.items()])

    def keep_spans(self, history: list) -> None:
        spans: dict[str, list] = {}
        for row in history:
            session, ts = row[0], row[4]
            span = spans.get(session)
            if span is None:
                spans[session] = [ts, ts]
            elif ts < span[0]:
                span[0] = ts
            elif ts > span[1]:
                span[1] = ts
        self.db.executemany(SPAN_ADD, [(s, lo, hi) for s, (lo, hi) in spans.items() if s])

    def _rows_of(self, uids: list[str]) -> dict:
        """(unit_flow) {uid: [(seq, state, ts), ...]}: the stored history of these units."""
        out: dict = {}
        for uid, seq, state, ts in self._of_uids("SELECT uid, seq, state, ts FROM history", uids):
            out.setdefault(uid, []).append((seq, state, ts))
        return out

    def _of_uids(self, select: str, uids: list[str], lock: bool = False):
        """The rows of `select` (no WHERE) for these uids: `WHERE uid IN (...)` in chunks of
        UID_CHUNK (under sqlite's limit on bound parameters), each chunk's rows fetched at once;
        `lock`: take the store's lock for each chunk (a caller outside write_batch)."""
        for i in range(0, len(uids), UID_CHUNK):
            chunk = uids[i : i + UID_CHUNK]
            sql = f"{select} WHERE uid IN ({', '.join('?' * len(chunk))})"
            if lock:
                with self.lock:
                    rows = self.db.execute(sql, chunk).fetchall()
            else:
                rows = self.db.execute(sql, chunk).fetchall()
            yield from rows

    def _placement_of(self, uids: list[str]) -> dict:
        """(unit_flow) {uid: {partition, slots, description}} as stored."""
        out = {}
        select = "SELECT uid, partition, slots, description FROM units"
        for uid, part, slots, desc in self._of_uids(select, uids):
            out[uid] = {
                "partition": part,
                "slots": json.loads(slots) if slots else None,
                "description": json.loads(desc) if desc else {},
            }
        return out

    def tally(self, docs: dict[str, dict]) -> dict[str, tuple | None]:
        """unit_tally's changes for these unit docs, written in the open transaction; what
        `placed` becomes once it commits (None: final, no longer remembered)."""
        placed, before = self.placed, {}
        unknown = [uid for uid in docs if uid not in placed]
        select = (  # (new units, or not written here since)
            "SELECT uid, IFNULL(session, ''), IFNULL(pilot, ''), IFNULL(partition, ''), "
            "IFNULL(state, '') FROM units"
        )
        for uid, *key in self._of_uids(select, unknown):
            before[uid] = tuple(key)
        delta: dict[tuple, int] = {}
        after: dict[str, tuple | None] = {}
        for uid, d in docs.items():
            get = d.get
            key = (
                get("session") or "",
                get("pilot") or "",
                get("partition") or "",
                get("state") or "",
            )
            old = placed.get(uid) or before.get(uid)
            if old != key:
                if old is not None:
                    delta[old] = delta.get(old, 0) - 1
                delta[key] = delta.get(key, 0) + 1
            after[uid] = None if key[3] in FINAL else key
        rows = [(*key, n) for key, n in delta.items() if n]
        if rows:
            self.db.executemany(TALLY_ADD, rows)
        return after

    def _docs(self, kind: str, rows) -> list[dict]:
        cols = FIELDS[kind]
        out = []
        for row in rows:
            doc = dict(zip(cols, row))
            for c in STRUCTURED.intersection(cols):
                if doc[c] is not None:
                    doc[c] = json.loads(doc[c])
            out.append(doc)
        return out

    def get(self, kind: str, uid: str) -> dict | None:
        check_kind(kind)
        with self.lock:
            rows = self.db.execute(
                f"SELECT {', '.join(FIELDS[kind])} FROM {kind} WHERE uid = ?", (uid,)
            ).fetchall()
        docs = self._docs(kind, rows)
        return docs[0] if docs else None

    def find(self, kind: str, **where) -> list[dict]:
        check_kind(kind, where)
        sql = f"SELECT {', '.join(FIELDS[kind])} FROM {kind}"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        with self.lock:
            rows = self.db.execute(sql + " ORDER BY uid", tuple(where.values())).fetchall()
        return self._docs(kind, rows)

    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]:
        cond = {k: v for k, v in (("uid", uid), ("session", session)) if v is not None}
        sql = f"SELECT {', '.join(HISTORY)} FROM history"
        if cond:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in cond)
        with self.lock:
            rows = self.db.execute(sql + " ORDER BY id", tuple(cond.values())).fetchall()
        return [dict(zip(HISTORY, r)) for r in rows]

    def unit_states(self, session: str):
        after = ""  # (pages by uid: each query is short, the writer is never held up long)
        while True:
            with self.lock:
                rows = self.db.execute(
                    "SELECT uid, state FROM units WHERE session = ? AND uid > ? "
                    "ORDER BY uid LIMIT 10000",
                    (session, after),
                ).fetchall()
            if not rows:
                return
            yield from rows
            after = rows[-1][0]

    def iter_history(self, session: str, kinds=None):
        kinds = tuple(kinds) if kinds is not None else None
        sql = f"SELECT id, {', '.join(HISTORY)} FROM history WHERE session = ? AND id > ?"
        if kinds is not None:
            sql += f" AND kind IN ({', '.join('?' * len(kinds))})"
        sql += f" ORDER BY id LIMIT {PAGE}"
        after = 0  # (keyset pages by rowid: each query is short, the writer waits little)
        while True:
            with self.lock:
                rows = self.db.execute(sql, (session, after, *(kinds or ()))).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            for row in rows:
                yield row[1:]

    def _kept(self, session: str) -> bool:
        """unit_flow and session_span hold `session` whole (its history began after they
        were made).  Called with the lock held."""
        since = self.db.execute("SELECT id FROM unit_flow_since").fetchone()[0]
        if not since:
            return True
        first = self.db.execute(
            "SELECT id FROM history WHERE session = ? ORDER BY id LIMIT 1", (session,)
        ).fetchone()
        return first is not None and first[0] > since

    def unit_flow(self, session: str):
        with self.lock:
            if not self._kept(session):
                return None
            return self.db.execute(
                "SELECT series, tick, s1, s2 FROM unit_flow WHERE session = ?", (session,)
            ).fetchall()

    def history_span(self, session: str):
        with self.lock:
            if self._kept(session):
                row = self.db.execute(
                    "SELECT lo, hi FROM session_span WHERE session = ?", (session,)
                ).fetchone()
                return (row[0], row[1]) if row else (None, None)
            lo, hi = self.db.execute(
                "SELECT MIN(ts), MAX(ts) FROM history WHERE session = ?", (session,)
            ).fetchone()
        return lo, hi

    def unit_counts(self, session: str, pilot=None, by=("partition", "state")):
        check_kind("units", dict.fromkeys(by))
        if set(by) <= {"pilot", "partition", "state"}:  # (unit_tally's: a few rows)
            sql = "SELECT pilot, partition, state, n FROM unit_tally WHERE session = ? AND n != 0"
            args: tuple = (session,)
            if pilot is not None:
                sql, args = sql + " AND pilot = ?", (session, pilot)
            counts: dict[tuple, int] = {}
            with self.lock:
                rows = self.db.execute(sql, args).fetchall()
            for row in rows:
                doc = dict(zip(("pilot", "partition", "state"), (v or None for v in row[:3])))
                key = tuple(doc[f] for f in by)
                counts[key] = counts.get(key, 0) + row[3]
            return counts
        cols = ", ".join(by)
        sql = f"SELECT {cols}, COUNT(*) FROM units WHERE session = ?"
        args = (session,)
        if pilot is not None:
            sql, args = sql + " AND pilot = ?", (session, pilot)
        with self.lock:
            rows = self.db.execute(sql + f" GROUP BY {cols}", args).fetchall()
        return {tuple(r[:-1]): r[-1] for r in rows}

    def last_events(self, session: str, n: int) -> list[dict]:
        sql = (  # (the WHERE of the partial index history_events, so the planner takes it)
            f"SELECT {', '.join(HISTORY)} FROM history "
            "WHERE (kind != 'units' OR state = 'FAILED') AND session = ? "
            "ORDER BY id DESC LIMIT ?"
        )
        with self.lock:
            rows = self.db.execute(sql, (session, max(0, n))).fetchall()
        return [dict(zip(HISTORY, r)) for r in reversed(rows)]

    def get_many(self, kind: str, uids, fields=None) -> dict[str, dict]:
        check_kind(kind, dict.fromkeys(fields or ()))
        cols = FIELDS[kind] if fields is None else ("uid", *(f for f in fields if f != "uid"))
        out: dict[str, dict] = {}
        decoded: dict[str, object] = {}  # (many units share a description: decoded once)
        structured = STRUCTURED.intersection(cols)
        for row in self._of_uids(f"SELECT {', '.join(cols)} FROM {kind}", list(uids), lock=True):
            doc = dict(zip(cols, row))
            for c in structured:
                text = doc[c]
                if text is not None:
                    value = decoded.get(text)
                    if value is None:
                        value = json.loads(text)
                        if len(decoded) < 10_000:
                            decoded[text] = value
                    doc[c] = value
            out[doc["uid"]] = doc
        return out

    def open_units(self, session: str) -> list[dict]:
        marks = ", ".join("?" * len(FINAL))
        sql = (
            f"SELECT {', '.join(FIELDS['units'])} FROM units "
            f"WHERE session = ? AND state NOT IN ({marks}) ORDER BY uid"
        )
        with self.lock:
            rows = self.db.execute(sql, (session, *FINAL)).fetchall()
        return self._docs("units", rows)

    def reserve(self, counter: str, n: int) -> int:
        with self.lock:  # (BEGIN IMMEDIATE: another client's process waits for the lock)
            self.db.execute("BEGIN IMMEDIATE")
            try:
                row = self.db.execute(
                    "SELECT next FROM counters WHERE name = ?", (counter,)
                ).fetchone()
                first = row[0] if row else 0
                self.db.execute(
                    "INSERT OR REPLACE INTO counters (name, next) VALUES (?, ?)",
                    (counter, first + n),
                )
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        return first

    def close(self) -> None:
        with self.lock:
            self.db.close()

    def transient(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.OperationalError)  # locked, busy, disk I/O
