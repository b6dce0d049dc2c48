"""The MongoDB state store (pymongo).

One collection per kind (sessions, pilots, partitions, units) with `_id` = uid, plus `history`
(one document per state change, or per units' moves to one state in a batch: `uids`, `tss`,
`seqs`, `reasons` in columns, `_id` the record's key) and `templates` (the descriptions units
share, `_id` the SHA-1 of the text: a unit's doc names it in `template`, and holds in
`description` its own fields only, which a read lays over the template's).  Indexes: pilots by
session; partitions by session, pilot and state; units by session+state and by partition;
history by uid and by session.  A batch is one `bulk_write` per collection (UpdateOne with $set
and upsert: a doc without `description` keeps the stored one), history rows included (_id =
uid#seq, $setOnInsert: a retry adds nothing).
Writes are journaled (w=1, j=True): a write the server acknowledged survives its SIGKILL.
The schema is documented in docs/store.md.

One final record, one owner (pmgr/store/base.py's header), without transactions (a standalone
server has none, and a batch must not wait on them), each as a condition of every document's
own update, which MongoDB applies atomically:
    final once   a pilot's, partition's or unit's doc is updated only where its stored state
                 is not final, or is this final state (a retry): `state $nin` the other
                 final states;
    owner epoch  such a doc carries the epoch of the owner that wrote it last, and is updated
                 only where that epoch is not newer than the writer's; a take-over, once its
                 epoch is installed (the `owners` document, conditioned the same way), gives
                 its epoch to every doc of the session not final yet (`install_epoch`), so
                 that a deposed owner's later write of it fails its condition.  The owners
                 document is read before a batch and again before its history rows (Fenced).
A doc whose condition did not match is looked up: a newer epoch is Fenced (the batch is
refused), a final state another is a refusal (kept in `refusals`, its history rows dropped,
handed back), missing is written as a new doc (a first write over a refused doc fails as a
duplicate key, looked up the same way).  What per-document conditions leave open: a deposed
owner's history row whose doc was not in its batch (written ahead with its send) can land if
the take-over comes between the second read and the row's insert; its doc never does.
A batch's docs go before its rows: a writer that dies between them leaves a unit's final doc
without its history rows.  So a batch that writes units' docs final first records them in
`pending` (one document a session and batch: {session, ts, uids}, journaled), and takes that
record away once every unit of it has its final row in (this batch's, or a later one's: a doc
is made from its unit as it is when the batch is built, and may say a state whose row comes
in the next batch; not journaled: a record left over costs a look at the next attach).  A
client that attaches writes the rows the recorded units' final docs' own histories (`times`)
have and the store lacks (`rows_pending`, pmgr/core/recovery.py), then takes the records
away.  Two small writes a batch with final docs, none a unit (a mark on each doc, taken off
each, cost SecantusDB ~1 ms a unit).

Opening checks that the server answers (`ping`) within CONNECT_TIMEOUT seconds, so a wrong or
unreachable URL fails the session's start at once with the reason, instead of hanging later.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
import uuid
from typing import Any, cast

import pymongo
from bson.errors import InvalidDocument
from pymongo import ASCENDING, ReturnDocument, UpdateOne, WriteConcern
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
)

from pilot.pmgr.store import data_files
from pilot.pmgr.store.base import (
    FIELDS,
    FINAL,
    HISTORY,
    KEPT,
    KINDS,
    PAGE,
    Batch,
    Fenced,
    Own,
    Refusal,
    StateStore,
    Template,
    TextIds,
    UnitMoves,
    check_kind,
    laid_over,
)

CONNECT_TIMEOUT = 3.0
JOURNALED = WriteConcern(w=1, j=True)  # every write: one the server acknowledged survives it
_FINAL = list(FINAL)
# a final state's others (looked up with a doc's state: None when it has none)
_OTHER_FINAL: dict[str | None, list[str]] = {f: [o for o in FINAL if o != f] for f in FINAL}
_STATED = ("pilots", "partitions", "units")  # the kinds whose final state is kept
FAILED_BY_UID = 5_000  # last_events: FAILED units up to this many are read by uid
DEFAULT_DB = "pilot"
log = logging.getLogger("pmgr.store")
_INDEXES = {
    "pilots": [[("session", ASCENDING)]],
    "partitions": [[("session", ASCENDING)], [("pilot", ASCENDING)], [("state", ASCENDING)]],
    "units": [[("session", ASCENDING), ("state", ASCENDING)], [("partition", ASCENDING)]],
    "history": [[("uid", ASCENDING)], [("session", ASCENDING), ("ts", ASCENDING)]],
    "pending": [[("session", ASCENDING)]],
}


class StoreUnreachable(ValueError):
    """The database URL names a server that does not answer."""


class MongoStore(StateStore):
    def __init__(self, url: str) -> None:
        self.url = url
        ms = int(CONNECT_TIMEOUT * 1000)
        self.client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            url, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, socketTimeoutMS=4 * ms
        )
        try:
            self.client.admin.command("ping")
        except PyMongoError as exc:
            self.client.close()
            raise StoreUnreachable(
                f"database_url={url!r}: no MongoDB answered within {CONNECT_TIMEOUT:g} s "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            ) from None
        db = self.client.get_default_database(default=DEFAULT_DB, write_concern=JOURNALED)
        self.db = db
        for coll, indexes in _INDEXES.items():
            for keys in indexes:
                db[coll].create_index(keys)
        self.token = uuid.uuid4().hex[:12]  # (names this store's `pending` records)
        self.batches = 0
        self.pending_read: dict[str, list[str]] = {}  # session -> the records rows_pending read
        self.awaiting: dict[str, str] = {}  # a unit written final -> its record, till its row
        self.left: dict[str, int] = {}  # a record -> its units still awaiting their rows
        self.templates = TextIds()  # a description's text -> its id, stored (some)
        self.texts: dict[str, dict] = {}  # a template's id -> its description, read

    def _template(self, d, made: dict) -> str:
        """The id of the templates doc of a unit's description (made in this batch if new)."""
        if type(d) is Template:
            text = d.text if d.text is not None else data_files.encode(d.value, self.data, d.files)
        else:
            text = data_files.encode(d, self.data)
        tid = self.templates.get(text)
        if tid is None:
            # (cast: the checker does not narrow the else branch of a `type(...) is` test)
            data = text if type(text) is bytes else cast(str, text).encode()
            tid = hashlib.sha1(data).hexdigest()
            made[text] = tid
        return tid

    def write_batch(self, batch: Batch) -> list[Refusal]:
        """The batch (the module's header): the owner's epoch read first; each doc written
        on its own conditions, those a condition refused looked up (fenced, final already,
        or missing); the history of the rest, once the epoch is read again."""
        if self.fence is not None:
            self._check_fence()
        made: dict[str, str] = {}
        refused: list[Refusal] = []
        units = batch.unit_docs()  # (a copy when the batch has UnitsPlaced: made once)
        self._pend(units)  # (before the docs: the header)
        for kind in KINDS:
            docs = units if kind == "units" else batch.docs[kind]
            if docs:
                refused += self._write_docs(kind, docs, made)
        self.templates.update(made)
        if refused:
            by_kind: dict[str, set] = {}
            for r in refused:
                by_kind.setdefault(r.kind, set()).add(r.uid)
            sessions = {
                (k, uid): d.get("session")
                for k in _STATED
                for uid, d in (batch.unit_docs() if k == "units" else batch.docs[k]).items()
            }
            batch.without(by_kind)
            now = time.time()
            self.db.refusals.insert_many(
                [{"ts": now, "session": sessions.get((r.kind, r.uid)), **vars(r)} for r in refused]
            )
        if not (batch.moves or batch.history):
            self._unpend(batch, refused)
            return refused
        if self.fence is not None:  # (a take-over since the docs: their rows stay out)
            self._check_fence()
        if batch.moves:  # _id = the record's key: a retried record is found, not stored twice
            # ts: when written (the history is read by ts, then seq: the records of a batch
            # in their order, after every earlier batch's), lo / hi: the moves' first and last
            written = time.time()
            self.db.history.bulk_write(
                [UpdateOne({"_id": _key(m)}, {"$setOnInsert": _moves_doc(m, written, i)},
                           upsert=True)
                 for i, m in enumerate(batch.moves)],
                ordered=True,
            )  # fmt: skip
        if batch.history:  # _id = uid#seq: a retried row is found, not stored twice
            self.db.history.bulk_write(
                [
                    UpdateOne(
                        {"_id": f"{row[2]}#{row[6]}"},
                        {"$setOnInsert": dict(zip(HISTORY, row))},
                        upsert=True,
                    )
                    for row in batch.history
                ],
                ordered=False,
            )
        self._unpend(batch, refused)
        return refused

    def _pend(self, units: dict) -> None:
        """(write_batch, before its docs) Record the units it writes final (`units`: its
        unit docs), a record per session (the header), each awaiting its final row."""
        finals: dict[str, list[str]] = {}
        for uid, d in units.items():
            if d.get("state") in FINAL and uid not in self.awaiting:
                finals.setdefault(d.get("session") or "", []).append(uid)
        if not finals:
            return
        self.batches += 1
        now = time.time()
        records: list[dict[str, Any]] = [
            {"_id": f"{self.token}.{self.batches}.{i}", "session": session, "ts": now, "uids": uids}
            for i, (session, uids) in enumerate(finals.items())
        ]
        self.db.pending.insert_many(records)
        for r in records:
            self.left[r["_id"]] = len(r["uids"])
            self.awaiting.update(dict.fromkeys(r["uids"], r["_id"]))

    def _unpend(self, batch: Batch, refused: list[Refusal]) -> None:
        """(write_batch, its rows written) The records whose every unit's final row is in
        now (this batch's, or a later one's: a doc may say a state its row follows in the
        next batch), or whose final doc was refused (its rows dropped), go: acknowledged,
        not journaled."""
        if not self.awaiting:
            return
        done = []
        gone = [r.uid for r in refused if r.kind == "units"]
        for uid in itertools.chain(_final_rows(batch), gone):
            rid = self.awaiting.pop(uid, None)
            if rid is not None:
                self.left[rid] -= 1
                if self.left[rid] == 0:
                    del self.left[rid]
                    done.append(rid)
        if done:
            pending = self.db.pending.with_options(write_concern=WriteConcern(w=1))
            pending.delete_many({"_id": {"$in": done}})

    def rows_pending(self, session: str) -> list[dict]:
        records = list(self.db.pending.find({"session": session}))
        self.pending_read[session] = [r["_id"] for r in records]
        uids = sorted({u for r in records for u in r["uids"]})
        if not uids:
            return []
        found = self.db.units.find({"_id": {"$in": uids}})
        return [self._doc("units", raw) for raw in found if raw.get("state") in FINAL]

    def clear_rows_pending(self, session: str) -> None:
        ids = self.pending_read.pop(session, None)
        if ids:
            self.db.pending.delete_many({"_id": {"$in": ids}})

    def _check_fence(self) -> None:
        """Fenced when a newer owner epoch than this client's is installed."""
        assert self.fence is not None  # (its callers: only with a fence)
        session, mine = self.fence
        doc = self.db.owners.find_one({"_id": session})
        if doc is not None and doc["epoch"] > mine:
            raise Fenced(session, mine, doc["epoch"], doc.get("owner"))

    def _write_docs(self, kind: str, docs: dict, made: dict) -> list[Refusal]:
        """Upsert `docs` (a doc without `description` keeps the stored one); those of pilots,
        partitions and units on their conditions (the module's header): the records refused
        because theirs were final already; Fenced when a newer owner holds one."""
        epoch = self.fence[1] if self.fence is not None else None
        ops, written = [], []
        for uid, d in docs.items():
            fields = {k: v for k, v in d.items() if k != "uid" and not (k in KEPT and v is None)}
            if kind == "units" and type(fields.get("return_value")) is bytes:
                fields["return_value"] = data_files.store_value(
                    fields["return_value"], self.data, uid
                )
            first = fields.get("description") is not None
            if kind == "units" and first:
                d = fields.pop("description")
                if type(d) is Own:  # (its own fields stay in its doc: `_doc` lays them over)
                    fields["description"] = d.fields
                    d = d.template
                fields["template"] = self._template(d, made)
            cond: dict = {"_id": uid}
            if kind in _STATED:  # (stored: not final, or this final state; one term: an
                state = fields.get("state")  # $or costs SecantusDB a scan per doc)
                cond["state"] = {"$nin": _OTHER_FINAL.get(state, _FINAL)}
                if epoch is not None:  # (a doc with no epoch: written before owners were)
                    cond["epoch"] = {"$not": {"$gt": epoch}}
                    fields["epoch"] = epoch
            # a first write may make the doc; a later one updates it where it is (one missing
            # after all is found below, and made)
            ops.append(UpdateOne(cond, {"$set": fields}, upsert=first or kind not in _STATED))
            written.append((uid, fields))
        if made:  # (the templates first: a unit never names one that is not there)
            self.db.templates.bulk_write(
                [
                    UpdateOne({"_id": tid}, {"$setOnInsert": {"text": text}}, upsert=True)
                    for text, tid in made.items()
                ],
                ordered=False,
            )
        try:
            got = self.db[kind].bulk_write(ops, ordered=False)
            short = got.matched_count + got.upserted_count < len(ops)
        except BulkWriteError as exc:  # (a first write over a doc its conditions refused)
            if any(e.get("code") != 11000 for e in exc.details["writeErrors"]):
                raise
            short = True
        if kind not in _STATED or not short:
            return []
        return self._unmatched(kind, written, epoch)

    def _unmatched(self, kind: str, written: list, epoch: int | None) -> list[Refusal]:
        """(a write that did not match every doc: `written` [(uid, fields)]) Fenced when a
        doc holds a newer owner's epoch; docs whose stored state is final and another:
        refused; docs missing: made now."""
        stored = {
            d["_id"]: d
            for d in self.db[kind].find(
                {"_id": {"$in": [uid for uid, _ in written]}}, {"state": 1, "reason": 1, "epoch": 1}
            )
        }
        refused, missing = [], []
        for uid, fields in written:
            doc = stored.get(uid)
            if doc is None:
                missing.append(UpdateOne({"_id": uid}, {"$set": fields}, upsert=True))
            elif epoch is not None and (doc.get("epoch") or 0) > epoch:
                self._check_fence()  # (says who: the owners doc)
                assert self.fence is not None  # (epoch: the fence's)
                raise Fenced(self.fence[0], epoch, doc["epoch"], None)
            elif doc.get("state") in FINAL and doc.get("state") != fields.get("state"):
                refused.append(
                    Refusal(kind, uid, doc.get("state"), doc.get("reason"),
                            fields.get("state"), fields.get("reason"))
                )  # fmt: skip
        if missing:
            self.db[kind].bulk_write(missing, ordered=False)
        return refused

    def _doc(self, kind: str, raw: dict) -> dict:
        doc = {c: raw.get(c) for c in FIELDS[kind]}
        doc["uid"] = raw["_id"]
        tid = raw.get("template")
        if tid is not None:  # (a description of its own, if any: its own fields)
            doc["description"] = laid_over(self._described(tid), doc.get("description"))
        if kind == "units" and doc.get("return_value") is not None:
            doc["return_value"] = data_files.value(doc["return_value"], self.data)
        return doc

    def _described(self, tid: str) -> dict | None:
        desc = self.texts.get(tid)
        if desc is None:
            found = self.db.templates.find_one({"_id": tid})
            desc = data_files.decode(found["text"], self.data) if found else None
            if desc is not None:
                if len(self.texts) >= 1024:  # (bounded: the oldest go)
                    del self.texts[next(iter(self.texts))]
                self.texts[tid] = desc
        return desc

    def get(self, kind: str, uid: str) -> dict | None:
        check_kind(kind)
        raw = self.db[kind].find_one({"_id": uid})
        return self._doc(kind, raw) if raw else None

    def find(self, kind: str, **where) -> list[dict]:
        check_kind(kind, where)
        query = {("_id" if k == "uid" else k): v for k, v in where.items()}
        return [self._doc(kind, raw) for raw in self.db[kind].find(query).sort("_id", 1)]

    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]:
        query: dict[str, Any] = {
            k: v for k, v in (("uid", uid), ("session", session)) if v is not None
        }
        if uid is not None:  # (its moves too: documents that list it)
            query = {k: v for k, v in query.items() if k != "uid"}
            query["$or"] = [{"uid": uid}, {"uids": uid}]
        found = self.db.history.find(query, {"_id": 0}).sort([("ts", 1), ("seq", 1)])
        rows = [r for doc in found for r in _expand(doc) if uid is None or r[2] == uid]
        return [dict(zip(HISTORY, r)) for r in rows]

    def unit_states(self, session: str):
        for raw in self.db.units.find({"session": session}, {"state": 1}).sort("_id", 1):
            yield raw["_id"], raw.get("state")

    def iter_history(self, session: str, kinds=None):
        query: dict = {"session": session}
        if kinds is not None:
            query["kind"] = {"$in": list(kinds)}
        # one cursor, PAGE rows a batch, in the order of the (session, ts) index
        cursor = (
            self.db.history.find(query, {"_id": 0}).sort([("ts", 1), ("seq", 1)]).batch_size(PAGE)
        )
        with cursor:
            for doc in cursor:
                yield from _expand(doc)

    def history_span(self, session: str):
        ends = []
        for order, end in ((1, "lo"), (-1, "hi")):  # (the ends of the (session, ts) index)
            found = []
            for bulk in (False, True):  # (a record of moves: its first and last move)
                row = self.db.history.find_one(
                    {"session": session, "uids": {"$exists": bulk}},
                    {"ts": 1, end: 1},
                    sort=[("ts", order)],
                )
                if row is not None:
                    found.append(row[end] if bulk else row["ts"])
            ends.append((min if order == 1 else max)(found) if found else None)
        return ends[0], ends[1]

    def unit_counts(self, session: str, pilot=None, by=("partition", "state")):
        check_kind("units", dict.fromkeys(by))
        match = {"session": session} if pilot is None else {"session": session, "pilot": pilot}
        group = {"_id": {f: f"${f}" for f in by}, "n": {"$sum": 1}}
        rows = self.db.units.aggregate([{"$match": match}, {"$group": group}])
        return {tuple(r["_id"].get(f) for f in by): r["n"] for r in rows}

    def last_events(self, session: str, n: int) -> list[dict]:
        """Pilots' and partitions' rows by their uids (few), FAILED units' through the
        (session, state) index of units: by uid while they are few, else the newest FAILED
        rows of the history."""
        if n <= 0:
            return []
        uids = [d["_id"] for k in ("pilots", "partitions")
                for d in self.db[k].find({"session": session}, {"_id": 1})]  # fmt: skip
        docs = list(self.db.history.find({"uid": {"$in": uids}}, {"_id": 0})) if uids else []
        failed = {"session": session, "state": "FAILED"}
        if self.db.units.count_documents(failed, limit=FAILED_BY_UID + 1) <= FAILED_BY_UID:
            ids = [d["_id"] for d in self.db.units.find(failed, {"_id": 1})]
            if ids:
                docs += self.db.history.find(
                    {"$or": [{"uid": {"$in": ids}}, {"uids": {"$in": ids}}], "state": "FAILED"},
                    {"_id": 0},
                )
        else:
            docs += self.db.history.find(failed, {"_id": 0}).sort("ts", -1).limit(n)
        rows = [r for doc in docs for r in _expand(doc)]
        rows.sort(key=lambda r: (r[4] or 0, r[6] or 0))
        return [dict(zip(HISTORY, r)) for r in rows[-n:]]

    def get_many(self, kind: str, uids, fields=None) -> dict[str, dict]:
        check_kind(kind, dict.fromkeys(fields or ()))
        proj = None if fields is None else dict.fromkeys((f for f in fields if f != "uid"), 1)
        out = {}
        uids = list(uids)
        for i in range(0, len(uids), 1000):  # (an $in of 1,000: one short query each)
            for raw in self.db[kind].find({"_id": {"$in": uids[i : i + 1000]}}, proj):
                doc = self._doc(kind, raw)
                out[doc["uid"]] = (
                    doc if fields is None else {f: doc.get(f) for f in ("uid", *fields)}
                )
        return out

    def open_units(self, session: str) -> list[dict]:
        query = {"session": session, "state": {"$nin": list(FINAL)}}
        return [self._doc("units", raw) for raw in self.db.units.find(query).sort("_id", 1)]

    def reserve(self, counter: str, n: int) -> int:
        doc = self.db.counters.find_one_and_update(
            {"_id": counter},
            {"$inc": {"next": n}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None  # (upserted, and AFTER: the doc as it is now)
        return doc["next"] - n

    def put_mark(self, name: str, value: str) -> None:
        if self.fence is not None:
            self._check_fence()
        self.db.marks.replace_one({"_id": name}, {"_id": name, "value": value}, upsert=True)

    def install_epoch(self, session: str, epoch: int, owner: dict) -> None:
        """(the base's) Then every doc of the session not final yet is given the epoch, so
        that an older owner's later write of it is refused by its own condition."""
        try:  # (one document, conditioned: a newer epoch installed is a duplicate key)
            self.db.owners.update_one(
                {"_id": session, "epoch": {"$lte": epoch}},
                {"$set": {"epoch": epoch, "owner": dict(owner), "since": owner.get("since")}},
                upsert=True,
            )
        except DuplicateKeyError:
            doc = self.db.owners.find_one({"_id": session}) or {}
            raise Fenced(session, epoch, doc.get("epoch", epoch), doc.get("owner")) from None
        for kind in _STATED:
            self.db[kind].update_many(
                {"session": session, "state": {"$nin": _FINAL}, "epoch": {"$not": {"$gte": epoch}}},
                {"$set": {"epoch": epoch}},
            )
        self.own(session, epoch)

    def owner_of(self, session: str) -> dict | None:
        doc = self.db.owners.find_one({"_id": session})
        if doc is None:
            return None
        return {"epoch": doc["epoch"], **(doc.get("owner") or {})}

    def refusals(self, session: str | None = None) -> list[dict]:
        query = {} if session is None else {"session": session}
        return [
            {k: v for k, v in d.items() if k != "_id"}
            for d in self.db.refusals.find(query).sort([("ts", 1), ("_id", 1)])
        ]

    def marks(self, prefix: str) -> dict[str, str]:
        found = self.db.marks.find({"_id": {"$gte": prefix, "$lt": prefix + "\U0010ffff"}})
        return {d["_id"]: d["value"] for d in found}

    def close(self) -> None:
        self.client.close()

    def transient(self, exc: Exception) -> bool:
        return isinstance(exc, (ConnectionFailure, OperationFailure)) and not isinstance(
            exc, InvalidDocument
        )


def _key(m: UnitMoves) -> str:
    return m.key or f"{m.session}#{m.state}#{m.uids[0]}#{m.ts[0]!r}"


def _moves_doc(m: UnitMoves, written: float, i: int) -> dict:
    return {
        "session": m.session,
        "kind": "units",
        "uid": None,
        "state": m.state,
        "ts": written,
        "seq": i,
        "lo": min(m.ts),
        "hi": max(m.ts),
        "uids": list(m.uids),
        "tss": list(m.ts),
        "seqs": m.seqs,
        "reasons": m.reasons,
    }


def _expand(doc: dict) -> list[tuple]:
    """A history document as HISTORY rows: itself, or a moves document's unit rows."""
    uids = doc.get("uids")
    if doc.get("uid") is not None or uids is None:
        return [tuple(doc.get(k) for k in HISTORY)]
    m = UnitMoves(doc["session"], doc["state"], uids, doc["tss"], doc["seqs"], doc["reasons"])
    return list(m.rows())


def _final_rows(batch: Batch):
    """The units a batch writes a final history row of (its moves and its plain rows)."""
    for m in batch.moves:
        if m.state in FINAL:
            yield from m.uids
    for row in batch.history:
        if row[1] == "units" and row[3] in FINAL:
            yield row[2]
