"""The StateStore interface: where sessions, pilots, partitions and units are persisted.

Data model (one table / collection per kind; field names are the ones a person reads):
    sessions    uid, created, dir, url
    pilots      uid, session, state, reason, sandbox, job, description*, size*
    partitions  uid, session, pilot, state, reason, description*, resources*
    units       uid, session, pilot, partition, state, reason, exit_code, node, slots*,
                description*, return_value (a function unit's: base64 of its pickle; from
                LARGE bytes on a file of the session's data directory, "\x00file:NAME"),
                exception (a function unit's, "Type: message"), kept* (the stdout / stderr
                that travelled with its final state: a function's, a `cleanup` unit's),
                times* (its history [[state, ts], ...], once it is final: a unit read back
                needs no search of the history)
    history     session, kind, uid, state, ts, reason, seq: one row per state change; seq is
                the change's place in the object's history (0 = NEW), so (uid, seq) is unique
(* structured: JSON text in sqlite, sub-documents in MongoDB.)
A unit's description holds the fields not at their default, its policy whole
(ComputeUnitDescription.to_stored; from_dict fills in the rest).  Units made from one
description share it: the writer hands the store a `Template` (its JSON text made once) and
the store keeps each distinct text once (sqlite: a row of `templates`, the unit's row names
it; MongoDB: a document of `templates`); a read gives the description back as a dict, as
ever.  A unit's own fields (its `arguments`: a sweep's units differ in nothing else) are not in
the template: its first doc carries `Own(template, fields)`, and the store keeps those fields
with the unit (sqlite and MongoDB: in `description`, while `template` names the shared part); a
read gives the description back whole, the unit's fields over the template's.
Units' state changes come in columns (`UnitMoves`: the moves of a batch to one state),
one history record a group instead of a row a move; every read of the history (`history`,
`iter_history`, `last_events`) gives them back as rows, so a reader cannot tell the two apart.

Writes come in batches (`write_batch`), each applied as one transaction (sqlite) or one bulk
write (MongoDB); only the client writes.  Every write is idempotent: docs are upserts and a
history row whose (uid, seq) is stored already is not stored again, so a batch retried after a
failure that left part of it written (a server killed mid-write) duplicates nothing.  A doc in
a batch is an upsert of the fields it holds: `description` is sent once, when an object is
first written, and kept from then on.
One final record, one owner (docs/guarantees.md), held by the store itself, not by its
writers' good behaviour:
    final once   a unit, partition or pilot whose stored state is final (DONE, FAILED,
                 CANCELED) keeps it: a write that would give it another state (a second final
                 one, or any later one) is refused, atomically with the write (sqlite: a
                 trigger on the row; MongoDB: a condition on the document), its history rows
                 of that batch dropped with it; the refusal is kept (`refusals`) with both
                 records and handed back to the writer, which logs it.  Writing the same final
                 state again (a retried batch) is no refusal.
    owner epoch  each client that owns a session holds an epoch: a new session's first
                 client, and every client whose attach its pilots accepted, takes the next one
                 (`next_epoch`, then `install_epoch` once accepted: the store keeps the
                 highest, with who holds it).  A store given its client's epoch (`own`)
                 checks it in the same transaction as every write (`write_batch`,
                 `put_mark`): a newer epoch installed means this client was deposed, and the
                 write is refused whole (`Fenced`), whatever its timing.
Reads serve recovery, the CLI and tests.  The views of a session of 10^7 units (`pilot
status`, `export`, `plot`, `top`, the chrome trace) read through the streaming and aggregating
ones (`iter_history`, `history_span`, `unit_counts`, `last_events`, `get_many`), which hold a
page of rows or a count per group, never a list of the session's units or history.
"""

from __future__ import annotations

import json
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pilot.wire import framed

if TYPE_CHECKING:
    from pilot.pmgr.store.data_files import DataFiles

_dumps = json.JSONEncoder(separators=(",", ":")).encode

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
        "jobs",  # the batch jobs it grew by (pmgr/core/pilot_jobs.py)
        "adapt",  # its adapt policy's decisions (pmgr/core/adapt.py)
    ),
    "partitions": (
        "uid",
        "session",
        "pilot",
        "state",
        "reason",
        "description",
        "resources",
        "started_by",  # the id of the reconfig command that started it (None: the pilot's own)
        "stopped_by",  # the id of the reconfig command that stopped it
    ),
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
        "times",
    ),
}
STRUCTURED = frozenset(
    ("description", "size", "resources", "slots", "node", "kept", "times", "jobs", "adapt")
)
KEPT = frozenset(("description",))  # fields a later upsert without them does not clear
HISTORY = ("session", "kind", "uid", "state", "ts", "reason", "seq")
_UNIT_INDEX = {f: i for i, f in enumerate(FIELDS["units"])}
PAGE = 10_000  # rows a streaming read fetches at a time


