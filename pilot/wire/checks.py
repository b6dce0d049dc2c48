"""Checks for what arrives in messages: every field a component acts on is checked here first.

Each check takes `where` (the field, as a person would name it: `args.stop[2]`) and the value,
and returns the value or raises validate.Invalid naming both (the value cut to 80 characters).
The checks of types and sizes (`text`, `mapping`, `items`, `bad`) are pilot/validate.py's and
are called from there; the ones only messages need (uids, endpoints) are here.  A uid is
letters, digits, `_`, `.`, `-` (at most 128, not starting with `.` or `-`): never a path.
"""

from __future__ import annotations

import re
import time

from pilot import validate

UID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}\Z")
ENDPOINT = re.compile(r"tcp://[A-Za-z0-9_.\-\[\]:]{1,255}:\d{1,5}\Z")


def uid(where: str, value) -> str:
    if not isinstance(value, str) or not UID.match(value):
        raise validate.bad(where, value, "a uid (letters, digits, _ . -; at most 128)")
    return value


def uids(where: str, value, most: int = validate.LIST_MAX) -> list[str]:
    return [uid(f"{where}[{i}]", u) for i, u in enumerate(validate.items(where, value, most))]


def endpoint(where: str, value) -> str:
    if not isinstance(value, str) or not ENDPOINT.match(value):
        raise validate.bad(where, value, "a ZeroMQ endpoint tcp://HOST:PORT")
    return value


class BadMessages:
    """Logs bad messages without letting a flood fill the disk: the first one of every
    `every` seconds is logged (one line, no traceback) with how many were left unsaid."""

    def __init__(self, log, every: float = 10.0) -> None:
        self.log = log
        self.every = every
        self.next_at = 0.0
        self.unsaid = 0
        self.total = 0

    def report(self, text: str) -> None:
        self.total += 1
        now = time.monotonic()
        if now < self.next_at:
            self.unsaid += 1
            return
        more = f" ({self.unsaid} more bad messages since the last report)" if self.unsaid else ""
        self.log.error("%s%s", text[:500], more)
        self.unsaid = 0
        self.next_at = now + self.every


class InternalErrors:
    """Our own bugs, as a component's handlers meet them: logged as INTERNAL ERROR with the
    traceback, once per kind (where, exception type and the line that raised), then counted;
    the component goes on.  Never reported as a peer's bad message (pilot/wire/messages.py checks
    what peers send before any handler runs); the test suite fails on one (tests/conftest.py
    finds them in the logs)."""

    MARK = "INTERNAL ERROR"

    def __init__(self, log) -> None:
        self.log = log
        self.seen: dict[tuple, int] = {}

    def report(self, where: str, exc: BaseException) -> None:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        line = (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else None
        key = (where, type(exc).__name__, line)
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        if n == 0:
            self.log.error(
                "%s in %s: %s: %s", self.MARK, where, type(exc).__name__, exc, exc_info=exc
            )
