"""A UnitManager's units: those in flight as objects, those ended as one byte each.

Memory must not grow with finished work (a workflow of 10^7 units): a unit whose final state
the store has, whose final-state callbacks have run and whose object nobody else holds costs
its manager one byte (its final state, in `Ledger`); asked for again (`umgr.get_units`, a
wait, a listing), it is read back from the store and made again (`UnitManager.unit_from_doc`).

    table[uid] = unit        a new unit: live (an object, held here)
    table.get(uid)           the unit: live, or released but still held by someone (weakly
                             known here), or read back from the store; None if not this
                             manager's
    table.release(unit)      (session lock held) `unit` is final, settled and stored: only
                             its byte is kept (the object lives on while the user holds it)
    table.state_of(uid)      its state without making its object (None if not this manager's)
    table.active()           the live units (what every walk over units in flight uses)
    table.open               how many live units are not final, or final with callbacks
                             still to run (a wait for all is a count: settled() counts down)
    uid in table, len(table), iter(table) (uids, in the order they were made), values()

Ledger: per uid prefix (unit., task.: the uids the client numbers, pilot/seen.py's form) a
bytearray indexed by the uid's number, 0 = not this manager's, else 1 + the final state's
index in FINAL_CODES; any other uid (a user's own) in a dict.  Live units are in `live`, in the
order they were made (a dict keeps it).
"""

from __future__ import annotations

import heapq
import itertools
import re
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from pilot import states as S
from pilot.seen import PREFIXES, uid_number as _number

if TYPE_CHECKING:
    from pilot.pmgr.core.handles import Unit

FINAL_CODES = (S.DONE, S.FAILED, S.CANCELED)
_CODE = {state: i + 1 for i, state in enumerate(FINAL_CODES)}
UNKNOWN = 255  # a uid of this manager's whose state is only in the store (an attach's)
_LIVE = 254  # (states(): a live unit's place)
_STATE = (None, *FINAL_CODES) + (None,) * (256 - 1 - len(FINAL_CODES))  # code -> state


