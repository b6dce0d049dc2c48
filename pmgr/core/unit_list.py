"""What submit_units returns for a list or an iterable: the units, as a sequence that holds
their uids only.

A workflow that submits 10^7 units keeps the list it got back; a list of Unit objects held
every unit (2.7 KB each: 27 GB).  A UnitList holds their uids as runs of consecutive numbers
(`UidRuns`: a unit's uid is `unit.NNNNNN`, numbered in the order the units were made; a uid of
the user's own is kept as it is) and asks the manager's table for a Unit when indexed or
iterated (pmgr/core/unit_table.py): the live object while the unit is in flight, or, once it was
let go of (final, stored, callbacks run), the object someone still holds, or one made again
from the store, a page of them at a time when iterated.  So the list costs a few bytes per
run, and its units one byte each in their manager once released.

It is a `collections.abc.Sequence`: len, [i], [i:j] (a list), iteration, `in`, index, count,
reversed; == compares with any sequence of the same units in the same order; `+` gives a
list; `uids` the uids; `append` / `extend` add units of the same manager, as to RP's list.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from pilot.seen import uid_number

PAGE = 1000  # units made again from the store at a time, iterating


class UidRuns:
    """Uids in order, as runs: [prefix, first, last] for consecutive numbers of one prefix
    (a uid past NNNNNN has more digits: `uid_number` tells the form), a uid as it is for
    any other."""

    __slots__ = ("runs", "ends", "count")

    def __init__(self) -> None:
        self.runs: list = []  # [prefix, first, last] or a uid
        self.ends: list[int] = []  # the count of uids up to and with each run
        self.count = 0

    def add(self, uid: str, number: tuple | None = None) -> None:
        prefix, n = number if number is not None else uid_number(uid)
        runs = self.runs
        last = runs[-1] if runs else None
        if n is not None and type(last) is list and last[0] == prefix and last[2] + 1 == n:
            last[2] = n
            self.ends[-1] += 1
        else:
            runs.append([prefix, n, n] if n is not None else uid)
            self.ends.append(self.count + 1)
        self.count += 1

    def __len__(self) -> int:
        return self.count

    def uid(self, i: int) -> str:
        k = bisect.bisect_right(self.ends, i)
        run = self.runs[k]
        if type(run) is str:
            return run
        before = self.ends[k - 1] if k else 0
        return f"{run[0]}.{run[1] + i - before:06d}"

    def __iter__(self) -> Iterator[str]:
        for run in list(self.runs):
            if type(run) is str:
                yield run
            else:
                prefix, first, last = run
                for n in range(first, last + 1):
                    yield f"{prefix}.{n:06d}"

    def spans(self) -> Iterator:
        """(prefix, first, last) per run of numbers, or the uid of any other."""
        for run in list(self.runs):
            yield run if type(run) is str else tuple(run)


class UnitList(Sequence):
    """The units a `submit_units` (or `submit_tasks`) call made, in order: their uids held,
    each Unit asked of its manager when indexed or iterated (the module's header)."""

    __slots__ = ("umgr", "runs")

    def __init__(self, umgr, runs: UidRuns) -> None:
        self.umgr = umgr
        self.runs = runs

    @classmethod
    def of(cls, umgr, units) -> UnitList:
        runs = UidRuns()
        for unit in units:
            runs.add(unit.uid, unit.number)
        return cls(umgr, runs)

    @property
    def uids(self) -> list[str]:
        """The units' uids, in order."""
        return list(self.runs)

    def append(self, unit) -> None:
        """A unit of the same manager at the end (RP returns a list, and scripts append to
        it: RP's multiple_pilots tutorial)."""
        self.runs.add(unit.uid, unit.number)

    def extend(self, units) -> None:
        for unit in units:
            self.append(unit)

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self.runs)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("UnitList index out of range")
        return self.umgr.units[self.runs.uid(i)]

    def __iter__(self):
        table = self.umgr.units
        page: list[str] = []
        for uid in self.runs:
            page.append(uid)
            if len(page) >= PAGE:
                yield from table.get_all(page)
                page = []
        if page:
            yield from table.get_all(page)

    def __contains__(self, unit) -> bool:
        uid = getattr(unit, "uid", None)
        return uid is not None and any(u == uid for u in self.runs) and unit.umgr is self.umgr

    def __eq__(self, other) -> bool:
        if isinstance(other, UnitList):
            return other.umgr is self.umgr and list(other.runs) == list(self.runs)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a is b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (a sequence compared by value)

    def __add__(self, other) -> list:
        return [*self, *other]

    def __radd__(self, other) -> list:
        return [*other, *self]

    def __repr__(self) -> str:
        shown = ", ".join(self.runs.uid(i) for i in range(min(3, len(self))))
        more = ", ..." if len(self) > 3 else ""
        return f"<UnitList of {len(self)} units: {shown}{more}>"
