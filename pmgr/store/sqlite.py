"""The embedded state store: one sqlite file (write-ahead log) in the session directory.

One table per kind with a column per field (structured fields as JSON text), a history table,
and the descriptions units share (`templates`): pmgr/store/sqlite_schema.py has them all.  A
batch is one transaction: an upsert per doc (INSERT ... ON CONFLICT DO UPDATE; a doc without
`description` keeps the stored one), one insert per history row, ignored when its (uid, seq)
is there already (a retried batch), and one per units' moves to a state (UnitMoves), ignored
when its key is there already.  A unit's description goes into `templates` once per distinct
text (a Template's text is made once by the writer; a plain dict's here), its row names it.

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

import array
import json
import operator
import os
import sqlite3
import sys
import threading
from collections.abc import Callable
from typing import Any, cast

from pilot.pmgr.store import data_files, sqlite_schema as sql
from pilot.pmgr.store.base import (
    FIELDS,
    FINAL,
    HISTORY,
    KINDS,
    PAGE,
    STRUCTURED,
    Batch,
    Fenced,
    Own,
    Refusal,
    StateStore,
    StoreRenewed,
    Template,
    TextIds,
    UnitDoc,
    check_kind,
    encode,
    text_key,
)
from pilot.pmgr.store.flow import FlowKeeper, moves_flow
from pilot.pmgr.store.sqlite_schema import EXECUTING_NOW, execute_rows  # noqa: F401 (views)

UID_CHUNK = 500  # uids bound in one `WHERE uid IN (...)`

# sqlite3 binds an int, a float or a str as it is, but runs anything else through its adapters
# first, None and bytes included: it asks the value's type and its protocol for __adapt__ and
# __conform__, and each miss formats an AttributeError's message and drops it (CPython 3.11:
# ~15,000 instructions a unit, a fifth of the store writer's, for the NULL fields of its rows).
# An adapter registered for the type is found first: C callables that give the value back
# as it is (a dict's get of a key it has not gives None; bytes(b) is b).
# (cast: dict.get's overloads, which the checker does not match against one argument)
sqlite3.register_adapter(type(None), cast("Callable[[None], None]", {}.get))
sqlite3.register_adapter(bytes, bytes)
_LITTLE = sys.byteorder == "little"
_dumps = json.JSONEncoder(separators=(",", ":")).encode
MOVES_PAGE = 64  # moves rows `histories` reads at a time (each names up to a batch of units)
_UNIT_COLS = FIELDS["units"] + ("template",)
_ENCODED = {  # (a unit's `times`: its own packed form, `_pack_times`)
    kind: [i for i, c in enumerate(FIELDS[kind]) if c in STRUCTURED and c != "times"]
    for kind in KINDS
}
_TIMES = FIELDS["units"].index("times")
_UPDATED = operator.itemgetter(  # (a unit row's values for sqlite_schema.unit_update)
    FIELDS["units"].index("uid"), *[FIELDS["units"].index(c) for c in sql.UNIT_UPDATED]
)
_FIELDS_OF = {kind: operator.itemgetter(*FIELDS[kind]) for kind in KINDS}
_DESCRIPTION = FIELDS["units"].index("description")
_TEXT_JSON: dict[str, str] = {}  # a structured field that is a string (a node's name): as JSON
_TEXT_JSON_MAX = 4096


def _row(kind: str, doc: dict | UnitDoc) -> list:
    """The doc's column values, structured fields as JSON text (a unit's row is written about
    four times: this is on the store writer's hot path)."""
    if type(doc) is UnitDoc:  # (the client's: its fields in order)
        row = list(doc)
    else:
        try:
            row = list(_FIELDS_OF[kind](doc))
        except KeyError:  # (a plain doc need not have every field)
            get = doc.get
            row = [get(c) for c in FIELDS[kind]]
    for i in _ENCODED[kind]:  # structured fields as JSON text
        v = row[i]
        if v is None:
            continue
        t = type(v)
        if t is str:
            text = _TEXT_JSON.get(v)
            if text is None:
                text = _dumps(v)
                if len(_TEXT_JSON) < _TEXT_JSON_MAX:
                    _TEXT_JSON[v] = text
            row[i] = text
        elif t is not Template and t is not Own:  # (a description's: made a template's row)
            row[i] = encode(v)
    if kind == "units" and row[_TIMES] is not None:
        row[_TIMES] = _pack_times(row[_TIMES])
    return row


# the columns a unit's first doc binds on the short way: a new unit placed in its partition
_PLACED = tuple(c in ("uid", "session", "pilot", "partition", "state", "template")
                for c in FIELDS["units"] + ("template",))  # fmt: skip
