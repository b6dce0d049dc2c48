"""The sqlite store's tables, indexes and statements, and how a file made by an earlier version
is brought up to date (pmgr/store/sqlite.py opens it; docs/store.md shows the schema).

Tables: one per kind (sessions, pilots, partitions, units: a column per field, structured
fields as JSON text, `uid` the key), `history`, `counters` (uid blocks), `templates` (the
descriptions units share: a unit's row names one in `template`, its `description` is then
NULL, or the unit's own fields that a read lays over the template's: json_patch),
`unit_tally`, `unit_flow`, `unit_flow_since`, `session_span`, `owners` (a session's
installed owner epoch and who holds it), `refusals` (writes refused because their object's
state was final: both records).
A trigger per kind (`<kind>_final_once`) keeps a final state final: an UPDATE that would
change it is skipped for that row (RAISE(IGNORE): the statement goes on with its other rows)
after a row of `refusals` says so; every write path (upsert, update by uid, units placed)
goes through it.

A history row is one state change (uid, state, ts, reason, seq), or, for units, the moves of a
batch to one state in columns (pmgr/store/base.py, UnitMoves): uid NULL, ts the earliest, and
`uids` (JSON list), `tss` (float64 array), `seqs` and `reasons` (a JSON value for all, or a
list), `bulk` (the record's key: a retry stores it once).  Reads expand such a row into its
unit rows in place, so the order of the history (by id) is kept.
"""

from __future__ import annotations

import itertools

from pilot.pmgr.store.base import FIELDS, KEPT, KINDS

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
# history_events is partial: it holds only the rows `pilot top` lists (pilots' and partitions'
# changes, FAILED units), a few bytes per FAILED unit and nothing for the rest, so the latest
# events of a session of 10^7 units are an index walk back from its end, not a scan of 5 x 10^7
# rows.  The views' counts are unit_tally's (pmgr/store/sqlite.py), not an index on (session,
# pilot, partition, state), which would cost each of a unit's ~4 upserts an index update.
# units_executing is partial too: the units running now only, an entry made and dropped a
# unit (one of every unit not final cost each of its ~4 upserts two changes of it, measured
# +15-18 us a unit against +6-8 us for this one, tally included: see bench/store.py).

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
# a template is found by its key (base.text_key: length and CRC-32 of the text), then its text:
# a store of 10^6 distinct descriptions (a sweep of arguments) finds one in an index lookup
TEMPLATES = (
    "CREATE TABLE IF NOT EXISTS templates "
    "(id INTEGER PRIMARY KEY, key INTEGER NOT NULL, text TEXT NOT NULL)"
)
TEMPLATES_KEY = "CREATE INDEX IF NOT EXISTS templates_key ON templates (key)"
TEMPLATE_ADD = "INSERT INTO templates (key, text) VALUES (?, ?)"
TEMPLATE_FIND = "SELECT id FROM templates WHERE key = ? AND text = ?"
# physical columns beyond the fields: units.template, history's columns of unit moves
EXTRA_COLUMNS = {
    "units": ("template",),
    "history": ("uids", "tss", "seqs", "reasons", "bulk"),
}
HISTORY_BULK_INDEX = (
    "CREATE UNIQUE INDEX IF NOT EXISTS history_bulk ON history (bulk) WHERE bulk IS NOT NULL"
)

# a unit's field as a SELECT term: `description` from its template when it names one, the
# unit's own fields (its `description` then: pmgr/store/base.py, Own) laid over the template's
_TEMPLATE_TEXT = "(SELECT text FROM templates t WHERE t.id = u.template)"
DESCRIPTION = (
    f"CASE WHEN u.template IS NULL THEN u.description WHEN u.description IS NULL THEN "
    f"{_TEMPLATE_TEXT} ELSE json_patch({_TEMPLATE_TEXT}, u.description) END"
)


def columns_of(kind: str, fields: tuple | None = None) -> str:
    """The SELECT list of a kind's fields (all, or these), `FROM <kind> u`."""
    return ", ".join(
        DESCRIPTION if kind == "units" and c == "description" else f"u.{c}"
        for c in (FIELDS[kind] if fields is None else fields)
    )


UNIT_COLUMNS = columns_of("units")


