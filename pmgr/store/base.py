"""The StateStore interface: where sessions, pilots, partitions and units are persisted.

Data model (one table / collection per kind, readable field names):
    sessions    {uid, created, dir, url}
    pilots      {uid, session, state, description, size, reason, ...}
    partitions  {uid, session, pilot, state, description, resources, reason}
    units       {uid, session, pilot, partition, state, description, exit_code, reason, node}
    history     {session, kind, uid, state, ts, reason}: one row per state change
Writes come in batches (`write_batch`), each applied as one transaction (sqlite) or one bulk
write (MongoDB); only the client writes.  Reads serve recovery, the CLI and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("sessions", "pilots", "partitions", "units")


@dataclass
class Batch:
    docs: dict[str, dict[str, dict]] = field(default_factory=lambda: {k: {} for k in KINDS})
    history: list[tuple] = field(default_factory=list)  # (session, kind, uid, state, ts, reason)

    def __len__(self) -> int:
        return sum(len(d) for d in self.docs.values()) + len(self.history)


class StateStore:
    url: str

    def write_batch(self, batch: Batch) -> None:
        raise NotImplementedError

    def get(self, kind: str, uid: str) -> dict | None:
        raise NotImplementedError

    def find(self, kind: str, **where) -> list[dict]:
        raise NotImplementedError

    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def open_store(url: str) -> StateStore:
    """A store for `url`: sqlite:///PATH (embedded) or mongodb://... ."""
    if url.startswith("sqlite:///"):
        from pmgr.store.sqlite import SqliteStore

        return SqliteStore(url)
    if url.startswith(("mongodb://", "mongodb+srv://")):
        raise ValueError(
            f"database_url={url!r}: the MongoDB backend is not available yet; "
            "accepted now: sqlite:///PATH"
        )
    raise ValueError(f"database_url={url!r} must start with sqlite:/// or mongodb://")
