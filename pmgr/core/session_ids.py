"""The session's uids: the part of a Session (pmgr/core/session.py) that hands them out.

Unit, pilot, task and raptor ids (FROM_STORE) come from blocks the state store reserves for
this client process alone (StateStore.reserve under "<session uid>/<prefix>": atomic across
every client of the session), ID_BLOCK numbers at a time, the next block reserved while half
of one is left; a store that cannot reserve (a full disk) is asked again for up to STORE_WAIT
seconds by `reserve_uids`, then StoreUnavailable.  Every other prefix (a partition's, a
command's) is counted here, by this process alone (its pilot's one owner); `seen_uid` moves a
count past a uid made elsewhere.  Everything is done holding the session lock.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid

from pilot import ids
from pilot.errors import StoreUnavailable

log = logging.getLogger("pmgr.session")

FROM_STORE = ("unit", "pilot", "task", "raptor")  # uid prefixes the store numbers (next_uid)
ID_BLOCK = 1024  # numbers reserved at a time (one store round trip per 1,024 units)
STORE_WAIT = 60.0  # seconds a submit waits for a store that cannot hand out ids (a full disk)


def asking_store(what: str, call):
    """call(), asked again while the store refuses it for a passing reason (a full disk, a
    database down) for up to STORE_WAIT s, the first failure logged; then StoreUnavailable
    (`what` names the call).  A refusal for good (Fenced: a newer owner holds the session) is
    raised at once."""
    from pilot.pmgr.store.base import Fenced

    deadline = time.monotonic() + STORE_WAIT
    pause = 0.05
    while True:
        try:
            return call()
        except Fenced:
            raise
        except Exception as exc:
            if time.monotonic() + pause > deadline:
                if isinstance(exc, StoreUnavailable):
                    raise
                raise StoreUnavailable(
                    f"{what}: the store refused for {STORE_WAIT:g} s: {exc}"
                ) from exc
            if pause == 0.05:
                log.error("%s: %s; asking again for up to %g s", what, exc, STORE_WAIT)
        time.sleep(pause)
        pause = min(2 * pause, 2.0)


class SessionIds:
    """The uids of one session: its store's reserved blocks and this process's own counts."""

    def __init__(self, session_uid: str, store, url: str, locked) -> None:
        self.uid = session_uid
        self.store = store
        self.url = url
        self.locked = locked  # the session lock (`with locked():`)
        self.token = uuid.uuid4().hex[:6]  # makes this process's command ids unique
        self.counters: dict[str, int] = {}
        self.blocks: dict[str, list] = {}  # prefix -> its reserved numbers: [[next, end], ...]
        self.ahead_failed: set[str] = set()  # prefixes whose reserving ahead failed (logged)

    def next_cid(self, pilot_uid: str) -> str:
        """A command id no other client process of this session can have used."""
        return self.next_uid(f"{pilot_uid}.cmd.{self.token}")

    def seen_uid(self, prefix: str, uid: str) -> None:
        """`uid` (made elsewhere: by a shell, by an earlier client process) exists: uids made
        here with `prefix` continue after it (unit and pilot ids come from the store)."""
        if prefix in FROM_STORE:
            return
        with self.locked():
            self.counters[prefix] = ids.next_index(self.counters.get(prefix, 0), uid)

    def next_uid(self, prefix: str, width: int = 4) -> str:
        """The next uid with `prefix`.  Unit and pilot ids come from blocks the store reserves
        for this process alone (StateStore.reserve: atomic across every client of the
        session), so two clients of one session never hand out the same id; others are
        this process's own (a partition's, made by the pilot's one owner).  The next block
        is reserved while half of one is left, so a store that fails for a while (a full
        disk) stops nothing until that is used up; then StoreUnavailable."""
        with self.locked():
            if prefix not in FROM_STORE:
                n = self.counters.get(prefix, 0)
                self.counters[prefix] = n + 1
                return f"{prefix}.{n:0{width}d}"
            self._reserve(prefix, 1)
            blocks = self.blocks[prefix]
            n = blocks[0][0]
            blocks[0][0] += 1
            if blocks[0][0] == blocks[0][1]:
                blocks.pop(0)
            if self._left(prefix) < ID_BLOCK // 2:
                self._reserve_ahead(prefix)
        return f"{prefix}.{n:0{width}d}"

    def uid_numbers(self, prefix: str, n: int):
        """An iterator of the next `n` numbers next_uid(prefix) would give (one take of the
        lock and the reserved blocks for a chunk of units, not one a unit)."""
        if prefix not in FROM_STORE:
            with self.locked():
                first = self.counters.get(prefix, 0)
                self.counters[prefix] = first + n
            return iter(range(first, first + n))
        if n <= 0:
            return iter(())
        taken = []
        with self.locked():
            self._reserve(prefix, n)
            blocks = self.blocks[prefix]
            while n:
                nxt, end = blocks[0]
                k = min(n, end - nxt)
                taken.append(range(nxt, nxt + k))
                n -= k
                if nxt + k == end:
                    blocks.pop(0)
                else:
                    blocks[0][0] = nxt + k
            if self._left(prefix) < ID_BLOCK // 2:
                self._reserve_ahead(prefix)
        return itertools.chain.from_iterable(taken)

    def reserve_block(self, prefix: str, n: int) -> int:
        """`n` consecutive numbers of `prefix` (a store-numbered one: FROM_STORE) for the
        caller alone, reserved now in the store, apart from this session's own blocks (a named
        stream's segment: pmgr/core/stream_marks.py); the first of them."""
        if prefix not in FROM_STORE:
            raise ValueError(f"reserve_block: prefix={prefix!r} must be one of {FROM_STORE}")
        try:
            return self.store.reserve(f"{self.uid}/{prefix}", n)
        except Exception as exc:
            raise StoreUnavailable(f"{prefix} ids: the store cannot reserve now: {exc}") from exc

    def reserve_uids(self, prefix: str, n: int) -> None:
        """Make sure the next `n` next_uid(prefix) need nothing more of the store: a call
        that makes `n` objects asks this first, so it fails before it made any, never
        half-way.  A store that refuses (a full disk) is asked again for up to STORE_WAIT
        seconds (its objects could not be sent before it takes them anyway), then
        StoreUnavailable."""
        if prefix not in FROM_STORE:
            return
        if self._left(prefix) >= n:  # (reserved already: no take of the session's lock, whose
            return  # release runs its pending work; a script's submit a unit paid it each time)

        def reserve() -> None:
            with self.locked():  # (released between tries: the writer's batches go on)
                self._reserve(prefix, n)

        asking_store(f"{self.uid}: {prefix} ids", reserve)

    def _left(self, prefix: str) -> int:
        return sum(end - nxt for nxt, end in self.blocks.get(prefix, ()))

    def _reserve(self, prefix: str, n: int) -> None:
        """(lock held) At least `n` numbers of `prefix` reserved, or StoreUnavailable."""
        short = n - self._left(prefix)
        if short <= 0:
            return
        size = max(ID_BLOCK, short)
        try:
            first = self.store.reserve(f"{self.uid}/{prefix}", size)
        except Exception as exc:
            raise StoreUnavailable(
                f"{prefix} ids come from the store ({self.url}), which cannot reserve more "
                f"now: {exc}"
            ) from exc
        self.blocks.setdefault(prefix, []).append([first, first + size])

    def _reserve_ahead(self, prefix: str) -> None:
        """(lock held) The next block, ahead of need; a failure is logged (once until it
        works again), not raised: what is reserved still serves."""
        try:
            self._reserve(prefix, self._left(prefix) + ID_BLOCK)
        except StoreUnavailable as exc:
            if prefix not in self.ahead_failed:
                self.ahead_failed.add(prefix)
                log.error("%s: %s (%d left)", self.uid, exc, self._left(prefix))
            return
        self.ahead_failed.discard(prefix)
