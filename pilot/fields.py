"""Descriptions as plain data: the base class and the field validators they share.

A description lists its fields as {name: (default, validator)}.  Building one, or setting a
field, runs the field's validator (types and ranges) and then `check()` (cross-field rules);
nothing else happens: no file is read and nothing is sized (that is done where a pilot is
submitted, partition/plan.py).  A bad value raises ValueError naming the description, the
field, the value and what would be accepted.  Unknown keys are errors, never ignored.
One serialisation: `to_stored()` (the fields not at their default, as plain data: the wire and
database form) and `from_stored()` back; `as_dict()` (RADICAL-Pilot's) shows every field.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


class Description:
    """Base: subclasses list their fields as {name: (default, validator)}.

    A validator gets (owner, field, value) and returns the value to store or raises ValueError.
    """

    FIELDS: dict[str, tuple[Any, Callable]] = {}
    ALIASES: dict[str, str] = {}  # another name (RADICAL-Pilot's) -> the field it sets
    VALIDATE_DEFAULT: tuple = ()  # fields whose validator runs for the default too
    _MUTABLE: tuple = ()
    _DEFAULTS: dict = {}
    _TEMPLATE: dict = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        # an immutable default is a class attribute: reading a field left at its default is a
        # plain attribute look-up (not __getattr__; ~58 reads per unit on the submit path);
        # mutable defaults (list, dict) still come from __getattr__, a fresh one per object
        cls._MUTABLE = tuple(n for n, (d, _) in cls.FIELDS.items() if isinstance(d, (list, dict)))
        cls._DEFAULTS = {n: d for n, (d, _) in cls.FIELDS.items() if n not in cls._MUTABLE}
        # as_dict's template, in field order (mutable ones filled per call)
        cls._TEMPLATE = {n: None if n in cls._MUTABLE else d for n, (d, _) in cls.FIELDS.items()}
        for name, default in cls._DEFAULTS.items():
            if name not in cls.__dict__ and not hasattr(Description, name):
                setattr(cls, name, default)

    def __init__(self, from_dict: dict | None = None, **kwargs: Any) -> None:
        if from_dict is not None:  # RP style: Description({"key": value, ...})
            if not isinstance(from_dict, dict):
                raise ValueError(
                    f"{type(self).__name__}: the first argument must be a dict of fields, "
                    f"not {from_dict!r}; accepted keys: {sorted(self.FIELDS)}"
                )
            kwargs = {**from_dict, **kwargs}
        for alias, name in self.ALIASES.items():
            if alias in kwargs:
                if name in kwargs and kwargs[name] != kwargs[alias]:
                    raise ValueError(
                        f"{type(self).__name__}: {alias}={kwargs[alias]!r} and "
                        f"{name}={kwargs[name]!r} are the same field; give one"
                    )
                kwargs[name] = kwargs.pop(alias)
        unknown = set(kwargs) - set(self.FIELDS)
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: unknown key(s) {sorted(unknown)}; "
                f"accepted: {sorted(self.FIELDS)}"
            )
        for name in self.VALIDATE_DEFAULT:
            if name not in kwargs:
                setattr(self, name, self.FIELDS[name][0])
        for name, value in kwargs.items():
            setattr(self, name, value)
        # a field left at its default is not stored (__getattr__ answers it): 100,000 unit
        # descriptions with ~35 fields each, most at their default, cost 1.9 KB less each
        self.check()
        object.__setattr__(self, "_ready", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        name = self.ALIASES.get(name, name)
        if name not in self.FIELDS:
            raise ValueError(
                f"{type(self).__name__}: unknown key {name!r}; accepted: {sorted(self.FIELDS)}"
            )
        object.__setattr__(self, name, self.FIELDS[name][1](self, name, value))
        if self.__dict__.get("_ready"):
            self.check()

    def __getattr__(self, name: str) -> Any:  # only for names that are not attributes
        spec = type(self).FIELDS.get(name)
        if spec is not None:  # a field at its default
            default = spec[0]
            if isinstance(default, (list, dict)):  # never share a mutable default: the
                value = type(default)()  # caller may change it in place, as RP scripts do
                object.__setattr__(self, name, value)
                return value
            return default
        field = type(self).ALIASES.get(name)
        if field is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        return getattr(self, field)

    def with_fields(self, **changes: Any):
        """A copy with `changes` set (each validated, then `check()`); the other fields are
        this one's as they are, held by both (a layer that makes many descriptions alike, as
        rp.Executor a unit per call, copies one instead of building each: ~4x cheaper)."""
        out = object.__new__(type(self))
        object.__setattr__(out, "__dict__", dict(self.__dict__))
        fields = self.FIELDS
        for name, value in changes.items():
            name = self.ALIASES.get(name, name)
            if name not in fields:
                raise ValueError(
                    f"{type(self).__name__}: unknown key {name!r}; accepted: {sorted(fields)}"
                )
            out.__dict__[name] = fields[name][1](out, name, value)
        out.check()
        return out

    # dict-style access, as RP scripts write it: desc["executable"] = "/bin/date"
    def __getitem__(self, name: str) -> Any:
        name = self.ALIASES.get(name, name)
        if name not in self.FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def __setitem__(self, name: str, value: Any) -> None:
        setattr(self, name, value)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.ALIASES.get(name, name) in self.FIELDS

    def __iter__(self):
        return iter(self.FIELDS)

    def keys(self):
        return self.FIELDS.keys()

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def peek(self, name: str) -> Any:
        """A field's value without giving a default one of its own (for readers that never
        change it: a list or dict left at its default is then the shared default)."""
        mine = self.__dict__
        return mine[name] if name in mine else self.FIELDS[name][0]

    def check(self) -> None:
        """Cross-field checks; subclasses override."""

    def to_stored(self) -> dict:
        """The description as plain data, as the wire and the store carry it: the fields not
        at their default (`from_stored` gives the rest back; a unit's description is a few
        fields instead of ~35)."""
        fields = self.FIELDS
        out = {}
        for name, value in self.__dict__.items():
            if name in fields and value != fields[name][0]:
                out[name] = _plain(value)
        return out

    @classmethod
    def from_stored(cls, data: dict):
        """The description `to_stored()` gave (validated again)."""
        return cls(**data)

    def as_dict(self) -> dict:
        """Every field (RADICAL-Pilot's as_dict): the stored form with the defaults."""
        out = self._TEMPLATE.copy()  # in field order; immutable values are safe to share
        for name in self._MUTABLE:
            out[name] = type(self.FIELDS[name][0])()
        out.update(self.to_stored())
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_stored() == self.to_stored()

    def __repr__(self) -> str:
        stored = self.to_stored()
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in stored.items())})"