class Ledger:
    """The final states of released units: a byte per generated uid."""

    def __init__(self) -> None:
        self.codes: dict[str, bytearray] = {p: bytearray() for p in PREFIXES}
        self.others: dict[str, int] = {}
        self.after: dict[str, tuple] = {}  # an other uid -> its place among the numbered ones
        self.count = 0
        self.by_state = dict.fromkeys(FINAL_CODES, 0)

    def put(self, uid: str, state: str, number: tuple | None = None) -> None:
        code = _CODE.get(state, UNKNOWN)
        prefix, n = number if number is not None else _number(uid)
        if n is None:
            old = self.others.get(uid, 0)
            self.others[uid] = code
        else:
            codes = self.codes[prefix]
            if n >= len(codes):
                codes.extend(bytes(max(n + 1 - len(codes), len(codes) // 2, 1024)))
            old = codes[n]
            codes[n] = code
        if not old:
            self.count += 1
        elif old != UNKNOWN:
            self.by_state[FINAL_CODES[old - 1]] -= 1
        if code != UNKNOWN:
            self.by_state[state] += 1

    def code(self, uid: str) -> int:
        prefix, n = _number(uid)
        if n is None:
            return self.others.get(uid, 0)
        codes = self.codes[prefix]
        return codes[n] if n < len(codes) else 0

    def drop(self, uid: str) -> None:
        """(a released unit made live again: an attach adopting it) Not in the ledger."""
        code = self.code(uid)
        if not code:
            return
        prefix, n = _number(uid)
        if n is None:
            del self.others[uid]
            self.after.pop(uid, None)
        else:
            self.codes[prefix][n] = 0
        self.count -= 1
        if code != UNKNOWN:
            self.by_state[FINAL_CODES[code - 1]] -= 1

    def keyed(self) -> Iterator[tuple]:
        """(key, uid) for every uid here, by key: a generated uid's key is its number, any
        other's its place among them when it was made (UnitTable.key)."""
        numbered = []
        for prefix, codes in self.codes.items():
            if codes:
                numbered.append(_numbered(prefix, codes))
        others = sorted((self.after.get(uid, (-1, 1, 0)), uid) for uid in self.others)
        return heapq.merge(*numbered, others)


def _numbered(prefix: str, codes: bytearray) -> Iterator[tuple]:
    start = 0
    while True:
        n = _next_nonzero(codes, start)
        if n < 0:
            return
        yield (n, 0, 0), f"{prefix}.{n:06d}"
        start = n + 1


_NONZERO = re.compile(b"[^\x00]")


def _next_nonzero(codes: bytearray, start: int) -> int:
    """The index of the first nonzero byte at or after `start`, or -1 (a C-speed scan)."""
    found = _NONZERO.search(codes, start)
    return -1 if found is None else found.start()


class UnitTable:
    def __init__(self, umgr) -> None:
        self.umgr = umgr
        self.live: dict = {}  # uid -> Unit: not final, or final and not released yet
        # released units someone still holds
        self.held: weakref.WeakValueDictionary[str, Unit] = weakref.WeakValueDictionary()
        self.ledger = Ledger()
        self.open = 0  # live units not final
        self.released = 0
        self.last = -1  # the highest number of a generated uid made here
        self.after: dict[str, tuple] = {}  # a live unit's uid not generated -> its key
        self.seq = itertools.count()

    def key(self, uid: str) -> tuple:
        """Its place in the order units were made: a generated uid's number (generated uids
        grow as they are made), any other uid's the last number made before it."""
        prefix, n = _number(uid)
        if n is not None:
            return (n, 0, 0)
        key = self.after.get(uid)
        return key if key is not None else (self.last, 1, 0)

    # -- dict-like ---------------------------------------------------------------------------
    def __setitem__(self, uid: str, unit) -> None:
        if uid not in self.live:
            if self.ledger.count:
                self.ledger.drop(uid)  # (an attach adopting a unit it had as a byte)
            if not unit.final:
                self.open += 1
            n = unit.number[1]
            if n is None:
                self.after[uid] = (self.last, 1, next(self.seq))
            elif n > self.last:
                self.last = n
        self.live[uid] = unit

    def get(self, uid: str, default=None):
        unit = self.live.get(uid)
        if unit is not None:
            return unit
        unit = self.held.get(uid)
        if unit is not None:
            return unit
        if not self.ledger.code(uid):
            return default
        doc = self.umgr.session.read_store().get("units", uid)
        if doc is None:
            return default
        unit = self.umgr.unit_from_doc(doc)
        self.held[uid] = unit
        return unit

    def __getitem__(self, uid: str):
        unit = self.get(uid)
        if unit is None:
            raise KeyError(uid)
        return unit

    def get_all(self, uids: list[str]) -> list:
        """The units of `uids` (of this manager), in order: those not live or held made again
        from the store in one read (UnitList's pages)."""
        live, held = self.live, self.held
        found = [live.get(uid) or held.get(uid) for uid in uids]
        missing = [uid for uid, unit in zip(uids, found) if unit is None]
        if missing:
            docs = self.umgr.session.read_store().get_many("units", missing)
            for i, uid in enumerate(uids):
                if found[i] is None:
                    doc = docs.get(uid)
                    if doc is not None and self.ledger.code(uid):
                        found[i] = self.held[uid] = self.umgr.unit_from_doc(doc)
        return [unit for unit in found if unit is not None]

    def __contains__(self, uid) -> bool:
        return uid in self.live or bool(self.ledger.code(uid))

    def __len__(self) -> int:
        return len(self.live) + self.ledger.count

    def __iter__(self) -> Iterator[str]:
        """Every uid, in the order the units were made (released ones merged by key)."""
        if not self.ledger.count:
            yield from list(self.live)
            return
        live = sorted((self.key(uid), uid) for uid in list(self.live))
        for _key, uid in heapq.merge(self.ledger.keyed(), live):
            yield uid

    def values(self) -> Iterator:
        """Every unit, made again from the store for the released ones (lazily)."""
        for uid in self:
            unit = self.get(uid)
            if unit is not None:
                yield unit

    def active(self) -> list:
        """The live units (in flight, or ended and not released yet), oldest first."""
        return list(self.live.values())

    # -- states ------------------------------------------------------------------------------
    def states(self) -> list[str]:
        """Every unit's state, in the order they were made: the released ones' read off the
        ledger a byte at a time (a comprehension over its bytes: 10^7 units in ~0.5 s), the
        live ones' merged in by number; a table with uids of the user's own, or units an
        attach knows only as in the store, goes uid by uid."""
        ledger = self.ledger
        prefixes = [p for p, codes in ledger.codes.items() if codes]
        live = self.live
        if (
            ledger.others
            or self.after
            or len(prefixes) > 1
            or any(u.number[0] not in prefixes[:1] for u in live.values())
            or any(codes.find(UNKNOWN) >= 0 for codes in ledger.codes.values())
        ):
            # (cast: every uid of the table has a state)
            return cast("list[str]", [self.state_of(uid) for uid in self])
        if not prefixes:
            return [u.state for u in live.values()]
        codes = bytearray(ledger.codes[prefixes[0]])
        mine = sorted((u.number[1], u.state) for u in live.values())
        if mine and mine[-1][0] >= len(codes):
            codes.extend(bytes(mine[-1][0] + 1 - len(codes)))
        for n, _ in mine:
            codes[n] = _LIVE
        more = iter([state for _, state in mine]).__next__
        # (cast: a nonzero code is a final state's or _LIVE)
        return cast("list[str]", [_STATE[c] if c != _LIVE else more() for c in codes if c])

    def state_of(self, uid: str) -> str | None:
        unit = self.live.get(uid)
        if unit is not None:
            return unit.state
        code = self.ledger.code(uid)
        if not code:
            return None
        if code == UNKNOWN:
            unit = self.get(uid)
            return unit.state if unit is not None else None
        return FINAL_CODES[code - 1]

    def settled(self, unit: Unit) -> None:
        """(lock held) A live unit is final and its final-state callbacks have run."""
        if self.live.get(unit.uid) is unit:
            self.open -= 1

    def release(self, unit: Unit) -> None:
        """(lock held) A final unit the store has and whose callbacks ran: its byte only."""
        if self.live.get(unit.uid) is not unit or not unit.final or not unit.settled:
            return
        if not self.umgr.session.store.reads_back:  # (null://: kept, or it would be lost)
            return
        del self.live[unit.uid]
        after = self.after.pop(unit.uid, None) if self.after else None
        self.ledger.put(unit.uid, unit.state, unit.number)
        if after is not None:
            self.ledger.after[unit.uid] = after
        self.held[unit.uid] = unit
        self.released += 1

    def released_states(self) -> Iterator[tuple[str, str]]:
        """(uid, final state) of every released unit whose state this manager knows (a
        store whose file was lost made anew is given them again: pmgr/core/session.py)."""
        ledger = self.ledger
        for _, uid in ledger.keyed():
            code = ledger.code(uid)
            if code and code != UNKNOWN:
                yield uid, FINAL_CODES[code - 1]

    def know_final(self, uid: str, state: str | None) -> None:
        """(an attach) A final unit of the session, known by its uid and state only."""
        self.ledger.put(uid, state if state in _CODE else "?")
