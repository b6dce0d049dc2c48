"""Descriptions as plain data: the base class and the field validators they share (made from
pilot/validate.py's checks by `field`, which names the description in their errors).

A description lists its fields as {name: (default, validator)}.  Building one, or setting a
field, runs the field's validator (types and ranges) and then `check()` (cross-field rules);
nothing else happens: no file is read and nothing is sized (that is done where a pilot is
submitted, partition/plan.py).  A bad value raises ValueError naming the description, the
field, the value and what would be accepted.  Unknown keys are errors, never ignored.
One serialisation: `to_stored()` (the fields not at their default, as plain data: the wire and
database form) and `from_stored()` back; `as_dict()` (RADICAL-Pilot's) shows every field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pilot import validate


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
        # a base's field with an immutable default (a class attribute there) that is a field
        # with a mutable default here, or another field's alias: the base's default must not
        # answer for it (__getattr__ does)
        based = {n for b in cls.__mro__[1:] for n in vars(b).get("_DEFAULTS", ())}
        own = set(cls._MUTABLE) | set(cls.ALIASES).difference(cls.FIELDS)
        for name in based.intersection(own).difference(cls.__dict__):
            setattr(cls, name, _ASK_GETATTR)

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
        """The names of its fields (dict-style, as RP scripts use it)."""
        return self.FIELDS.keys()

    def get(self, name: str, default: Any = None) -> Any:
        """Field `name` (or an alias of one), or `default` when there is no such field."""
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


class _AskGetattr:
    """A name a base class has as a field with an immutable default (a class attribute there)
    and a subclass as a field with a mutable default or as an alias: reading it falls through
    to `Description.__getattr__` (a fresh default, or the field the alias names)."""

    def __get__(self, obj, owner=None):
        raise AttributeError


_ASK_GETATTR = _AskGetattr()


def _plain(value: Any) -> Any:
    if isinstance(value, Description):
        return value.to_stored()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def field(check: validate.Check) -> Callable:
    """A description's validator (owner, field, value) from a check of pilot/validate.py: its
    error is a ValueError naming the owner's class, the field, the value and what is accepted."""

    def validator(owner, name, value):
        try:
            return check(name, value)
        except validate.BadValue as exc:
            raise exc.owned(type(owner).__name__) from None

    return validator


def field_error(owner: Any, field: str, value: Any, accepted: str) -> ValueError:
    return validate.bad(field, value, accepted).owned(type(owner).__name__)


# ---- the validators descriptions share (pilot/validate.py's checks, as fields) -------------------
COUNT_MAX = validate.COUNT_MAX  # cores, GPUs, ranks, nodes
MINUTES_MAX = validate.MINUTES_MAX


def count(minimum: int = 0, allow: tuple = ()) -> Callable:
    return field(validate.count(minimum, allow=allow))


def optional_count(minimum: int = 0, allow: tuple = ()) -> Callable:
    return field(validate.optional(validate.count(minimum, allow=allow)))


def text(optional: bool = True) -> Callable:
    return field(validate.nonempty(optional))


def one_of(*accepted, none: bool = False) -> Callable:
    return field(validate.one_of(accepted, none=none))


str_list = field(validate.list_of(validate.str_like, "a list of strings", none_is_empty=True))


def _env_name(where, value):
    if not isinstance(value, str) or not value or "=" in value or "\0" in value:
        raise validate.bad(where, value, "a non-empty string without '=' or NUL")
    return value


str_dict = field(
    validate.dict_of(
        _env_name, validate.str_like, "a mapping of strings to strings", none_is_empty=True
    )
)
flag = field(validate.flag())
positive_minutes = field(
    validate.positive(f"a number of minutes > 0 and <= {MINUTES_MAX}", MINUTES_MAX)
)
amount = field(validate.amount)


def _pool_type(where, value):
    if not isinstance(value, str) or not value.isidentifier():
        raise validate.bad(where, value, "a resource type name (letters, digits, _)")
    if value in ("cpus", "gpus"):
        raise validate.bad(where, value, "a user-defined type; use cores= / gpus=")
    return value


amounts = field(
    validate.dict_of(
        _pool_type, validate.amount, "a mapping of resource type to count", none_is_empty=True
    )
)