class Fenced(Exception):
    """A deposed owner's write, refused: the store holds a newer owner epoch for the session
    than the writing client's (`current`, held by `owner`: {host, pid, since})."""

    def __init__(self, session: str, mine: int, current: int, owner: dict | None) -> None:
        who = owner or {}
        super().__init__(
            f"{session}: this client (owner epoch {mine}) was deposed: the store's owner is "
            f"epoch {current} (the client on {who.get('host')}, pid {who.get('pid')}); its "
            "writes are refused"
        )
        self.session, self.mine, self.current, self.owner = session, mine, current, who


class StoreRenewed(OSError):
    """The store's file was lost under it (deleted, replaced) and a new one made in its place:
    nothing was written of the batch, and the new store holds nothing of what was written
    before; the client writes what it still holds again (the store writer's `on_renewed`)."""


@dataclass
class Refusal:
    """A write the store refused because the object's stored state is final already: the
    record it keeps and the one it refused (`final once`, the module's header)."""

    kind: str
    uid: str
    stored_state: str | None
    stored_reason: str | None
    refused_state: str | None
    refused_reason: str | None

    def __str__(self) -> str:
        return (
            f"{self.uid}: refused a later record ({self.refused_state}: "
            f"{self.refused_reason!r:.200}) of a final one ({self.stored_state}: "
            f"{self.stored_reason!r:.200})"
        )


class UnitDoc(tuple):
    """A unit's doc as the client's writer makes it: its fields in FIELDS["units"] order (a
    tuple costs a fraction of a dict to make, and the sqlite store takes it as its row), read
    like a dict with `get` and `items` (a field by index: d[FIELDS["units"].index(name)]).
    One made with its description is the unit's first: the unit is new to the store (its
    uid was reserved there)."""

    __slots__ = ()

    def get(self, key: str, default=None):
        i = _UNIT_INDEX.get(key)
        return default if i is None else tuple.__getitem__(self, i)

    def items(self):
        return zip(FIELDS["units"], self)

    def keys(self):
        return FIELDS["units"]


def text_key(text: str | bytes) -> int:
    """A description text's lookup key: its length and CRC-32 (texts that share one are told
    apart by their text; a store finds a template by an index on it, not a scan)."""
    # (cast: the checker does not narrow the else branch of a `type(...) is` test)
    data = text if type(text) is bytes else cast(str, text).encode()
    return (len(data) << 32) | zlib.crc32(data)


class TextIds:
    """The templates a store wrote, by text -> id: what the next unit of a description finds
    without a read.  Bounded (a sweep makes a description a unit): at most MOST texts of
    CHARS_MOST characters together, the oldest go first, and a text over TEXT_MAX characters
    (a call's large arguments) is not kept at all (at MOST texts alone, units of 12 KB
    environments each held ~50 MB here)."""

    MOST = 4096
    CHARS_MOST = 4 << 20
    TEXT_MAX = 16_384

    __slots__ = ("ids", "chars")

    def __init__(self) -> None:
        self.ids: dict[str | bytes, object] = {}
        self.chars = 0

    def get(self, text: str | bytes):
        return self.ids.get(text)

    def update(self, made: dict) -> None:
        ids = self.ids
        for text, tid in made.items():
            if len(text) <= self.TEXT_MAX and text not in ids:
                while ids and (len(ids) >= self.MOST or self.chars + len(text) > self.CHARS_MOST):
                    oldest = next(iter(ids))
                    self.chars -= len(oldest)
                    del ids[oldest]
                ids[text] = tid
                self.chars += len(text)


def encode(value) -> str | bytes:
    """A structured field as stored when no data files are at hand: JSON text, or (holding
    bytes) one BLOB of JSON and its frames (pilot/wire/framed.py)."""
    try:
        return _dumps(value)
    except TypeError:
        return framed.encode(value)