FINAL_SQL = "('DONE', 'FAILED', 'CANCELED')"  # (base.FINAL)
OWNERS = (
    "CREATE TABLE IF NOT EXISTS owners (session TEXT PRIMARY KEY, epoch INTEGER NOT NULL, "
    "owner TEXT, since REAL)"
)
REFUSALS = (
    "CREATE TABLE IF NOT EXISTS refusals (id INTEGER PRIMARY KEY, ts REAL, session TEXT, "
    "kind TEXT, uid TEXT, stored_state TEXT, stored_reason TEXT, refused_state TEXT, "
    "refused_reason TEXT)"
)
REFUSALS_SINCE = (
    "SELECT kind, uid, stored_state, stored_reason, refused_state, refused_reason "
    "FROM refusals WHERE id > ? ORDER BY id"
)
# the epoch a write checks, in its transaction: none installed, or not newer than the writer's
OWNER_EPOCH = "SELECT epoch, owner FROM owners WHERE session = ?"
# a mark written only while no newer epoch than the writer's is installed (one statement)
MARK_FENCED = (
    "INSERT OR REPLACE INTO marks (name, value) SELECT ?, ? WHERE NOT EXISTS "
    "(SELECT 1 FROM owners WHERE session = ? AND epoch > ?)"
)


def final_once(kind: str) -> str:
    """The trigger that keeps a `kind` row's final state (the module's header)."""
    return (
        f"CREATE TRIGGER IF NOT EXISTS {kind}_final_once BEFORE UPDATE OF state ON {kind} "
        f"WHEN OLD.state IN {FINAL_SQL} AND NEW.state IS NOT OLD.state BEGIN "
        "INSERT INTO refusals (ts, session, kind, uid, stored_state, stored_reason, "
        "refused_state, refused_reason) VALUES ((julianday('now') - 2440587.5) * 86400.0, "
        f"OLD.session, '{kind}', OLD.uid, OLD.state, OLD.reason, NEW.state, NEW.reason); "
        "SELECT RAISE(IGNORE); END"
    )


def schema() -> str:
    tables = []
    for kind in KINDS:
        cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "uid" else c for c in FIELDS[kind])
        extra = "".join(f", {c}" for c in EXTRA_COLUMNS.get(kind, ()))
        tables.append(f"CREATE TABLE IF NOT EXISTS {kind} ({cols}{extra});")
    tables.append(
        "CREATE TABLE IF NOT EXISTS history (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "session TEXT, kind TEXT, uid TEXT, state TEXT, ts REAL, reason TEXT, seq INTEGER, "
        "uids TEXT, tss BLOB, seqs TEXT, reasons TEXT, bulk TEXT);"
    )
    tables.append("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, next INTEGER);")
    tables.append("CREATE TABLE IF NOT EXISTS marks (name TEXT PRIMARY KEY, value TEXT);")
    tables.append(TEMPLATES + ";")
    tables.append(TEMPLATES_KEY + ";")
    tables.append(OWNERS + ";")
    tables.append(REFUSALS + ";")
    tables += [final_once(kind) + ";" for kind in ("pilots", "partitions", "units")]
    return "\n".join(tables) + INDEXES


def _upsert_sql(kind: str) -> str:
    cols = FIELDS[kind] + (("template",) if kind == "units" else ())
    kept = KEPT | {"template"}
    sets = ", ".join(
        f"{c} = COALESCE(excluded.{c}, {kind}.{c})" if c in kept else f"{c} = excluded.{c}"
        for c in cols
        if c != "uid"
    )
    return (
        f"INSERT INTO {kind} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT(uid) DO UPDATE SET {sets}"
    )


UPSERT = {kind: _upsert_sql(kind) for kind in KINDS}
# a unit written before, again without its description: its row is there, an UPDATE by uid
# (no conflict handling; a row not there after all is upserted instead: sqlite.py)
UNIT_UPDATED = tuple(c for c in FIELDS["units"] if c not in ("uid", "session", "description"))
# (its statement: unit_update())
HISTORY_INSERT = (
    "INSERT OR IGNORE INTO history (session, kind, uid, state, ts, reason, seq) VALUES "
    "(?, ?, ?, ?, ?, ?, ?)"
)
MOVES_INSERT = (
    "INSERT OR IGNORE INTO history (session, kind, state, ts, uids, tss, seqs, reasons, bulk) "
    "VALUES (?, 'units', ?, ?, ?, ?, ?, ?, ?)"
)
# the rows it inserted, when it ignored some (a retry): what unit_flow counts
HISTORY_SINCE = (
    "SELECT session, kind, uid, state, ts, reason, seq FROM history "
    "WHERE id > ? AND uid IS NOT NULL"
)
# a history row as read: its own columns, and a moves row's columns (NULL for others)
ROW = "session, kind, uid, state, ts, reason, seq, uids, tss, seqs, reasons"

# Rows go in statements of several rows each (sizes from this set, so few statements are ever
# prepared): sqlite3 lets other threads run while each statement steps, and a writer thread that
# waits to get back into Python once per row crawls while the client's other threads are busy
# (measured: 200 rows, one at a time, 43 ms while units were being made; 2 ms alone).
_SIZES = (256, 64, 16, 4, 1)
_MULTI: dict = {}  # (sql, rows) -> that statement for so many rows
_flat = itertools.chain.from_iterable


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


