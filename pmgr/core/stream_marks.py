"""Named streams: a streaming submit that a new client resumes where a dead one stopped.

    stream = umgr.submit_units(generator(), lazy=True, name="sweep-1")
    # the client dies (kill -9) half-way; another attaches (rp.Session(uid=...)) and says
    stream = umgr.submit_units(generator(), lazy=True, name="sweep-1")   # the same items again

Protocol (the stream's feeder thread <-> the state store, pmgr/store/base.py `put_mark`):
    The items of a named stream are numbered in the order the iterable gives them, and taken
    SEGMENT at a time.  Before the first unit of segment k is made, the stream reserves SEGMENT
    unit numbers from the session's own counter in the store (`session.ids.reserve_block`: the
    ids no other client or stream ever gets) and writes the mark
        <session>/stream/<name>/<k, 8 digits>  ->  "<uid prefix>:<first number>"
    durably (its own commit; MongoDB journaled) before it goes on: item i of segment k becomes
    unit <prefix>.<first + i - k * SEGMENT>.  So the store never holds a unit of the stream
    whose item it cannot name, whatever order its writer commits the units in.
Resume: a stream of that name finds its marks; the iterable is pulled from its start, and an
item whose unit is known (the store had it when this client attached: the UnitManager
adopted it, and recovery finishes it, or re-routes it if it was never sent) is skipped, its
uid counted in the stream; an item of a marked segment whose unit is unknown is submitted
with the uid its mark gives it (a unit leaves the client only once the store has it, so an
unknown unit never ran); an item past the marks starts a new segment.  Nothing runs twice
and nothing is skipped, given an iterable that yields the same items in the same order (the
names and counts are the user's promise; a stream cannot check them).
Cost: one reserve and one mark (one small commit each) per SEGMENT units; on resume, one
look at the manager's table per item.  A store that refuses them for a passing reason (a full
disk) is asked again for up to STORE_WAIT s, then the stream ends with StoreUnavailable as its
`error` (as it does at once when a newer client owns the session: the store refuses this one's
marks for good), its items from there on not made.
"""

from __future__ import annotations

import re

from pilot.pmgr.core.session_ids import asking_store

SEGMENT = 4096  # items a mark covers (200,000 units: 49 marks)
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def check_name(name) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(
            f"submit_units: name={name!r} must be 1-64 letters, digits, '_', '.' or '-' "
            "(a named stream: pmgr/core/stream_marks.py)"
        )
    return name


class StreamMarks:
    """The item -> unit number map of one named stream (see the module's header)."""

    def __init__(self, session, prefix: str, name: str) -> None:
        self.session = session
        self.prefix = prefix  # the units' uid prefix ("unit", "task")
        self.key = f"{session.uid}/stream/{check_name(name)}/"
        self.first: dict[int, int] = {}  # segment -> its first unit number
        for key, value in session.store.marks(self.key).items():
            got_prefix, _, first = value.partition(":")
            if got_prefix != prefix:
                raise ValueError(
                    f"submit_units: name={name!r} names a stream of {got_prefix!r} units in "
                    f"session {session.uid}, not of {prefix!r} units"
                )
            self.first[int(key[len(self.key) :])] = int(first)
        self.resumed = len(self.first)  # marks found (0: a new stream)

    def number(self, index: int) -> int:
        """The unit number of item `index`, its segment marked first if it was not."""
        k, j = divmod(index, SEGMENT)
        first = self.first.get(k)
        if first is None:  # (a store that fails is asked again: session_ids.asking_store)
            ids, store = self.session.ids, self.session.store
            first = asking_store(
                f"{self.key}: ids", lambda: ids.reserve_block(self.prefix, SEGMENT)
            )
            mark = f"{self.key}{k:08d}"
            asking_store(mark, lambda: store.put_mark(mark, f"{self.prefix}:{first}"))
            self.first[k] = first
        return first + j

    def uid(self, number: int) -> str:
        return f"{self.prefix}.{number:06d}"
