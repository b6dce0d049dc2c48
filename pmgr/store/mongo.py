"""The MongoDB state store (pymongo).

One collection per kind (sessions, pilots, partitions, units) with `_id` = uid, plus `history`
(one document per state change, or per units' moves to one state in a batch: `uids`, `tss`,
`seqs`, `reasons` in columns, `_id` the record's key) and `templates` (the descriptions units
share, `_id` the SHA-1 of the text: a unit's doc names it in `template`).  Indexes: pilots by
session; partitions by session, pilot and state; units by session+state and by partition;
history by uid and by session.  A batch is one `bulk_write` per collection (UpdateOne with $set
and upsert: a doc without `description` keeps the stored one), history rows included (_id =
uid#seq, $setOnInsert: a retry adds nothing).
Writes are journaled (w=1, j=True): a write the server acknowledged survives its SIGKILL.
The schema is documented in docs/store.md.

Opening checks that the server answers (`ping`) within CONNECT_TIMEOUT seconds, so a wrong or
unreachable URL fails the session's start at once with the reason, instead of hanging later.
"""

from __future__ import annotations

import hashlib
import time

import pymongo
from bson.errors import InvalidDocument
from pymongo import ASCENDING, ReturnDocument, UpdateOne, WriteConcern
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from pilot.pmgr.store import data_files
from pilot.pmgr.store.base import (
    FIELDS,
    FINAL,
    HISTORY,
    KEPT,
    KINDS,
    PAGE,
    Batch,
    StateStore,
    Template,
    TextIds,
    UnitMoves,
    check_kind,
)

CONNECT_TIMEOUT = 3.0
FAILED_BY_UID = 5_000  # last_events: FAILED units up to this many are read by uid
DEFAULT_DB = "pilot"
_INDEXES = {
    "pilots": [[("session", ASCENDING)]],
    "partitions": [[("session", ASCENDING)], [("pilot", ASCENDING)], [("state", ASCENDING)]],
    "units": [[("session", ASCENDING), ("state", ASCENDING)], [("partition", ASCENDING)]],
    "history": [[("uid", ASCENDING)], [("session", ASCENDING), ("ts", ASCENDING)]],
}


class StoreUnreachable(ValueError):
    """The database URL names a server that does not answer."""


class MongoStore(StateStore):
    def __init__(self, url: str) -> None:
        self.url = url
        ms = int(CONNECT_TIMEOUT * 1000)
        self.client = pymongo.MongoClient(
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
        db = self.client.get_default_database(
            default=DEFAULT_DB, write_concern=WriteConcern(w=1, j=True)
        )
        self.db = db
        for coll, indexes in _INDEXES.items():
            for keys in indexes:
                db[coll].create_index(keys)
        self.templates = TextIds()  # a description's text -> its id, stored (some)
        self.texts: dict[str, dict] = {}  # a template's id -> its description, read

    def _template(self, d, made: dict) -> str:
        """The id of the templates doc of a unit's description (made in this batch if new)."""
        if type(d) is Template:
            text = d.text if d.text is not None else data_files.encode(d.value, self.data)
        else:
            text = data_files.encode(d, self.data)
        tid = self.templates.get(text)
        if tid is None:
            tid = hashlib.sha1(text if type(text) is bytes else text.encode()).hexdigest()
            made[text] = tid
        return tid

    def write_batch(self, batch: Batch) -> None:
        made: dict[str, str] = {}
        for kind in KINDS:
            docs = batch.unit_docs() if kind == "units" else batch.docs[kind]
            if docs:
                ops = []
                for uid, d in docs.items():
                    fields = {
                        k: v for k, v in d.items() if k != "uid" and not (k in KEPT and v is None)
                    }
                    if kind == "units" and type(fields.get("return_value")) is bytes:
                        fields["return_value"] = data_files.store_value(
                            fields["return_value"], self.data
                        )
                    if kind == "units" and fields.get("description") is not None:
                        fields["template"] = self._template(fields.pop("description"), made)
                    ops.append(UpdateOne({"_id": uid}, {"$set": fields}, upsert=True))
                if made:  # (the templates first: a unit never names one that is not there)
                    self.db.templates.bulk_write(
                        [
                            UpdateOne({"_id": tid}, {"$setOnInsert": {"text": text}}, upsert=True)
                            for text, tid in made.items()
                        ],
                        ordered=False,
                    )
                self.db[kind].bulk_write(ops, ordered=False)
        self.templates.update(made)
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

    def _doc(self, kind: str, raw: dict) -> dict:
        doc = {c: raw.get(c) for c in FIELDS[kind]}
        doc["uid"] = raw["_id"]
        tid = raw.get("template")
        if tid is not None and doc.get("description") is None:
            doc["description"] = self._described(tid)
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
        query = {k: v for k, v in (("uid", uid), ("session", session)) if v is not None}
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
        return doc["next"] - n

    def put_mark(self, name: str, value: str) -> None:
        self.db.marks.replace_one({"_id": name}, {"_id": name, "value": value}, upsert=True)

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