def add_columns(db) -> None:
    """A store made by an earlier version lacks the columns added since: added (empty)."""
    for kind in (*KINDS, "history"):
        have = {row[1] for row in db.execute(f"PRAGMA table_info({kind})")}
        wanted = (FIELDS[kind] if kind in FIELDS else ()) + EXTRA_COLUMNS.get(kind, ())
        for col in wanted:
            if col not in have:
                db.execute(f"ALTER TABLE {kind} ADD COLUMN {col}")
    db.execute(HISTORY_BULK_INDEX)


def add_table_once(db, name: str, statements: list[str]) -> None:
    """Make table `name` with `statements` (one transaction) if the file has none: another
    process may be making it at the same moment (checked again under the write lock)."""
    exists = f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{name}'"
    if db.execute(exists).fetchone():
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if not db.execute(exists).fetchone():
            for sql in statements:
                db.execute(sql)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def bring_up_to_date(db) -> None:
    """The tables and columns this version reads and writes, in a file of any earlier one."""
    db.executescript(schema())
    add_columns(db)
    add_table_once(db, "unit_tally", [TALLY, TALLY_FILL])
    add_table_once(
        db,
        "unit_flow",
        [
            FLOW,
            SPAN,
            FLOW_SINCE,
            "INSERT INTO unit_flow_since SELECT IFNULL(MAX(id), 0) FROM history",
        ],
    )


_SPARSE: dict = {}  # (statement, columns given) -> its text


def unit_upsert(given: tuple[bool, ...]) -> str:
    """UPSERT["units"] binding only the columns `given` (the others are NULL, as excluded.c in
    its update: the same row as the whole statement with None bound for them)."""
    key = ("upsert", given)
    text = _SPARSE.get(key)
    if text is None:
        cols = [c for c, g in zip(FIELDS["units"] + ("template",), given) if g]
        kept = KEPT | {"template"}
        sets = ", ".join(
            f"{c} = COALESCE(excluded.{c}, units.{c})" if c in kept else f"{c} = excluded.{c}"
            for c in FIELDS["units"] + ("template",)
            if c != "uid"
        )
        text = _SPARSE[key] = (
            f"INSERT INTO units ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
            f"ON CONFLICT(uid) DO UPDATE SET {sets}"
        )
    return text


def unit_update(given: tuple[bool, ...]) -> str:
    """An UPDATE of units' rows by uid, several rows a statement (as execute_rows makes it:
    one step, one hand-off of the interpreter, per statement instead of per row; column1 is
    the uid), binding only the columns `given` of UNIT_UPDATED (the others set NULL)."""
    key = ("update", given)
    text = _SPARSE.get(key)
    if text is None:
        sets, k = [], 2
        for c, g in zip(UNIT_UPDATED, given):
            if g:
                sets.append(f"{c} = v.column{k}")
                k += 1
            else:
                sets.append(f"{c} = NULL")
        text = _SPARSE[key] = (
            f"UPDATE units SET {', '.join(sets)} FROM ( VALUES ({', '.join('?' * (k - 1))})) "
            "AS v WHERE units.uid = v.column1"
        )
    return text


def units_new(*_) -> str:
    """New units of one session, state, pilot, partition and template, their uids a JSON
    list (json_each: the rows are made in sqlite, none bound one by one); a unit there already
    (not this store's writer's: a retried batch rolled back) is updated as an upsert would."""
    return (
        "INSERT INTO units (uid, session, pilot, partition, state, template) "
        "SELECT value, ?, ?, ?, ?, ? FROM json_each(?) WHERE true "
        "ON CONFLICT(uid) DO UPDATE SET session = excluded.session, pilot = excluded.pilot, "
        "partition = excluded.partition, state = excluded.state, "
        "template = COALESCE(excluded.template, units.template)"
    )


# ... each with its own fields: [[uid, own fields or null], ...] (a JSON list)
UNITS_NEW_OWN = (
    "INSERT INTO units (uid, session, pilot, partition, state, template, description) "
    "SELECT json_extract(value, '$[0]'), ?, ?, ?, ?, ?, json_extract(value, '$[1]') "
    "FROM json_each(?) WHERE true "
    "ON CONFLICT(uid) DO UPDATE SET session = excluded.session, pilot = excluded.pilot, "
    "partition = excluded.partition, state = excluded.state, "
    "template = COALESCE(excluded.template, units.template), "
    "description = IIF(excluded.template IS NULL, units.description, excluded.description)"
)


UNITS_PLACED = (  # units the store has: their pilot and partition (their uids a JSON list)
    "UPDATE units SET pilot = ?, partition = ?, state = ? "
    "WHERE uid IN (SELECT value FROM json_each(?))"
)
