"""The checks every validator of the project is built from: types, ranges, one-of, lists and
mappings of a type, sizes.

Four users build their field tables from them: the descriptions (pilot/fields.py), the resource
config's keys (pilot/config/resource_config.py), message bodies (pilot/wire/checks.py,
pilot/wire/messages.py) and EnTK's cpu_reqs / gpu_reqs (pmgr/compat/entk/reqs.py).

A check takes `where` (the field as a person names it: `cores`, `args.stop[2]`,
`resource_pool.gpus`) and the value; it returns the value as kept, or raises BadValue naming the
field, the value and what is accepted: `cores=-4 must be >= 1`.  A check's user adds whose
field it is (a description's class, a resource config's name) with `BadValue.owned`, and only
when a check failed: a passing check is one call, no string is built (message checks run on
the hot path, ~10 per unit message).  The factories (`count`, `one_of`, `list_of`, ...) make a
check once, where a table is built.

Numbers are finite and bounded (no NaN, inf or 10**400 reaches a scheduler); strings that name
things hold no NUL byte (no program, argument or environment variable can carry one).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, overload

Check = Callable[[str, Any], Any]

COUNT_MAX = 2**31 - 1  # cores, GPUs, ranks, nodes
MINUTES_MAX = 10 * 365 * 24 * 60  # ten years
TEXT_MAX = 4096  # a message's string field
LINE_MAX = 1 << 20  # a command-line argument, an environment value, a pre/post exec line
LIST_MAX = 1_000_000
SHOWN_MAX = 80  # a value's repr in an error is cut to this (a peer may send a megabyte)


class Invalid(ValueError):
    """What arrived is not what was accepted (in a message: a peer's bad message, never our own
    bug; pilot/wire/checks.py)."""


class BadValue(Invalid):
    """A check's error: `where`, the value and what is accepted, as `where=VALUE must be ...`."""

    def __init__(self, where: str, value: Any, accepted: str) -> None:
        self.where, self.value, self.accepted = where, value, accepted
        shown = repr(value)
        if len(shown) > SHOWN_MAX:
            shown = shown[: SHOWN_MAX - 3] + "..."
        super().__init__(f"{where}={shown} must be {accepted}")

    def owned(self, owner: str) -> ValueError:
        """The same error as `owner`'s (a description's class, `resource config NAME`), a plain
        ValueError with the value shown whole: `ComputeUnitDescription: cores=-4 must be >= 1`."""
        return ValueError(f"{owner}: {self.where}={self.value!r} must be {self.accepted}")


def bad(where: str, value: Any, accepted: str) -> BadValue:
    return BadValue(where, value, accepted)


# ---- plain checks (where, value) ---------------------------------------------------------------
def number(where: str, value: Any) -> float:
    """An int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(where, value, "a number")
    return value


@overload
def text(where: str, value: Any, optional: Literal[False], most: int = TEXT_MAX) -> str: ...
@overload
def text(where: str, value: Any, optional: bool = True, most: int = TEXT_MAX) -> str | None: ...
def text(where: str, value: Any, optional: bool = True, most: int = TEXT_MAX) -> str | None:
    """A string of at most `most` characters without NUL (None too when `optional`)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > most or "\0" in value:
        raise bad(where, value, f"a string of at most {most} characters, without NUL")
    return value