# and a unit's doc once it ended plainly (no reason, exception or kept output), a function
# unit's with its value
_ENDED = tuple(c in ("pilot", "partition", "state", "exit_code", "node", "slots", "times")
               for c in sql.UNIT_UPDATED)  # fmt: skip
_ENDED_VALUE = tuple(c in ("pilot", "partition", "state", "exit_code", "node", "slots", "times",
                           "return_value") for c in sql.UNIT_UPDATED)  # fmt: skip
_NONE4 = (None, None, None, None)
_NONE2 = (None, None)
_ONE_CORE: dict[int, str] = {}  # a core's id -> the slots text of a unit that holds it alone


_VALUE = FIELDS["units"].index("return_value")


def _with_value(d, value):
    """Doc `d` with another return_value."""
    if type(d) is UnitDoc:
        return UnitDoc((*d[:_VALUE], value, *d[_VALUE + 1 :]))
    return {**d, "return_value": value}


def _placed_row(d: UnitDoc, template, made: dict) -> tuple | None:
    """A unit's first doc as the short way binds it (_PLACED), or None when it has more to
    say (it has moved on meanwhile) and goes the general way."""
    if d[5:9] != _NONE4 or d[10:] != _NONE4 or type(d[9]) is Own:
        return None
    return (d[0], d[1], d[2], d[3], d[4], template(d[9], made))


def _ended_row(d: UnitDoc) -> tuple | None:
    """A unit's doc once it ended plainly, as the short way binds it (_ENDED, or _ENDED_VALUE
    with a function's value: the row's first item says which), or None."""
    if d[5] is not None or d[11:13] != _NONE2 or None in (d[2], d[3], d[6], d[7], d[8], d[13]):
        return None
    row = (d[0], d[2], d[3], d[4], d[6], _text_json(d[7]), _slots_text(d[8]))
    if d[10] is None:
        return (*row, _pack_times(d[13]))
    return (*row, d[10], _pack_times(d[13]))


def _text_json(v) -> str:
    if type(v) is not str:
        return _dumps(v)
    text = _TEXT_JSON.get(v)
    if text is None:
        text = _dumps(v)
        if len(_TEXT_JSON) < _TEXT_JSON_MAX:
            _TEXT_JSON[v] = text
    return text


def _slots_text(slots) -> str:
    """Slots as JSON; a unit of one core's made once per core ({"cpus": [7]}: most units)."""
    if type(slots) is dict and len(slots) == 1:
        cores = slots.get("cpus")
        if type(cores) is list and len(cores) == 1 and type(cores[0]) is int:
            text = _ONE_CORE.get(cores[0])
            if text is None:
                text = _ONE_CORE[cores[0]] = _dumps(slots)
            return text
    return _dumps(slots)


def _sparse_rows(db, statement, rows: list, first: int = 0) -> None:
    """Rows through the statement `statement(given)` makes for the columns a row has (not
    None; the first `first` always bound): rows alike in that go together, their None
    columns written as NULL, never bound (sqlite3 runs a None it binds through its adapters:
    ~2,400 instructions each, CPython 3.11, nine of a new unit's sixteen columns)."""
    groups: dict = {}
    for row in rows:
        given = tuple([v is not None for v in row[first:]])
        got = groups.get(given)
        if got is None:
            got = groups[given] = []
        got.append([v for v in row if v is not None] if first == 0 else
                   row[:first] + tuple(v for v in row[first:] if v is not None))  # fmt: skip
    for given, same in groups.items():
        execute_rows(db, statement(given), same)


def _pack_times(times: list) -> bytes:
    """A unit's history [(state, ts), ...] as a BLOB: the states, comma-joined, a NUL, then
    the times as float64 (JSON's float repr cost ~1 us a time: 5 us a unit)."""
    ts = array.array("d", [t for _, t in times])
    if not _LITTLE:
        ts.byteswap()
    return ",".join([s for s, _ in times]).encode() + b"\0" + ts.tobytes()


def _unpack_times(blob) -> list | None:
    if blob is None:
        return None
    if isinstance(blob, str):  # (JSON, as a plain store writes it)
        return json.loads(blob)
    states, _, raw = bytes(blob).partition(b"\0")
    ts = array.array("d")
    ts.frombytes(raw)
    if not _LITTLE:
        ts.byteswap()
    return [[s, t] for s, t in zip(states.decode().split(","), ts)]