class Template:
    """A description many units share: its value (a dict) and its JSON text, made once; text
    None when it holds bytes (a call's large arguments: the store writes those as files,
    pmgr/store/data_files.py, and gives the template a row of its own)."""

    __slots__ = ("value", "text", "files")

    def __init__(self, value: dict) -> None:
        self.value = value
        self.text: str | None
        self.files: dict[int, str] = {}  # id(bytes) -> the file the store wrote them to
        try:
            self.text = _dumps(value)
        except TypeError:
            self.text = None


class Own:
    """A unit's description as its first doc carries it when the unit has fields of its own
    (pmgr/core/blueprint.py: its arguments): the Template it shares with the units of its
    description, and its own fields (a dict), which a read lays over the template's."""

    __slots__ = ("template", "fields")

    def __init__(self, template: Template, fields: dict) -> None:
        self.template = template
        self.fields = fields


def laid_over(template: dict | None, own: dict | None) -> dict | None:
    """A description read back: a unit's own fields over its template's, a field that is a
    mapping on both sides merged (a call's arguments over its function's pickle: as sqlite's
    json_patch lays them)."""
    if own is None:
        return template
    if not template:
        return dict(own)
    out = {**template, **own}
    for k, v in own.items():
        t = template.get(k)
        if type(v) is dict and type(t) is dict:
            out[k] = {**t, **v}
    return out


@dataclass
class UnitMoves:
    """Units that moved to one state, in one batch: their history rows in columns.

    `seqs`, `reasons` and `prev` are lists aligned with `uids`, or one value for all (a
    reason None for all: None).  `prev` is the state each unit left (None: its first row)
    and `held` (sqlite's unit_flow) what each holds while EXECUTING, (partition, cores, gpus),
    for a move into or out of EXECUTING (else None); None for all when no move has one.
    `key` names the record once for good: a retried write stores it once."""

    session: str
    state: str
    uids: list
    ts: list
    seqs: list | int
    reasons: list | str | None = None
    prev: list | str | None = None
    held: list | None = None
    key: str | None = None

    def rows(self) -> Iterator[tuple]:
        """Its rows in HISTORY order."""
        # (Any: each a list or one value for all, told apart once here, not at every row)
        seqs: Any = self.seqs
        reasons: Any = self.reasons
        one_seq = not isinstance(seqs, list)
        one_reason = not isinstance(reasons, list)
        session, state = self.session, self.state
        for i, uid in enumerate(self.uids):
            yield (
                session,
                "units",
                uid,
                state,
                self.ts[i],
                reasons if one_reason else reasons[i],
                seqs if one_seq else seqs[i],
            )

    def column(self, name: str) -> list:
        v = getattr(self, name)
        return v if isinstance(v, list) else [v] * len(self.uids)

    def without(self, uids: set) -> UnitMoves | None:
        """These moves but those of `uids` (refused: `final once`), or None when none is
        left; the same key (a retried batch refuses the same ones)."""
        keep = [i for i, u in enumerate(self.uids) if u not in uids]
        if len(keep) == len(self.uids):
            return self
        if not keep:
            return None

        def pick(v):
            return [v[i] for i in keep] if isinstance(v, list) else v

        held = None if self.held is None else [self.held[i] for i in keep]
        return UnitMoves(
            self.session,
            self.state,
            [self.uids[i] for i in keep],
            [self.ts[i] for i in keep],
            pick(self.seqs),
            pick(self.reasons),
            pick(self.prev),
            held,
            self.key,
        )


@dataclass
class UnitsPlaced:
    """Units whose docs are written together: new ones (`template`: their description; their
    first write, every other field empty), or ones the store has whose pilot and partition
    alone changed (`template` None: a unit that waited at the client, placed now); `own`:
    each new unit's own fields (a dict, or None), aligned with `uids`, None when no unit has
    any.  A store may write them as the docs `docs()` gives (as MongoDB does); sqlite writes
    each as one statement."""

    session: str
    state: str
    pilot: str | None
    partition: str | None
    uids: list
    template: Template | None = None
    own: list | None = None

    def docs(self) -> Iterator[tuple[str, dict]]:
        own = self.own
        for i, uid in enumerate(self.uids):
            doc = {
                "uid": uid,
                "session": self.session,
                "pilot": self.pilot,
                "partition": self.partition,
                "state": self.state,
            }
            if self.template is not None:
                mine = own[i] if own is not None else None
                doc["description"] = self.template if mine is None else Own(self.template, mine)
            yield uid, doc


