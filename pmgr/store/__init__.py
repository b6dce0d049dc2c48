"""State stores: one interface (base.StateStore), one backend per file.

sqlite:///PATH           pmgr/store/sqlite.py   embedded, the default
mongodb://...            pmgr/store/mongo.py    MongoDB through pymongo
null://                  pmgr/store/null.py     persists nothing (benchmarks)
"""

from __future__ import annotations

import os

from pilot.config import plugins
from pilot.pmgr.store.base import StateStore

__all__ = ["StateStore", "open_existing", "open_store"]


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


def open_existing(url: str) -> StateStore:
    """A store that is there already, to read (the `pilot` commands that read one): a sqlite
    file that does not exist is not made, and a store that cannot be opened (a file that is
    not a database, a directory that is not there, a server that does not answer) is a
    ValueError naming the URL and why."""
    if isinstance(url, str) and url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not os.path.isfile(path):
            raise ValueError(f"database_url={url!r}: there is no file {path}")
    try:
        return open_store(url)
    except ValueError:
        raise
    except Exception as exc:  # (sqlite3's, pymongo's, the file system's: said, not a traceback)
        raise ValueError(f"database_url={url!r}: {type(exc).__name__}: {exc}") from None
