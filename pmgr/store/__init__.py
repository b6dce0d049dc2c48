"""State stores: one interface (base.StateStore), one backend per file.

sqlite:///PATH           pmgr/store/sqlite.py   embedded, the default
mongodb://...            pmgr/store/mongo.py    MongoDB through pymongo
null://                  pmgr/store/null.py     persists nothing (benchmarks)
"""

from __future__ import annotations

from pilot.config import plugins
from pilot.pmgr.store.base import StateStore

__all__ = ["StateStore", "open_store"]


def open_store(url: str) -> StateStore:
    """A store for `url`: sqlite:///PATH (embedded) or mongodb://... (the schemes are named in
    pilot/config/plugins.py, STORES; pymongo is imported only for MongoDB)."""
    scheme, sep, _ = url.partition("://") if isinstance(url, str) else ("", "", "")
    if not sep or scheme not in plugins.STORES:
        raise ValueError(
            f"database_url={url!r} must start with sqlite:/// or mongodb:// (or be null:// for "
            "no persistence, in benchmarks)"
        )
    return plugins.load(plugins.STORES, scheme, "database_url scheme")(url)