@dataclass
class Batch:
    docs: dict[str, dict[str, dict]] = field(default_factory=lambda: {k: {} for k in KINDS})
    history: list[tuple] = field(default_factory=list)  # rows in HISTORY order
    moves: list[UnitMoves] = field(default_factory=list)  # units' rows, in columns
    placed: list[UnitsPlaced] = field(default_factory=list)  # units' docs, together

    def __len__(self) -> int:
        return (
            sum(len(d) for d in self.docs.values())
            + len(self.history)
            + sum(len(m.uids) for m in self.moves)
            + sum(len(p.uids) for p in self.placed)
        )

    def without(self, refused: dict[str, set]) -> None:
        """Drop the history rows and moves of the uids `refused` ({kind: uids}): the
        objects whose doc the store refused (their rows would record a state it does not
        keep)."""
        every = set().union(*refused.values()) if refused else set()
        if not every:
            return
        self.history = [r for r in self.history if r[2] not in every]
        moves = (m.without(every) for m in self.moves)
        self.moves = [m for m in moves if m is not None]

    def unit_docs(self) -> dict[str, dict]:
        """The units' docs, those of `placed` included (for a store that writes docs only)."""
        if not self.placed:
            return self.docs["units"]
        out = dict(self.docs["units"])
        for p in self.placed:
            out.update(p.docs())
        return out