def _plain(value: Any) -> Any:
    if isinstance(value, Description):
        return value.to_stored()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def field_error(owner: Any, field: str, value: Any, accepted: str) -> ValueError:
    return ValueError(f"{type(owner).__name__}: {field}={value!r} must be {accepted}")


# ---- validators ---------------------------------------------------------------------------------
# Numbers are finite and bounded (no NaN, inf or 10**400 reaches a scheduler); strings hold no
# NUL byte (no program, argument or environment variable can carry one).

COUNT_MAX = 2**31 - 1  # cores, GPUs, ranks, nodes
MINUTES_MAX = 10 * 365 * 24 * 60  # ten years


def _no_nul(owner, field, value: str) -> str:
    if "\0" in value:
        raise field_error(owner, field, value, "a string without NUL bytes")
    return value


def count(minimum: int = 0, allow: tuple = ()) -> Callable:
    def check(owner, field, value):
        if value in allow and isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            extra = f" or one of {allow}" if allow else ""
            raise field_error(owner, field, value, f"an integer >= {minimum}{extra}")
        if value < minimum:
            raise field_error(owner, field, value, f">= {minimum}")
        if value > COUNT_MAX:
            raise field_error(owner, field, value, f"<= {COUNT_MAX}")
        return value

    return check


def optional_count(minimum: int = 0, allow: tuple = ()) -> Callable:
    inner = count(minimum, allow)
    return lambda owner, field, value: None if value is None else inner(owner, field, value)


def text(optional: bool = True) -> Callable:
    def check(owner, field, value):
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise field_error(owner, field, value, "a non-empty string")
        return _no_nul(owner, field, value)

    return check


def str_list(owner, field, value):
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise field_error(owner, field, value, "a list of strings")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise field_error(owner, f"{field}[{i}]", v, "a string (or number)")
        out.append(_no_nul(owner, f"{field}[{i}]", str(v)))
    return out


def str_dict(owner, field, value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise field_error(owner, field, value, "a mapping of strings to strings")
    for k, v in value.items():
        if not isinstance(k, str) or not k or "=" in k or "\0" in k:
            raise field_error(owner, f"{field} key", k, "a non-empty string without '=' or NUL")
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise field_error(owner, f"{field}[{k!r}]", v, "a string (or number)")
        _no_nul(owner, f"{field}[{k!r}]", str(v))
    return {k: str(v) for k, v in value.items()}


def _finite(value) -> bool:
    """A bool-free int or float that is finite (huge ints included: they are finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def flag(owner, field, value):
    if not isinstance(value, bool):
        raise field_error(owner, field, value, "True or False")
    return value


def positive_minutes(owner, field, value):
    if not _finite(value) or not 0 < value <= MINUTES_MAX:
        raise field_error(owner, field, value, f"a number of minutes > 0 and <= {MINUTES_MAX}")
    return value


def amount(owner, field, value):
    """A count of slots: a whole number >= 0, or a fraction of one slot (0 < x < 1)."""
    if not _finite(value) or not 0 <= value <= COUNT_MAX or (value >= 1 and value != int(value)):
        raise field_error(
            owner, field, value, f"a whole number 0..{COUNT_MAX} or a fraction 0 < x < 1"
        )
    return int(value) if value >= 1 or value == 0 else float(value)


def amounts(owner, field, value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise field_error(owner, field, value, "a mapping of resource type to count")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise field_error(owner, f"{field} key", k, "a resource type name (letters, digits, _)")
        if k in ("cpus", "gpus"):
            raise field_error(owner, f"{field} key", k, "a user-defined type; use cores= / gpus=")
        out[k] = amount(owner, f"{field}[{k!r}]", v)
    return out
