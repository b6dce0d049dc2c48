"""State stores: one interface (base.StateStore), one backend per file.

sqlite:///PATH           pmgr/store/sqlite.py   embedded, the default
mongodb://...            pmgr/store/mongo.py    MongoDB through pymongo
null://                  pmgr/store/null.py     persists nothing (benchmarks)
"""

from __future__ import annotations

from pilot.pmgr.store.base import StateStore

__all__ = ["StateStore", "open_store"]


def open_store(url: str) -> StateStore:
    """A store for `url`: sqlite:///PATH (embedded) or mongodb://... ."""
    if url.startswith("sqlite:///"):
        from pilot.pmgr.store.sqlite import SqliteStore

        return SqliteStore(url)
    if url.startswith(("mongodb://", "mongodb+srv://")):
        from pilot.pmgr.store.mongo import MongoStore  # pymongo is imported only for MongoDB

        return MongoStore(url)
    if url == "null://":
        from pilot.pmgr.store.null import NullStore

        return NullStore(url)
    raise ValueError(
        f"database_url={url!r} must start with sqlite:/// or mongodb:// (or be null:// for "
        "no persistence, in benchmarks)"
    )
