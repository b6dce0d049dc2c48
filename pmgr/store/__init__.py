"""State stores: one interface (base.StateStore), an embedded sqlite backend (the default)."""

from pmgr.store.base import StateStore, open_store

__all__ = ["StateStore", "open_store"]
