"""The null store: persists nothing; the baseline when a benchmark measures what persistence
costs (`null://`)."""

from __future__ import annotations

from pilot.pmgr.store.base import Batch, StateStore, check_kind


class NullStore(StateStore):
    """Persists nothing: the baseline when measuring what persistence costs.  Nothing can be
    read back, so a manager keeps its finished units as objects (pmgr/core/unit_table.py)."""

    reads_back = False

    def __init__(self, url: str) -> None:
        self.url = url

    def write_batch(self, batch: Batch) -> list:
        return []  # (nothing refused: nothing is kept)

    def get(self, kind: str, uid: str) -> dict | None:
        check_kind(kind)
        return None

    def find(self, kind: str, **where) -> list[dict]:
        check_kind(kind, where)
        return []

    def history(self, uid: str | None = None, session: str | None = None) -> list[dict]:
        return []