class StateStore(ABC):
    """One backend per file: pmgr/store/sqlite.py, mongo.py, null.py; `pmgr.store.open_store`
    picks one by URL.  The contract tests (tests/test_store_contract.py) hold for each."""

    url: str
    # pmgr/store/data_files.py's DataFiles: where large bytes go (None: in the doc)
    data: DataFiles | None = None
    reads_back = True  # a unit written is read back (False: the null store; nothing is let go)
    # records the store writer puts in one write_batch, and once it is behind (pmgr/store/
    # writer.py); a store whose commit has a fixed cost (sqlite's fsyncs) takes more
    BATCH_RECORDS: tuple[int, int] = (500, 500)

    fence: tuple[str, int] | None = None  # (session, this client's owner epoch): `own`

    @abstractmethod
    def write_batch(self, batch: Batch) -> list[Refusal]:
        """Write the batch in one transaction; the records refused (`final once`), whose
        history rows were dropped with them.  Fenced (nothing written) when the store holds
        a newer owner epoch than `fence`'s."""

    @abstractmethod
    def get(self, kind: str, uid: str) -> dict | None: ...

    @abstractmethod
    def find(self, kind: str, **where) -> list[dict]: ...

    @abstractmethod
    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]: ...

    def histories(self, uids: Iterable[str], session: str | None = None) -> dict[str, list[dict]]:
        """{uid: history(uid=uid, session=session)} for many units at once (the units an
        attaching client adopts).  A store whose read of one unit's history scans, as
        sqlite's does its moves rows, reads them in one pass instead."""
        return {uid: self.history(uid=uid, session=session) for uid in uids}

    def unit_states(self, session: str):
        """(uid, state) of every unit of the session, streamed (an attach to a session of
        10^7 units holds no doc of a final one)."""
        for doc in self.find("units", session=session):
            yield doc["uid"], doc["state"]

    def open_units(self, session: str) -> list[dict]:
        """The docs of the session's units that are not in a final state."""
        return [d for d in self.find("units", session=session) if d["state"] not in FINAL]

    def rows_pending(self, session: str) -> list[dict]:
        """The final docs of the session's units whose batch may have been written without its
        history rows (the writer died between them): a store whose batch is one transaction
        has none (sqlite); MongoDB's (pmgr/store/mongo.py) records them until the rows are in."""
        return []

    def clear_rows_pending(self, session: str) -> None:  # noqa: B027 (none to clear)
        """The rows of what `rows_pending` gave are written now: its records go."""

    def iter_history(self, session: str, kinds: Iterable[str] | None = None) -> Iterator[tuple]:
        """`session`'s history rows (tuples in HISTORY order), of `kinds` only if given, oldest
        first (sqlite: in the order written; MongoDB: by ts, rows of one ts in no set order),
        read PAGE rows at a time."""
        wanted = set(kinds) if kinds is not None else None
        for row in self.history(session=session):
            if wanted is None or row["kind"] in wanted:
                yield tuple(row[k] for k in HISTORY)

    def unit_flow(self, session: str) -> list[tuple] | None:
        """`session`'s unit_flow rows (series, tick, s1, s2: pmgr/store/flow.py), or None when
        this store does not keep them for it (then a plot streams the history)."""
        return None

    def history_span(self, session: str) -> tuple[float | None, float | None]:
        """(first ts, last ts) of `session`'s history; (None, None) without one."""
        lo = hi = None
        for row in self.iter_history(session):
            ts = row[4]
            lo = ts if lo is None or ts < lo else lo
            hi = ts if hi is None or ts > hi else hi
        return lo, hi

    def unit_counts(
        self, session: str, pilot: str | None = None, by: tuple[str, ...] = ("partition", "state")
    ) -> dict[tuple, int]:
        """{(values of `by`): number of `session`'s units (of `pilot`, if given)}, counted
        where the data is (SQL GROUP BY, an aggregation pipeline)."""
        check_kind("units", dict.fromkeys(by))
        where = {"session": session} if pilot is None else {"session": session, "pilot": pilot}
        counts: dict[tuple, int] = {}
        for doc in self.find("units", **where):
            key = tuple(doc.get(f) for f in by)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def last_events(self, session: str, n: int) -> list[dict]:
        """The last `n` (by ts) of `session`'s history rows that are a pilot's or a
        partition's change or a unit's FAILED, oldest first (what `pilot top` lists)."""
        rows = [
            r
            for r in self.history(session=session)
            if r["kind"] != "units" or r["state"] == "FAILED"
        ]
        rows.sort(key=lambda r: (r["ts"], r["seq"]))
        return rows[-n:] if n > 0 else []

    def get_many(
        self, kind: str, uids: Iterable[str], fields: tuple[str, ...] | None = None
    ) -> dict[str, dict]:
        """{uid: doc} of the `uids` that are stored (only `fields` and uid, if given),
        fetched in chunks.  For reading: docs may share a structured value (a description
        stored alike), so change none."""
        check_kind(kind, dict.fromkeys(fields or ()))
        out = {}
        for uid in uids:
            doc = self.get(kind, uid)
            if doc is not None:
                out[uid] = doc if fields is None else {f: doc.get(f) for f in ("uid", *fields)}
        return out

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

    def put_mark(self, name: str, value: str) -> None:
        """Keep `value` under `name` for good (durably, before it returns; written again, the
        value is replaced): what a client must find after it died, beside the batches, such
        as a named stream's segments (pmgr/core/stream_marks.py).  (This default keeps it in this
        process only: a store several processes share overrides it, as sqlite and MongoDB
        do.)"""
        self.__dict__.setdefault("_marks", {})[name] = value

    def marks(self, prefix: str) -> dict[str, str]:
        """{name: value} of the marks whose name starts with `prefix`."""
        kept = self.__dict__.get("_marks", {})
        return {k: v for k, v in kept.items() if k.startswith(prefix)}

    # -- owners (the module's header: owner epoch) ---------------------------------------------
    def next_epoch(self, session: str) -> int:
        """A new owner epoch for `session`, higher than every one handed out before (a
        client asks before it attaches; it holds the session once `install_epoch` took it)."""
        return self.reserve(f"{session}/epoch", 1) + 1

    def install_epoch(self, session: str, epoch: int, owner: dict) -> None:
        """`owner` ({host, pid, since}) holds `session` from now on, with `epoch`: written
        only if no higher epoch is installed (Fenced otherwise), atomically; this store's
        writes carry it from now on (`own`).  (This default keeps it in this process.)"""
        owners = self.__dict__.setdefault("_owners", {})
        current = owners.get(session)
        if current is not None and current[0] > epoch:
            raise Fenced(session, epoch, current[0], current[1])
        owners[session] = (epoch, dict(owner))
        self.own(session, epoch)

    def own(self, session: str, epoch: int) -> None:
        """This store's writes are `session`'s owner `epoch`'s from now on: checked against
        the installed one with each write."""
        self.fence = (session, epoch)

    def owner_of(self, session: str) -> dict | None:
        """{epoch, host, pid, since} of the session's installed owner, or None."""
        got = self.__dict__.get("_owners", {}).get(session)
        return None if got is None else {"epoch": got[0], **got[1]}

    def refusals(self, session: str | None = None) -> list[dict]:
        """The writes refused because their object's stored state was final (`final once`),
        oldest first: {ts, session, kind, uid, stored_state, stored_reason, refused_state,
        refused_reason}."""
        return []

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
