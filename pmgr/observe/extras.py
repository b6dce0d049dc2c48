"""Optional dependencies of the observe views (numpy, matplotlib, rich: the `observe` extra;
tornado: the `dashboard` extra).

`require("matplotlib")` imports a module or raises MissingExtra, an ImportError whose message
says what to install (`require("tornado", "dashboard")`: that extra); callers import lazily,
so the rest of pilot works without the extras.
"""

from __future__ import annotations

import importlib

INSTALL = "pip install 'pilot-partitions[{}]'"


class MissingExtra(ImportError):
    """An optional module of the `observe` extra is not installed."""


def require(name: str, extra: str = "observe"):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingExtra(
            f"{name} is needed for this ({exc}); install it with: {INSTALL.format(extra)}"
        ) from None