def mapping(where: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise bad(where, value, "a mapping")
    return value


def items(where: str, value: Any, most: int = LIST_MAX) -> list:
    """A list of at most `most` items (of any kind: the caller checks them)."""
    if not isinstance(value, list) or len(value) > most:
        raise bad(where, value, f"a list of at most {most} items")
    return value


def no_nul(where: str, value: str) -> str:
    if "\0" in value:
        raise bad(where, value, "a string without NUL bytes")
    return value


def str_like(where: str, value: Any) -> str:
    """A string, or a number written as one (an argument, an environment value)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise bad(where, value, "a string (or number)")
    return no_nul(where, str(value))


def finite(value: Any) -> bool:
    """A bool-free int or float that is finite (huge ints included: they are finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def amount(where: str, value: Any) -> int | float:
    """A count of slots: a whole number >= 0, or a fraction of one slot (0 < x < 1)."""
    if not finite(value) or not 0 <= value <= COUNT_MAX or (value >= 1 and value != int(value)):
        raise bad(where, value, f"a whole number 0..{COUNT_MAX} or a fraction 0 < x < 1")
    return int(value) if value >= 1 or value == 0 else float(value)


# ---- checks made once per field (factories) ----------------------------------------------------
def optional(check: Check) -> Check:
    """`check`, letting None through."""
    return lambda where, value: None if value is None else check(where, value)


def count(
    minimum: int = 0, maximum: int | None = COUNT_MAX, allow: tuple = (), accepted: str = ""
) -> Check:
    """A whole number (not a bool) minimum..maximum (None: no upper bound), or a string of
    `allow` (kept as it is).  The error says which bound failed, or `accepted` for any."""

    def check(where, value):
        if value in allow and isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            extra = f" or one of {allow}" if allow else ""
            raise bad(where, value, accepted or f"an integer >= {minimum}{extra}")
        if value < minimum:
            raise bad(where, value, accepted or f">= {minimum}")
        if maximum is not None and value > maximum:
            raise bad(where, value, accepted or f"<= {maximum}")
        return value

    return check


def positive(accepted: str, maximum: float | None = None) -> Check:
    """A finite number > 0 (and <= maximum); `accepted` says so in the field's own words
    ("a number of seconds > 0")."""

    def check(where, value):
        if not finite(value) or value <= 0 or (maximum is not None and value > maximum):
            raise bad(where, value, accepted)
        return value

    return check


def flag(accepted: str = "True or False") -> Check:
    def check(where, value):
        if not isinstance(value, bool):
            raise bad(where, value, accepted)
        return value

    return check


def one_of(choices, none: bool = False, accepted: str = "") -> Check:
    """One of `choices` (None too when `none`); `accepted`: the error's words for them."""
    choices = tuple(choices)
    accepted = accepted or f"one of {list(choices)}" + (" or None" if none else "")

    def check(where, value):
        if value not in choices and not (none and value is None):
            raise bad(where, value, accepted)
        return value

    return check


def nonempty(optional: bool = True, accepted: str = "a non-empty string") -> Check:
    """A non-empty string without NUL (None too when `optional`); `accepted` may say what the
    string names ("a queue name")."""

    def check(where, value):
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise bad(where, value, accepted)
        return no_nul(where, value)

    return check


def of_type(types: type | tuple, accepted: str) -> Check:
    """An instance of `types` (a bool only when `types` names bool)."""

    def check(where, value):
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
            raise bad(where, value, accepted)
        return value

    return check


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def list_of(item: Check, accepted: str, none_is_empty: bool = False) -> Check:
    """A list or tuple (not a string) whose every item passes `item` (its error names
    `where[i]`): the list of what `item` returned.  `none_is_empty`: None is []."""

    def check(where, value):
        if value is None and none_is_empty:
            return []
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise bad(where, value, accepted)
        return [item(f"{where}[{i}]", v) for i, v in enumerate(value)]

    return check


def dict_of(key: Check, value: Check, accepted: str, none_is_empty: bool = False) -> Check:
    """A mapping whose keys pass `key` (its error names `where key`) and values `value`
    (`where['k']`): a new mapping of what they returned.  `none_is_empty`: None is {}."""

    def check(where, mapping_):
        if mapping_ is None and none_is_empty:
            return {}
        if not isinstance(mapping_, dict):
            raise bad(where, mapping_, accepted)
        out = {}
        for k, v in mapping_.items():  # (the key checked first: its error comes first)
            k = key(f"{where} key", k)
            out[k] = value(f"{where}[{k!r}]", v)
        return out

    return check
