"""The null store: persists nothing; the baseline when a benchmark measures what persistence
costs (`null://`)."""

from __future__ import annotations

from pilot.pmgr.store.base import Batch, StateStore, check_kind


class NullStore(StateStore):
    """Persists nothing: the baseline when measuring what persistence costs."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.counters: dict[str, int] = {}

    def write_batch(self, batch: Batch) -> None:
        pass

    def get(self, kind: str, uid: str) -> dict | None:
        check_kind(kind)
        return None

    def find(self, kind: str, **where) -> list[dict]:
        check_kind(kind, where)
        return []

    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]:
        return []

    def reserve(self, counter: str, n: int) -> int:
        first = self.counters.get(counter, 0)  # (one process: nothing else to agree with)
        self.counters[counter] = first + n
        return first
