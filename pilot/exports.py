"""A package's declared names, imported on first use (PEP 562).

A package that other layers use through a fixed set of names (the client's core for its faces,
each face for the user API) lists them as {name: module} and gets its `__getattr__`, `__dir__`
and `__all__` from `declare`; tests/test_layers.py checks that the layers above import only
those names, from the package itself.  Nothing is imported until a name is first asked for, so
a process that needs one module does not load the package."""

from __future__ import annotations

import importlib


def declare(package: str, where: dict[str, str]):
    """(__getattr__, __dir__, __all__) for `package`, whose names live in the modules of
    `where` ({name: module}; an alias is "module:attribute")."""

    def __getattr__(name: str):
        target = where.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr or name)

    def __dir__():
        return sorted(where)

    return __getattr__, __dir__, sorted(where)