def expand_row(row: tuple) -> list[tuple]:
    """A history row as read (sqlite_schema.ROW): itself in HISTORY order, or a moves row's
    unit rows."""
    if row[2] is not None or row[7] is None:
        return [row[:7]]
    reasons: Any  # (a list, or one value for all: told apart once below, not at every row)
    session, _, _, state, _, _, _, uids, tss, seqs, reasons = row
    ts = array.array("d")
    ts.frombytes(tss)
    if not _LITTLE:
        ts.byteswap()
    uids, seqs = json.loads(uids), json.loads(seqs)
    reasons = json.loads(reasons) if reasons is not None else None
    one_seq, one_reason = not isinstance(seqs, list), not isinstance(reasons, list)
    return [
        (
            session,
            "units",
            uid,
            state,
            ts[i],
            reasons if one_reason else reasons[i],
            seqs if one_seq else seqs[i],
        )
        for i, uid in enumerate(uids)
    ]


class StoreFileLost(StoreRenewed):
    """The sqlite file was deleted or replaced under the open store (writes would have
    vanished): a new one is made at its path, and the client writes again what it holds."""


class SqliteStore(StateStore):
    # a commit has a fixed cost (its statements, the tally's reads): 2,000 records a batch,
    # 5,000 once the writer is behind (pmgr/store/writer.py)
    BATCH_RECORDS = (2_000, 5_000)

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = url[len("sqlite:///") :]  # sqlite:///rel.db, sqlite:////abs/path.db
        self.lock = threading.Lock()
        self._connect()
        self.flow = FlowKeeper()  # unit_flow's changes of history rows (pmgr/store/flow.py)
        self.placed: dict[str, tuple] = {}  # uid -> its tally key as written here, if not final
        self.version: int | None = None  # PRAGMA data_version as of this store's last write
        self.templates = TextIds()  # a description's text -> its templates row (some)
        # large bytes (a call's arguments, a return value): files beside the store file
        self.data = data_files.DataFiles(
            os.path.join(os.path.dirname(os.path.abspath(self.path)), "data")
        )

    def _connect(self) -> None:
        """The connection, the file's mode and journal, its tables up to date."""
        self.db = sqlite3.connect(
            self.path, timeout=10, check_same_thread=False, isolation_level=None
        )
        if os.stat(self.path).st_uid == os.getuid():
            os.chmod(self.path, 0o600)  # (its journal file takes this mode)
        # A rollback journal, no memory-mapped I/O: whatever the file's system does (an I/O
        # error, a file made immutable, one cut short), a write fails with an error the writer
        # keeps its records through, never a signal.  A write-ahead log maps its index (the
        # -shm file) into the process, and a write fault there on a file that no longer takes
        # writes is a SIGBUS that ends the client (measured: chattr +i on the store's files
        # while 300 units ran killed it, 190 of them with no final record).  synchronous=OFF:
        # no fsync, as the log had none either; a client that dies loses nothing (the OS has
        # the writes, and the journal rolls a commit it died in back); a power loss of its host
        # in the middle of a commit may damage the file.  A commit costs ~0.09 ms (the log's
        # ~0.05 ms; bench/store.py).  TRUNCATE: the journal file is kept (emptied), so a
        # directory that no longer takes new files still takes commits.
        self.db.execute("PRAGMA journal_mode=TRUNCATE")
        self.db.execute("PRAGMA synchronous=OFF")
        sql.bring_up_to_date(self.db)
        self.inode = os.stat(self.path).st_ino

    def _replaced(self) -> None:
        """The file was deleted or replaced under the open store: a new one is made at the
        same path (StoreFileLost says so: the client writes everything it holds again)."""
        with self.lock:
            try:
                self.db.close()
            except sqlite3.Error:
                pass
            self.placed.clear()
            self.flow.forget()
            self.version = None
            self.templates = TextIds()
            self._connect()

    def write_batch(self, batch: Batch) -> list[Refusal]:
        try:
            lost = os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            lost = True
        if lost:  # sqlite would go on writing to the deleted file, and nobody would know
            self._replaced()
            raise StoreFileLost(
                f"the store file {self.path} was deleted or replaced: a new one is made there, "
                "which holds what the client writes from now on (what it still holds is "
                "written again; the records of what it let go of are lost with the old file)"
            )
        with self.lock:
            units = batch.docs["units"]
            # IMMEDIATE: the owner's epoch and the tally are read before the writes, and a
            # deferred transaction that must then take the write lock from another client's
            # would fail at once (BUSY); holding it from the start, what they read stays so
            self.db.execute("BEGIN IMMEDIATE")
            placed: dict | None
            moved: dict
            placed, moved = None, {}
            made: dict[str, int] = {}  # templates made in this transaction (kept once it commits)
            try:
                if self.fence is not None:
                    self._check_fence()
                mark = self.db.execute("SELECT IFNULL(MAX(id), 0) FROM refusals").fetchone()[0]
                if units or batch.placed:
                    version = self.db.execute("PRAGMA data_version").fetchone()[0]
                    if version != self.version:  # another connection wrote: what is
                        self.placed.clear()  # remembered may be stale
                        self.flow.forget()
                    placed, moved = self.tally(units, batch.placed)
                    self._write_placed(batch.placed, made)
                for kind in KINDS:
                    docs = batch.docs[kind]
                    if not docs:
                        continue
                    if kind == "units":
                        self._write_units(docs, made)
                    else:
                        execute_rows(
                            self.db, sql.UPSERT[kind], [_row(kind, d) for d in docs.values()]
                        )
                refused = self._refused(mark)  # (the rows the final_once triggers skipped)
                if refused:
                    units = self._without_refused(batch, refused, placed, moved)
                if batch.history:
                    self.keep_flows(units, self._insert_history(batch.history))
                    self.keep_spans((r[0], r[4]) for r in batch.history)
                if batch.moves:
                    self._insert_moves(batch.moves)
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:  # (sqlite rolls back by itself on a full disk:
                    self.db.execute("ROLLBACK")  # a second ROLLBACK would hide why)
                raise
            self.templates.update(made)
            if placed is not None:  # (once committed: a batch that failed changed nothing)
                self.version = version  # (this connection's commits leave it as it was)
                for uid, key in placed.items():
                    if key is None:
                        self.placed.pop(uid, None)
                    else:
                        self.placed[uid] = key
        return refused

    def _check_fence(self) -> None:
        """(in the batch's transaction) Fenced when a newer owner epoch than this store's
        client's is installed for its session."""
        assert self.fence is not None  # (write_batch calls it only with a fence)
        session, mine = self.fence
        row = self.db.execute(sql.OWNER_EPOCH, (session,)).fetchone()
        if row is not None and row[0] > mine:
            raise Fenced(session, mine, row[0], json.loads(row[1]) if row[1] else None)

    def _refused(self, mark: int) -> list[Refusal]:
        """The refusals rows the triggers made in this transaction (after id `mark`)."""
        return [Refusal(*row) for row in self.db.execute(sql.REFUSALS_SINCE, (mark,))]

    def _without_refused(self, batch: Batch, refused: list, placed, moved) -> dict:
        """The refused objects' history rows dropped from the batch, and what the tally
        counted for their docs taken back (their rows did not change); the units' docs that
        were written."""
        by_kind: dict[str, set] = {}
        for r in refused:
            by_kind.setdefault(r.kind, set()).add(r.uid)
        batch.without(by_kind)
        gone = by_kind.get("units", set())
        units = {u: d for u, d in batch.docs["units"].items() if u not in gone}
        if placed is not None and gone:
            delta: dict[tuple, int] = {}
            for uid in gone & moved.keys():
                old, new = moved[uid]
                delta[new] = delta.get(new, 0) - 1
                if old is not None:
                    delta[old] = delta.get(old, 0) + 1
                placed[uid] = None  # (its row is final: not remembered)
            rows = [(*key, n) for key, n in delta.items() if n]
            if rows:
                self.db.executemany(sql.TALLY_ADD, rows)
        return units

    def _write_units(self, docs: dict, made: dict) -> None:
        """Units' docs: a doc with its description is upserted (a unit's first write), one
        without it updates the unit's row by uid, which is there (it is upserted if not).
        The client's two usual docs take a short way (`_placed_row`, `_ended_row`: their
        columns picked, no None bound), any other the general one (`_row`, `_sparse_rows`)."""
        fresh, placed, known, ended = [], [], [], []
        for uid, d in docs.items():
            mine = type(d) is UnitDoc
            if type(d.get("return_value")) is bytes:  # a large value: a file, named here
                d = docs[uid] = _with_value(d, data_files.store_value(d.get("return_value"),
                                                                     self.data, uid))  # fmt: skip
            if d.get("description") is None:
                row = _ended_row(d) if mine else None
                if row is not None:
                    ended.append(row)
                else:
                    known.append(_UPDATED(_row("units", d)))
            else:
                row = _placed_row(d, self._template, made) if mine else None
                if row is not None:
                    placed.append(row)
                else:
                    fresh.append(_row("units", d))
        if placed:
            execute_rows(self.db, sql.unit_upsert(_PLACED), placed)
        if fresh:
            self._templates(fresh, made)
            _sparse_rows(self.db, sql.unit_upsert, fresh)
        if not (known or ended):
            return
        before = self.db.total_changes
        if ended:
            plain = [r for r in ended if len(r) == 8]
            if plain:
                execute_rows(self.db, sql.unit_update(_ENDED), plain)
            if len(plain) < len(ended):
                valued = [r for r in ended if len(r) == 9]
                execute_rows(self.db, sql.unit_update(_ENDED_VALUE), valued)
        if known:
            _sparse_rows(self.db, sql.unit_update, known, first=1)
        if self.db.total_changes - before != len(known) + len(ended):  # (a row not there)
            uids = [r[0] for r in ended] + [r[0] for r in known]
            there = {u for (u,) in self._of_uids("SELECT uid FROM units", uids)}
            missing = [_row("units", docs[u]) for u in uids if u not in there]
            self._templates(missing, made)
            _sparse_rows(self.db, sql.unit_upsert, missing)

    def _write_placed(self, together: list, made: dict) -> None:
        """UnitsPlaced: a statement each (sqlite_schema.units_new, UNITS_PLACED); a unit said
        to be there and not found is written as its doc would be."""
        for p in together:
            uids = _dumps(p.uids)
            if p.template is not None:
                args = (p.session, p.pilot, p.partition, p.state, self._template(p.template, made))
                if p.own is None:
                    self.db.execute(sql.units_new(), (*args, uids))
                else:
                    rows = _dumps([[u, o] for u, o in zip(p.uids, p.own)])
                    self.db.execute(sql.UNITS_NEW_OWN, (*args, rows))
                continue
            before = self.db.total_changes
            self.db.execute(sql.UNITS_PLACED, (p.pilot, p.partition, p.state, uids))
            if self.db.total_changes - before != len(p.uids):  # (one not there after all)
                there = {u for (u,) in self._of_uids("SELECT uid FROM units", p.uids)}
                missing = [_row("units", d) for u, d in p.docs() if u not in there]
                self._templates(missing, made)
                _sparse_rows(self.db, sql.unit_upsert, missing)

    def _template(self, d, made: dict) -> int:
        """The id of the templates row of description `d` (a Template or a dict's JSON text):
        known, found (another process made it) or made now (in `made` until it commits)."""
        text = d.text if type(d) is Template else d
        if text is None:  # (a Template holding bytes: its own row, the bytes in files)
            text = data_files.encode(d.value, self.data, d.files)
            # (cast: lastrowid is None only before a row was inserted)
            return cast(int, self.db.execute(sql.TEMPLATE_ADD, (text_key(text), text)).lastrowid)
        tid = self.templates.get(text) or made.get(text)
        if tid is None:
            key = text_key(text)
            found = self.db.execute(sql.TEMPLATE_FIND, (key, text)).fetchone()
            tid = (
                found[0]
                if found is not None
                else cast(int, self.db.execute(sql.TEMPLATE_ADD, (key, text)).lastrowid)
            )
            made[text] = tid
        return tid

    def _templates(self, rows: list, made: dict) -> None:
        """Each unit row's description as the id of its templates row (one per distinct
        text: made, or found when another process made it); the row gets a `template` column."""
        for row in rows:
            d = row[_DESCRIPTION]
            row[_DESCRIPTION] = None
            if type(d) is Own:  # (the unit's own fields stay with its row)
                row[_DESCRIPTION] = encode(d.fields)
                d = d.template
            row.append(None if d is None else self._template(d, made))

    def _insert_moves(self, moves: list) -> None:
        """Units' moves, a history row per record (sqlite_schema's header), their unit_flow
        and span; a record stored already (its key) is not stored or counted again."""
        new = []
        for m in moves:
            ts = array.array("d", m.ts)
            if not _LITTLE:
                ts.byteswap()
            reasons = m.reasons
            args = (
                m.session,
                m.state,
                min(m.ts),
                _dumps(m.uids),
                ts.tobytes(),
                _dumps(m.seqs),
                None if reasons is None else _dumps(reasons),
                m.key,
            )
            if self.db.execute(sql.MOVES_INSERT, args).rowcount:
                new.append(m)
        if not new:
            return
        changes = moves_flow(new)
        if changes:
            rows = [(*key, s1, s2) for key, (s1, s2) in changes.items()]
            self.db.executemany(sql.FLOW_ADD, rows)
        self.keep_spans((m.session, t) for m in new for t in (min(m.ts), max(m.ts)))

    def _insert_history(self, history: list) -> list:
        """Insert the rows (a row stored already is ignored); the rows inserted, in order."""
        last = self.db.execute("SELECT MAX(id) FROM history").fetchone()[0] or 0
        changes = self.db.total_changes
        execute_rows(self.db, sql.HISTORY_INSERT, history)
        if self.db.total_changes - changes == len(history):
            return history  # (all of them: a batch not retried)
        return self.db.execute(sql.HISTORY_SINCE + " ORDER BY id", (last,)).fetchall()

    def keep_flows(self, units: dict, new: list) -> None:
        """unit_flow's changes for the history rows this batch inserted (`new`)."""
        changes = self.flow.changes(units, new, self._rows_of, self._placement_of)
        if changes:
            rows = [(*key, s1, s2) for key, (s1, s2) in changes.items()]
            self.db.executemany(sql.FLOW_ADD, rows)

    def keep_spans(self, points) -> None:
        """session_span's ends for these (session, ts) of the batch."""
        spans: dict[str, list] = {}
        for session, ts in points:
            span = spans.get(session)
            if span is None:
                spans[session] = [ts, ts]
            elif ts < span[0]:
                span[0] = ts
            elif ts > span[1]:
                span[1] = ts
        self.db.executemany(sql.SPAN_ADD, [(s, lo, hi) for s, (lo, hi) in spans.items() if s])

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
            query = f"{select} WHERE uid IN ({', '.join('?' * len(chunk))})"
            if lock:
                with self.lock:
                    rows = self.db.execute(query, chunk).fetchall()
            else:
                rows = self.db.execute(query, chunk).fetchall()
            yield from rows

    def _placement_of(self, uids: list[str]) -> dict:
        """(unit_flow) {uid: {partition, slots, description}} as stored."""
        out = {}
        select = f"SELECT u.uid, u.partition, u.slots, {sql.DESCRIPTION} FROM units u"
        for uid, part, slots, desc in self._of_uids(select, uids):
            out[uid] = {
                "partition": part,
                "slots": json.loads(slots) if slots else None,
                "description": data_files.decode(desc, self.data) if desc else {},
            }
        return out

    # (docs: Batch.docs' units, dicts and UnitDocs, to which UnitsPlaced' keys are added below)
    def tally(self, docs: dict[str, Any], together: list) -> tuple[dict, dict]:
        """unit_tally's changes for these unit docs and UnitsPlaced, written in the open
        transaction; what `placed` becomes once it commits (None: final, no longer
        remembered), and {uid: (key before, key after)} of the units it moved (what a refused
        write takes back)."""
        placed, before = self.placed, {}
        unknown = [  # (a client's first doc of a unit: new to the store, nothing to read)
            uid
            for uid, d in docs.items()
            if uid not in placed and not (type(d) is UnitDoc and d[_DESCRIPTION] is not None)
        ]
        delta: dict[tuple, int] = {}
        after: dict[str, tuple | None] = {}
        moved: dict[str, tuple] = {}
        for p in together:
            key = (p.session or "", p.pilot or "", p.partition or "", p.state or "")
            if p.template is not None:  # (new: nothing was counted for them)
                delta[key] = delta.get(key, 0) + len(p.uids)
                after.update(dict.fromkeys(p.uids, key))
                moved.update(dict.fromkeys(p.uids, (None, key)))
                continue
            unknown += [uid for uid in p.uids if uid not in placed]
            docs = {**docs, **dict.fromkeys(p.uids, key)}  # (their keys, as docs say them)
        select = (  # (new units, or not written here since)
            "SELECT uid, IFNULL(session, ''), IFNULL(pilot, ''), IFNULL(partition, ''), "
            "IFNULL(state, '') FROM units"
        )
        for uid, *key in self._of_uids(select, unknown):
            before[uid] = tuple(key)
        for uid, d in docs.items():
            if type(d) is tuple:  # (a key: of UnitsPlaced)
                key = d
            elif type(d) is UnitDoc:
                key = (d[1] or "", d[2] or "", d[3] or "", d[4] or "")
            else:
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
                moved[uid] = (old, key)
            after[uid] = None if key[3] in FINAL else key
        rows = [(*key, n) for key, n in delta.items() if n]
        if rows:
            self.db.executemany(sql.TALLY_ADD, rows)
        return after, moved

    def _docs(self, kind: str, rows) -> list[dict]:
        cols = FIELDS[kind]
        out = []
        structured = STRUCTURED.intersection(cols) - {"times"}
        for row in rows:
            doc = dict(zip(cols, row))
            for c in structured:
                if doc[c] is not None:
                    doc[c] = data_files.decode(doc[c], self.data)
            if "times" in doc:
                doc["times"] = _unpack_times(doc["times"])
            if doc.get("return_value") is not None:
                doc["return_value"] = data_files.value(doc["return_value"], self.data)
            out.append(doc)
        return out

    def get(self, kind: str, uid: str) -> dict | None:
        check_kind(kind)
        with self.lock:
            rows = self.db.execute(
                f"SELECT {sql.columns_of(kind)} FROM {kind} u WHERE u.uid = ?", (uid,)
            ).fetchall()
        docs = self._docs(kind, rows)
        return docs[0] if docs else None

    def find(self, kind: str, **where) -> list[dict]:
        check_kind(kind, where)
        query = f"SELECT {sql.columns_of(kind)} FROM {kind} u"
        if where:
            query += " WHERE " + " AND ".join(f"u.{k} = ?" for k in where)
        with self.lock:
            rows = self.db.execute(query + " ORDER BY u.uid", tuple(where.values())).fetchall()
        return self._docs(kind, rows)

    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]:
        """Rows in the order written (a unit's from its own rows and the moves rows that name
        it: those are searched for its uid, a scan of the session's moves; a unit read back
        has its history in its doc, `times`, once final)."""
        cond = {k: v for k, v in (("uid", uid), ("session", session)) if v is not None}
        where = " AND ".join(f"{k} = ?" for k in cond)
        with self.lock:
            found = self.db.execute(
                f"SELECT id, {sql.ROW} FROM history{' WHERE ' + where if where else ''} "
                "ORDER BY id",
                tuple(cond.values()),
            ).fetchall()
            if uid is not None:  # (its moves: rows with no uid of their own)
                scan = "uid IS NULL AND uids IS NOT NULL AND instr(uids, ?) > 0"
                args: tuple = (_dumps(uid),)
                if session is not None:
                    scan, args = scan + " AND session = ?", (*args, session)
                found += self.db.execute(
                    f"SELECT id, {sql.ROW} FROM history WHERE {scan}", args
                ).fetchall()
                found.sort()
        out = []
        for row in found:
            for r in expand_row(row[1:]):
                if uid is None or r[2] == uid:
                    out.append(dict(zip(HISTORY, r)))
        return out

    def histories(self, uids, session: str | None = None) -> dict[str, list[dict]]:
        """One pass over the moves rows for all of `uids` (history(uid=) scans them once a
        unit: an attach adopting 384 units of a 200,000-unit session spent 5.2 s there), a
        page at a time (the lock let go between pages: the writer goes on)."""
        want = set(uids)
        out: dict[str, list[dict]] = {uid: [] for uid in want}
        found = []
        ids = sorted(want)
        also = " AND session = ?" if session is not None else ""
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            with self.lock:
                found += self.db.execute(
                    f"SELECT id, {sql.ROW} FROM history WHERE uid IN "
                    f"({', '.join('?' * len(chunk))}){also}",
                    (*chunk, session) if session is not None else tuple(chunk),
                ).fetchall()
        last = 0
        while want:
            with self.lock:
                page = self.db.execute(
                    f"SELECT id, {sql.ROW} FROM history WHERE id > ? AND uid IS NULL AND "
                    f"uids IS NOT NULL{also} ORDER BY id LIMIT {MOVES_PAGE}",
                    (last, session) if session is not None else (last,),
                ).fetchall()
            if not page:
                break
            last = page[-1][0]
            found += [row for row in page if not want.isdisjoint(json.loads(row[8]))]
        found.sort()
        for row in found:
            for r in expand_row(row[1:]):
                if r[2] in want:
                    out[r[2]].append(dict(zip(HISTORY, r)))
        return out

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
        query = f"SELECT id, {sql.ROW} FROM history WHERE session = ? AND id > ?"
        if kinds is not None:
            query += f" AND kind IN ({', '.join('?' * len(kinds))})"
        query += f" ORDER BY id LIMIT {PAGE}"
        after = 0  # (keyset pages by rowid: each query is short, the writer waits little)
        while True:
            with self.lock:
                rows = self.db.execute(query, (session, after, *(kinds or ()))).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            for row in rows:
                yield from expand_row(row[1:])

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
            query = "SELECT pilot, partition, state, n FROM unit_tally WHERE session = ? AND n != 0"
            args: tuple = (session,)
            if pilot is not None:
                query, args = query + " AND pilot = ?", (session, pilot)
            counts: dict[tuple, int] = {}
            with self.lock:
                rows = self.db.execute(query, args).fetchall()
            for row in rows:
                doc = dict(zip(("pilot", "partition", "state"), (v or None for v in row[:3])))
                key = tuple(doc[f] for f in by)
                counts[key] = counts.get(key, 0) + row[3]
            return counts
        cols = ", ".join(by)
        query = f"SELECT {cols}, COUNT(*) FROM units WHERE session = ?"
        args = (session,)
        if pilot is not None:
            query, args = query + " AND pilot = ?", (session, pilot)
        with self.lock:
            rows = self.db.execute(query + f" GROUP BY {cols}", args).fetchall()
        return {tuple(r[:-1]): r[-1] for r in rows}

    def last_events(self, session: str, n: int) -> list[dict]:
        query = (  # (the WHERE of the partial index history_events, so the planner takes it)
            f"SELECT {sql.ROW} FROM history "
            "WHERE (kind != 'units' OR state = 'FAILED') AND session = ? "
            "ORDER BY id DESC LIMIT ?"
        )
        if n <= 0:
            return []
        with self.lock:  # (a moves row holds many: its units' FAILED rows count each)
            rows = self.db.execute(query, (session, n)).fetchall()
        out: list[tuple] = []
        for row in rows:
            out[:0] = expand_row(row)
            if len(out) >= n:
                break
        return [dict(zip(HISTORY, r)) for r in out[-n:]]

    def get_many(self, kind: str, uids, fields=None) -> dict[str, dict]:
        check_kind(kind, dict.fromkeys(fields or ()))
        cols = FIELDS[kind] if fields is None else ("uid", *(f for f in fields if f != "uid"))
        listed = sql.columns_of(kind, cols)
        out: dict[str, dict] = {}
        decoded: dict[str, object] = {}  # (many units share a description: decoded once)
        structured = STRUCTURED.intersection(cols) - {"times"}
        for row in self._of_uids(f"SELECT {listed} FROM {kind} u", list(uids), lock=True):
            doc = dict(zip(cols, row))
            for c in structured:
                text = doc[c]
                if text is not None:
                    value = decoded.get(text)
                    if value is None:
                        value = data_files.decode(text, self.data)
                        if len(decoded) < 10_000:
                            decoded[text] = value
                    doc[c] = value
            if "times" in doc:
                doc["times"] = _unpack_times(doc["times"])
            if doc.get("return_value") is not None:
                doc["return_value"] = data_files.value(doc["return_value"], self.data)
            out[doc["uid"]] = doc
        return out

    def open_units(self, session: str) -> list[dict]:
        marks = ", ".join("?" * len(FINAL))
        query = (
            f"SELECT {sql.UNIT_COLUMNS} FROM units u "
            f"WHERE u.session = ? AND u.state NOT IN ({marks}) ORDER BY u.uid"
        )
        with self.lock:
            rows = self.db.execute(query, (session, *FINAL)).fetchall()
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

    def put_mark(self, name: str, value: str) -> None:
        with self.lock:  # (a statement of its own: committed when it returns)
            if self.fence is None:
                self.db.execute(
                    "INSERT OR REPLACE INTO marks (name, value) VALUES (?, ?)", (name, value)
                )
                return
            session, mine = self.fence
            if self.db.execute(sql.MARK_FENCED, (name, value, session, mine)).rowcount == 0:
                row = self.db.execute(sql.OWNER_EPOCH, (session,)).fetchone()
                raise Fenced(session, mine, row[0], json.loads(row[1]) if row[1] else None)

    def install_epoch(self, session: str, epoch: int, owner: dict) -> None:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                row = self.db.execute(sql.OWNER_EPOCH, (session,)).fetchone()
                if row is not None and row[0] > epoch:
                    raise Fenced(session, epoch, row[0], json.loads(row[1]) if row[1] else None)
                self.db.execute(
                    "INSERT OR REPLACE INTO owners (session, epoch, owner, since) "
                    "VALUES (?, ?, ?, ?)",
                    (session, epoch, _dumps(owner), owner.get("since")),
                )
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        self.own(session, epoch)

    def owner_of(self, session: str) -> dict | None:
        with self.lock:
            row = self.db.execute(sql.OWNER_EPOCH, (session,)).fetchone()
        if row is None:
            return None
        return {"epoch": row[0], **(json.loads(row[1]) if row[1] else {})}

    def refusals(self, session: str | None = None) -> list[dict]:
        cols = ("ts", "session", "kind", "uid", "stored_state", "stored_reason",
                "refused_state", "refused_reason")  # fmt: skip
        query = f"SELECT {', '.join(cols)} FROM refusals"
        args: tuple = ()
        if session is not None:
            query, args = query + " WHERE session = ?", (session,)
        with self.lock:
            rows = self.db.execute(query + " ORDER BY id", args).fetchall()
        return [dict(zip(cols, r)) for r in rows]

    def marks(self, prefix: str) -> dict[str, str]:
        with self.lock:
            rows = self.db.execute(
                "SELECT name, value FROM marks WHERE name >= ? AND name < ?",
                (prefix, prefix + "\U0010ffff"),
            ).fetchall()
        return dict(rows)

    def close(self) -> None:
        with self.lock:
            self.db.close()

    def transient(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.OperationalError)  # locked, busy, disk I/O
