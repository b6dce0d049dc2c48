"""The StateStore interface: where sessions, pilots, partitions and units are persisted.

Data model (one table / collection per kind; field names are the ones a person reads):
    sessions    uid, created, dir, url
    pilots      uid, session, state, reason, sandbox, job, description*, size*
    partitions  uid, session, pilot, state, reason, description*, resources*
    units       uid, session, pilot, partition, state, reason, exit_code, node, slots*,
                description*, return_value (a function unit's, base64 of its pickle),
                exception (a function unit's, "Type: message"), kept* (the stdout / stderr
                that travelled with its final state: a function's, a `cleanup` unit's)
    history     session, kind, uid, state, ts, reason, seq: one row per state change; seq is
                the change's place in the object's history (0 = NEW), so (uid, seq) is unique
(* structured: JSON text in sqlite, sub-documents in MongoDB.)
A unit's description holds the fields not at their default, its policy whole
(ComputeUnitDescription.to_stored; from_dict fills in the rest): 5,000 units stored theirs in
a third of the time, 5 against 11 us each.

Writes come in batches (`write_batch`), each applied as one transaction (sqlite) or one bulk
write (MongoDB); only the client writes.  Every write is idempotent: docs are upserts and a
history row whose (uid, seq) is stored already is not stored again, so a batch retried after a
failure that left part of it written (a server killed mid-write) duplicates nothing.  A doc in
a batch is an upsert of the fields it holds: `description` is sent once, when an object is
first written, and kept from then on.
Reads serve recovery, the CLI and tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

FINAL = ("DONE", "FAILED", "CANCELED")  # (pilot/states.py's: the store needs no import)

KINDS = ("sessions", "pilots", "partitions", "units")
FIELDS = {
    "sessions": ("uid", "created", "dir", "url"),
    "pilots": (
        "uid",
        "session",
        "state",
        "reason",
        "sandbox",
        "job",
        "control",
        "description",
        "size",
    ),
    "partitions": ("uid", "session", "pilot", "state", "reason", "description", "resources"),
    "units": (
        "uid",
        "session",
        "pilot",
        "partition",
        "state",
        "reason",
        "exit_code",
        "node",
        "slots",
        "description",
        "return_value",
        "exception",
        "kept",
    ),
}
STRUCTURED = frozenset(("description", "size", "resources", "slots", "node", "kept"))
KEPT = frozenset(("description",))  # fields a later upsert without them does not clear
HISTORY = ("session", "kind", "uid", "state", "ts", "reason", "seq")


@dataclass
class Batch:
    docs: dict[str, dict[str, dict]] = field(default_factory=lambda: {k: {} for k in KINDS})
    history: list[tuple] = field(default_factory=list)  # rows in HISTORY order

    def __len__(self) -> int:
        return sum(len(d) for d in self.docs.values()) + len(self.history)


class StateStore(ABC):
    """One backend per file: pmgr/store/sqlite.py, mongo.py, null.py; `pmgr.store.open_store`
    picks one by URL.  The contract tests (tests/test_store_contract.py) hold for each."""

    url: str

    @abstractmethod
    def write_batch(self, batch: Batch) -> None: ...

    @abstractmethod
    def get(self, kind: str, uid: str) -> dict | None: ...

    @abstractmethod
    def find(self, kind: str, **where) -> list[dict]: ...

    @abstractmethod
    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]: ...

    def unit_states(self, session: str):
        """(uid, state) of every unit of the session, streamed (an attach to a session of
        10^7 units holds no doc of a final one)."""
        for doc in self.find("units", session=session):
            yield doc["uid"], doc["state"]

    def open_units(self, session: str) -> list[dict]:
        """The docs of the session's units that are not in a final state."""
        return [d for d in self.find("units", session=session) if d["state"] not in FINAL]

    def reserve(self, counter: str, n: int) -> int:
        """Reserve `n` numbers of `counter` for this caller alone (atomically, across every
        client of the store): the first of them.  Every client of a session takes its unit and
        pilot ids this way, so no two hand out the same one.  (This default counts in this
        process only: a store several processes share overrides it, as sqlite and MongoDB
        do.)"""
        counters = self.__dict__.setdefault("_counters", {})
        first = counters.get(counter, 0)
        counters[counter] = first + n
        return first

    def close(self) -> None:  # noqa: B027 (a store with nothing to close need not say so)
        pass

    def transient(self, exc: Exception) -> bool:
        """Whether a write failed for a passing reason (server gone, file locked), so that the
        same records may be written later; other failures are the records' own."""
        return True


def check_kind(kind: str, where: dict | None = None) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} must be one of {KINDS}")
    bad = set(where or ()) - set(FIELDS[kind])
    if bad:
        raise ValueError(f"find({kind}): cannot filter on {sorted(bad)}; accepted: {FIELDS[kind]}")
