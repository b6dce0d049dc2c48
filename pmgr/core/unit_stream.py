"""Streaming submission: units from any iterable, pulled only as fast as the pilots take them.

    stream = umgr.submit_units(generator, lazy=True)   # returns at once: a UnitStream
    stream.wait(timeout)     -> {DONE: n, FAILED: m, CANCELED: k} once every unit pulled ended
    len(stream), stream.exhausted, stream.error, stream.counts(), stream.uids(),
    iter(stream) (its Units, in order, made again from the store when released),
    stream.failed() (its FAILED units), stream.cancel()

Protocol: a feeder (a thread of its own for a lazy stream, the caller's thread otherwise) pulls
up to CHUNK descriptions at a time, no more than the window has room for, and submits them
through the manager's list path (checked, made, routed: the same rules as a list), but only
while the manager holds fewer than `window` units as objects (in flight, or ended and not let
go of yet: `UnitTable.live`); else it
waits on the session's condition, which every settled unit notifies.  So a generator of 10^7
descriptions is never in memory at once, and nor are its units: a stream remembers the uids it
made as ranges of consecutive numbers.  A description the list path refuses (ValueError) or an
exception of the iterable stops the pulling: `error` holds it (its index in the stream named),
`wait()` raises it once the units made before it ended.  In a state callback (the thread that
delivers states) nothing may wait: a stream pulls without a window there.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time

from pilot import states as S
from pilot.errors import PilotError
from pilot.pmgr.core.unit_list import UidRuns, UnitList
from pilot.pmgr.core.unit_table import FINAL_CODES, UNKNOWN
from pilot.pmgr.store.base import Fenced

log = logging.getLogger("pmgr.units")
CHUNK = 256
WINDOW = 20_000  # units in flight per manager while a stream pulls (client memory ~3 KB each)


class UnitStream:
    """Units submitted from an iterable, pulled only as fast as the pilots take them:
    `umgr.submit_units(iterable, lazy=True)` (or `tmgr.submit_tasks(iterable, lazy=True)`)
    returns one at once and pulls on a thread of its own.

    It pulls 256 descriptions at a time, submits them as a list is (checked, made, routed),
    and pulls again only while its manager has fewer than `window` units in flight.  It
    remembers its units' uids only, as ranges of consecutive numbers, so neither the
    descriptions nor the units of a long stream are in memory at once.  A description refused
    or an exception of the iterable stops the pulling; the units made before run on, and
    `wait()` raises it.  Not made directly: `submit_units` makes it.

        stream = umgr.submit_units(generator, lazy=True, window=1000)
        stream.wait()              # {DONE: n, FAILED: m, CANCELED: k}
        for unit in stream.failed():
            print(unit.uid, unit.reason)

    `len(stream)` is the number of units made so far; `iter(stream)` yields its Units in
    order (released ones made again from the store).

    Attributes:
        window (int): units in flight (per manager) above which it does not pull.
        exhausted (bool): the iterable was pulled to its end without an error.
        error (BaseException | None): what stopped it: a ValueError naming the description
            refused and how many came before it, the iterable's own exception, or (a named
            stream) rp.StoreUnavailable when the store refused its marks for STORE_WAIT s.
    """

    def __init__(self, umgr, iterable, submit_list, window: int | None = None, marks=None) -> None:
        self.umgr = umgr
        self.marks = marks  # a named stream's (pmgr/core/stream_marks.py), or None
        self.pulled = 0  # items taken from the iterable so far
        self.skipped = 0  # a resumed named stream's items whose units were known
        self.source = iter(iterable)
        self.submit_list = submit_list  # list of descriptions -> list of units (the list path)
        self.window = WINDOW if window is None else int(window)
        if self.window < 1:
            raise ValueError(f"submit_units: window={window!r} must be a positive integer")
        self.runs = UidRuns()  # its uids, in order (pmgr/core/unit_list.py)
        self.exhausted = False
        self.error: BaseException | None = None
        self.stopped = False
        self.thread: threading.Thread | None = None

    # -- feeding ----------------------------------------------------------------------------
    def start(self) -> UnitStream:
        """Feed on a thread of its own (a lazy stream)."""
        self.umgr.feeding += 1
        self.thread = threading.Thread(target=self._feed_done, name="pilot-unit-stream")
        self.thread.daemon = True
        self.thread.start()
        return self

    def _feed_done(self) -> None:
        try:
            self.feed()
        finally:
            session = self.umgr.session
            with session.locked():
                self.umgr.feeding -= 1
            session.changes.notify()

    def feed(self) -> None:
        """Pull, wait for room, submit, until the iterable ends, fails or is canceled."""
        session = self.umgr.session
        waits = not session.changes.in_callback() and not session.channel.in_thread()
        while not self.stopped:
            if waits:
                self._room()
                if self.stopped:
                    return
            chunk: list = []
            try:  # (at most the room the window leaves: a window below CHUNK bounds it)
                room = self.window - len(self.umgr.units.live) if waits else CHUNK
                chunk.extend(itertools.islice(self.source, max(1, min(CHUNK, room))))
            except Exception as exc:  # the user's iterable raised: what it gave still goes
                self.error = exc
                log.error(
                    "submit_units: its iterable raised after %d: %r", self.count + len(chunk), exc
                )
            if not chunk:
                self.exhausted = self.error is None
                return
            try:
                if self.marks is None:
                    self._note(self.submit_list(chunk))
                else:
                    self._submit_marked(chunk)
            except ValueError as exc:
                self.error = ValueError(f"{exc} (in the stream, after its first {self.count})")
                log.error("submit_units: %s", self.error)
                return
            except (PilotError, Fenced) as exc:  # the store refused (StoreUnavailable: asked
                self.error = exc  # again for a while first; Fenced: this client is deposed)
                log.error("submit_units: the stream stops after %d: %s", self.count, exc)
                return
            self.pulled += len(chunk)
            if self.error is not None:
                return

    def _submit_marked(self, chunk: list) -> None:
        """(a named stream) The chunk's items numbered by their marks: those whose units are
        known skipped, the others submitted with the uids the marks give them; all noted in
        item order."""
        marks, table = self.marks, self.umgr.units
        numbers = [marks.number(self.pulled + i) for i in range(len(chunk))]
        new = [i for i, n in enumerate(numbers) if marks.uid(n) not in table]
        for i in new:
            if getattr(chunk[i], "uid", None) is not None:
                raise ValueError(
                    f"submit_units: a named stream numbers its units: item {self.pulled + i} "
                    f"has uid={chunk[i].uid!r}, which must be None"
                )
        self.skipped += len(chunk) - len(new)
        if new:
            self.submit_list([chunk[i] for i in new], numbers=[numbers[i] for i in new])
        for n in numbers:
            self.runs.add(marks.uid(n), (marks.prefix, n))

    def _room(self) -> None:
        """Until the manager holds fewer than `window` units as objects (in flight, or ended
        and not let go of yet: a store writer that falls behind holds the stream back too)."""
        session, table = self.umgr.session, self.umgr.units
        while len(table.live) >= self.window and not self.stopped:
            # (the store has them: let go of as the lock is let go of)
            if session.changes.releasable:
                with session.locked():
                    pass
                if len(table.live) < self.window:
                    return
            session.changes.wait(0.05)

    def _note(self, units: list) -> None:
        add = self.runs.add
        for unit in units:
            add(unit.uid, unit.number)

    @property
    def count(self) -> int:
        """How many units it holds so far (as len(stream))."""
        return len(self.runs)

    # -- the user's side --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.runs)

    def uids(self):
        """The uids of its units so far, in the order they were made.

        Yields:
            str: a uid.
        """
        yield from self.runs

    def __iter__(self):
        return iter(UnitList(self.umgr, self.runs))

    def units(self) -> UnitList:
        """Its units so far, as the list submit_units returns (pmgr/core/unit_list.py)."""
        return UnitList(self.umgr, self.runs)

    def counts(self) -> dict:
        """Its units by state so far: the released ones counted in their manager's ledger a
        range at a time (C-speed: ~1 ms a million), the others one by one.

        Returns:
            dict[str, int]: state -> how many of its units are in it (states with none are
                left out).
        """
        out: dict = {}
        table = self.umgr.units
        state_of = table.state_of
        for run in self.runs.spans():
            if type(run) is str:
                state = state_of(run)
                out[state] = out.get(state, 0) + 1
                continue
            prefix, first, last = run
            span = _span(table.ledger.codes[prefix], first, last)  # (one read: counted and
            for code, state in enumerate(FINAL_CODES, 1):  # scanned alike)
                n = span.count(code)
                if n:
                    out[state] = out.get(state, 0) + n
            for n in _marked(span, _LIVE_OR_UNKNOWN):  # (live: the window's; unknown: an
                state = state_of(f"{prefix}.{first + n:06d}")  # attach's, read back)
                out[state] = out.get(state, 0) + 1
        return out

    def failed(self):
        """Its FAILED units (the others are never made again from the store).

        Yields:
            Unit: a FAILED unit, in the order they were made (its `reason` says why).
        """
        state_of, get = self.umgr.units.state_of, self.umgr.units.get
        for uid in self._uids_marked(_FAILED_OR_OPEN):
            if state_of(uid) == S.FAILED:
                yield get(uid)

    def _uids_marked(self, marks: bytes):
        """Its uids whose ledger byte `marks` marks (see _marks), in order, and every uid not
        numbered: the others are skipped a range at a time (C-speed byte scans)."""
        codes_of = self.umgr.units.ledger.codes
        for run in self.runs.spans():
            if type(run) is str:
                yield run
                continue
            prefix, first, last = run
            for n in _marked(_span(codes_of[prefix], first, last), marks):
                yield f"{prefix}.{first + n:06d}"

    @property
    def done(self) -> bool:
        """Pulled to its end (or stopped) and every unit ended."""
        return self._ended_so_far()()

    def _ended(self, uid: str) -> bool:
        unit = self.umgr.units.live.get(uid)
        if unit is None:  # released: ended, or not this manager's at all
            return True
        return unit.state in S.FINAL and unit.settled

    def _ended_so_far(self):
        """A predicate that is True once every unit ended: it skips the released units of a
        range at C speed (their ledger byte is set) and resumes at the first unit that had
        not ended (ended is for good), so its calls cost about a look at that unit."""
        if self.thread is not None and self.thread.is_alive():
            return lambda: False
        codes_of = self.umgr.units.ledger.codes
        runs = self.runs.runs
        k, at = 0, None  # runs[k]; within a range, the number to look from

        def ended() -> bool:
            nonlocal k, at
            while k < len(runs):
                run = runs[k]
                if type(run) is str:
                    if not self._ended(run):
                        return False
                else:
                    prefix, first, last = run
                    at = first if at is None else at
                    codes = codes_of[prefix]
                    while at <= last:
                        if at < len(codes):  # (past its end: none of them released yet)
                            n = codes.find(0, at, last + 1)
                            if n < 0:
                                break
                            at = n
                        if not self._ended(f"{prefix}.{at:06d}"):
                            return False
                        at += 1
                k, at = k + 1, None
            return True

        return ended

    def wait(self, timeout: float | None = None) -> dict:
        """Until every unit is pulled and ended (final, callbacks run); its counts by final
        state.  The stream's error, if one stopped it, is raised after that.

        Args:
            timeout (float | None): seconds in all; None waits as long as it takes.

        Returns:
            dict[str, int]: final state (DONE, FAILED, CANCELED) -> how many of its units.

        Raises:
            TimeoutError: `timeout` passed (while pulling, or units not ended).
            RuntimeError: called in a state callback (the thread that delivers states).
            Exception: the stream's `error` (a ValueError for a description refused, or
                what the iterable raised), once the units made before it ended.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        session = self.umgr.session
        if self.thread is not None:
            self.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if self.thread.is_alive():
                raise TimeoutError(f"timeout after {timeout} s: {self.count} pulled so far")
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        session.wait_for(
            self._ended_so_far(), left, lambda: f"units of the stream not ended: {self.counts()}"
        )
        if self.error is not None:
            raise self.error
        return {k: v for k, v in self.counts().items() if k in S.FINAL}

    def cancel(self, reason: str = "canceled by the user") -> None:
        """Pull no more; its units not final are canceled.

        Waits up to 30 s for the pulling thread to stop (a chunk being submitted finishes).

        Args:
            reason (str): the canceled units' `reason`.
        """
        self.stopped = True
        self.umgr.session.changes.notify()
        if self.thread is not None:
            self.thread.join(30.0)
        live = self.umgr.units.live  # (its units not released: found by their ledger byte)
        open_ = [uid for uid in self._uids_marked(_LIVE) if uid in live and not live[uid].final]
        if open_:
            self.umgr.cancel_units(open_, reason=reason)

    def __repr__(self) -> str:
        state = "pulling" if self.thread is not None and self.thread.is_alive() else "pulled"
        return f"<UnitStream {self.count} units, {state}>"


def _marks(*codes: int) -> bytes:
    """A bytes.translate table: 1 for `codes`, 0 for every other byte."""
    return bytes(1 if c in codes else 0 for c in range(256))


_LIVE = _marks(0)  # not in the ledger: live (or not made yet)
_LIVE_OR_UNKNOWN = _marks(0, UNKNOWN)
_FAILED_OR_OPEN = _marks(0, UNKNOWN, 1 + FINAL_CODES.index(S.FAILED))


def _span(codes: bytearray, first: int, last: int) -> bytes:
    """The ledger bytes of numbers first..last (zeros past its end)."""
    span = bytes(codes[first : last + 1])
    return span + bytes(last + 1 - first - len(span))


def _marked(span: bytes, marks: bytes):
    """The offsets in `span` of the bytes `marks` marks, in order (C-speed search)."""
    flags = span.translate(marks)
    n = flags.find(1)
    while n >= 0:
        yield n
        n = flags.find(1, n + 1)
