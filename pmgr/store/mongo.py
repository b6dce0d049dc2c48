"""The MongoDB state store (pymongo).

One collection per kind (sessions, pilots, partitions, units) with `_id` = uid, plus `history`
(one document per state change).  Indexes: pilots by session; partitions by session, pilot and
state; units by session+state and by partition; history by uid and by session.  A batch is one
`bulk_write` per collection (UpdateOne with $set and upsert: a doc without `description` keeps
the stored one), history rows included (_id = uid#seq, $setOnInsert: a retry adds nothing).
Writes are journaled (w=1, j=True): a write the server acknowledged survives its SIGKILL.
The schema is documented in docs/store.md.

Opening checks that the server answers (`ping`) within CONNECT_TIMEOUT seconds, so a wrong or
unreachable URL fails the session's start at once with the reason, instead of hanging later.
"""

from __future__ import annotations

import pymongo
from bson.errors import InvalidDocument
from pymongo import ASCENDING, ReturnDocument, UpdateOne, WriteConcern
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from pilot.pmgr.store.base import (
    FIELDS,
    FINAL,
    HISTORY,
    KEPT,
    KINDS,
    Batch,
    StateStore,
    check_kind,
)

CONNECT_TIMEOUT = 3.0
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

    def write_batch(self, batch: Batch) -> None:
        for kind in KINDS:
            docs = batch.docs[kind]
            if docs:
                ops = [
                    UpdateOne(
                        {"_id": uid},
                        {
                            "$set": {
                                k: v
                                for k, v in d.items()
                                if k != "uid" and not (k in KEPT and v is None)
                            }
                        },
                        upsert=True,
                    )
                    for uid, d in docs.items()
                ]
                self.db[kind].bulk_write(ops, ordered=False)
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

    @staticmethod
    def _doc(kind: str, raw: dict) -> dict:
        doc = {c: raw.get(c) for c in FIELDS[kind]}
        doc["uid"] = raw["_id"]
        return doc

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
        rows = self.db.history.find(query, {"_id": 0}).sort([("ts", 1), ("seq", 1)])
        return [{k: r.get(k) for k in HISTORY} for r in rows]

    def unit_states(self, session: str):
        for raw in self.db.units.find({"session": session}, {"state": 1}).sort("_id", 1):
            yield raw["_id"], raw.get("state")

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

    def close(self) -> None:
        self.client.close()

    def transient(self, exc: Exception) -> bool:
        return isinstance(exc, (ConnectionFailure, OperationFailure)) and not isinstance(
            exc, InvalidDocument
        )
