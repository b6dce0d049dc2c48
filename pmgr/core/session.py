"""Session: the client's root object.  It owns the session directory, the state store and its
writer thread, and the pilot link (channel thread); what pilots send goes to the pilots and unit
managers through the dispatch built from pilot/wire.py's table (pmgr/core/session_dispatch.py).

    with rp.Session() as session:          # embedded sqlite store in the session directory
        ...
    rp.Session(database_url="sqlite:////path/state.db")
    rp.Session(address="ib0")              # pilots reach the client there (PILOT_CLIENT_ADDRESS)
    rp.Session(uid=UID)                    # attach to a session's running pilots: refused
                                           # (rp.PilotOwned) for one whose owner is alive,
    rp.Session(uid=UID, take_over=True)    # unless taking it over (the old owner is told)

The session directory is $PILOT_SESSIONS_DIR/<uid> (default ~/.pilot/sessions/<uid>): the
sqlite file, one sandbox per pilot (logs, unit sandboxes, the control endpoint for the CLI).
close() cancels the pilots still running, waits for them (bounded), kills by pid whatever is
left of the session's processes, and flushes the store.  It also runs at interpreter exit.  Its
steps, in order: _end_pilots, _kill_leftovers, _close_links (transfers, pilot link, store
writer), then the store is closed and _pilot_files (download, cleanup) runs; close(terminate=
False) only closes the links and the store.
"""

from __future__ import annotations

import _thread
import atexit
import datetime
import functools
import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from contextlib import contextmanager

from pilot import ids, network, processes, security
from pilot import states as S
from pilot.errors import StoreUnavailable
from pilot.pmgr.core import pilot_files, reaper
from pilot.pmgr.core.channel import Channel
from pilot.pmgr.core.recovery import Recovery
from pilot.pmgr.core.session_dispatch import SessionDispatch
from pilot.pmgr.core.transfers import Transfers
from pilot.pmgr.store import open_store
from pilot.pmgr.store.data_files import DataFiles
from pilot.pmgr.store.writer import BatchWriter, MovedTogether

log = logging.getLogger("pmgr.session")


FROM_STORE = ("unit", "pilot", "task", "raptor")  # uid prefixes the store numbers (next_uid)
ID_BLOCK = 1024  # numbers reserved at a time (one store round trip per 1,024 units)
STORE_WAIT = 60.0  # seconds a submit waits for a store that cannot hand out ids (a full disk)


def private_dir(path: str) -> None:
    """`path` exists and, when it is the user's own, is the user's alone (mode 0700)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid == os.getuid():
        os.chmod(path, 0o700)


def sessions_dir() -> str:
    """Where sessions live: $PILOT_SESSIONS_DIR, default ~/.pilot/sessions."""
    return os.environ.get("PILOT_SESSIONS_DIR") or os.path.expanduser("~/.pilot/sessions")


class Session:
    """The client's root object: the session directory, the state store (and its writer
    thread) and the pilot link.  A context manager; `close()` also runs at interpreter exit.

        with rp.Session() as session:          # embedded sqlite store in the session directory
            ...
        rp.Session(uid=UID)                    # attach to a session's running pilots
        rp.Session(uid=UID, take_over=True)    # ... even if their owner is alive

    The session directory is $PILOT_SESSIONS_DIR/<uid> (default ~/.pilot/sessions/<uid>), mode
    0700: the sqlite file, the keys, one sandbox per pilot (logs, unit sandboxes, the control
    endpoint for the CLI).

    Args:
        database_url (str | None): the state store: `sqlite:///PATH` (embedded) or
            `mongodb://...`; None: $PILOT_DATABASE_URL, else `sqlite:///` the session
            directory's `state.db`.
        uid (str | None): None makes a new session (`session.<date>.<time>.<hex>`); a uid
            attaches to that session: its pilots come back to the PilotManagers made after,
            its units to the UnitManagers.
        dir (str | None): the session directory; None: $PILOT_SESSIONS_DIR/<uid> (default
            ~/.pilot/sessions/<uid>).  An attached session keeps the directory the store
            names.
        address (str | None): where pilots reach this client: an IP address, an interface
            name, or "auto"; None: $PILOT_CLIENT_ADDRESS, and when that is unset loopback for
            local pilots and every address for others.
        take_over (bool): attaching (`uid=`), take the session's pilots even if their owner
            process is alive (the old owner is told); False refuses them (`rp.PilotOwned`).

    Raises:
        ValueError: `uid` given but the session is not in the store (or its sqlite file does
            not exist); a `database_url` of an unknown scheme; an `address` that is not an IP
            address, an interface name or "auto".

    Attributes:
        uid (str): the session's id.
        dir (str): the session directory.
        url (str): the state store's URL.
    """

    def __init__(
        self,
        database_url: str | None = None,
        uid: str | None = None,
        dir: str | None = None,
        address: str | None = None,
        take_over: bool = False,
    ) -> None:
        # where pilots reach this client: an IP address, an interface name, or "auto"; when
        # nothing says, loopback for local pilots and every address for others (Pilot)
        # this process as the owner of its pilots (one owner per pilot: pmgr/core/recovery.py);
        # take_over: attach to the session's pilots even if their owner is alive
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        self.take_over = take_over
        given = address or os.environ.get("PILOT_CLIENT_ADDRESS")
        self.address_given = given is not None
        self.address = network.resolve_address("Session: address", given or "127.0.0.1")
        stamp = datetime.datetime.now().strftime("%Y%m%d.%H%M%S")
        attach = uid is not None
        self.uid = uid or f"session.{stamp}.{uuid.uuid4().hex[:6]}"
        self.dir = os.path.abspath(dir or os.path.join(sessions_dir(), self.uid))
        url = (
            database_url
            or os.environ.get("PILOT_DATABASE_URL")
            or f"sqlite:///{os.path.join(self.dir, 'state.db')}"
        )
        if attach and url.startswith("sqlite:///") and not os.path.exists(url[10:]):
            raise ValueError(f"Session: uid={uid!r} not found: no store at {url[10:]}")
        if not attach:
            if dir is None:  # the sessions' own directory (never a `dir=`'s parent: /tmp)
                private_dir(os.path.dirname(self.dir))
            private_dir(self.dir)  # 0700: the keys, the store and the sandboxes are the user's
        self.store = open_store(url)
        doc = self.store.get("sessions", self.uid) if attach else None
        if attach and doc is None:
            self.store.close()
            raise ValueError(f"Session: uid={uid!r} is not in the store {url}")
        if doc is not None:
            self.dir = doc["dir"]
        if self.store.data is None:  # (MongoDB: large bytes in the session's directory)
            self.store.data = DataFiles(os.path.join(self.dir, "data"))
        self.token = uuid.uuid4().hex[:6]  # makes this process's command ids unique
        self.writer = BatchWriter(self.store)
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.pilots: dict[str, object] = {}  # uid -> Pilot
        self.pmgrs: list = []
        self.umgrs: list = []
        self.counters: dict[str, int] = {}
        self.releasable: deque = deque()  # final units the store has (Session._settle)
        self.reader = None  # read_store() after close
        self.blocks: dict[str, list] = {}  # prefix -> its reserved numbers: [[next, end], ...]
        self.ahead_failed: set[str] = set()  # prefixes whose reserving ahead failed (logged)
        self.url = url
        self.closed = False
        self.created = doc["created"] if doc else time.time()
        self.writer.doc(
            "sessions", {"uid": self.uid, "created": self.created, "dir": self.dir, "url": url}
        )
        self.dispatch = SessionDispatch(self)  # what pilots send (pilot/wire.py's table)
        self.on_message, self.on_unsent = self.dispatch.on_message, self.dispatch.on_unsent
        self.on_tick = self.dispatch.on_tick
        self.keys = security.load(security.make_keys(self.dir))  # CURVE on every channel
        self.channel = Channel(self.on_message, self.on_tick, self.keys, self.address)
        self.transfers = Transfers(self)  # data staging over the pilot links
        self.firing = threading.local()  # this thread's `locked()` and `fire` (see locked)
        self.recovery = Recovery(self) if attach else None
        atexit.register(self.close)
        log.info("%s: dir %s, store %s, link %s", self.uid, self.dir, url, self.channel.endpoint)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def next_cid(self, pilot_uid: str) -> str:
        """A command id no other client process of this session can have used."""
        return self.next_uid(f"{pilot_uid}.cmd.{self.token}")

    def seen_uid(self, prefix: str, uid: str) -> None:
        """`uid` (made elsewhere: by a shell, by an earlier client process) exists: uids made
        here with `prefix` continue after it (unit and pilot ids come from the store)."""
        if prefix in FROM_STORE:
            return
        with self.lock:
            self.counters[prefix] = ids.next_index(self.counters.get(prefix, 0), uid)

    def next_uid(self, prefix: str, width: int = 4) -> str:
        """The next uid with `prefix`.  Unit and pilot ids come from blocks the store reserves
        for this process alone (StateStore.reserve: atomic across every client of the
        session), so two clients of one session never hand out the same id; others are
        this process's own (a partition's, made by the pilot's one owner).  The next block
        is reserved while half of one is left, so a store that fails for a while (a full
        disk) stops nothing until that is used up; then StoreUnavailable."""
        with self.lock:
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
            with self.lock:
                first = self.counters.get(prefix, 0)
                self.counters[prefix] = first + n
            return iter(range(first, first + n))
        if n <= 0:
            return iter(())
        taken = []
        with self.lock:
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
        deadline = time.monotonic() + STORE_WAIT
        pause = 0.05
        while True:
            try:
                with self.lock:
                    return self._reserve(prefix, n)
            except StoreUnavailable as exc:
                if time.monotonic() + pause > deadline:
                    raise
                if pause == 0.05:
                    log.error("%s: %s; asking again for up to %g s", self.uid, exc, STORE_WAIT)
            time.sleep(pause)  # (the lock released: the writer's batches go on)
            pause = min(2 * pause, 2.0)

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

    # -- state changes (called with the lock held) ---------------------------------------------
    def persist_state(self, obj, state: str, ts: float) -> None:
        """(lock held) `obj` moved to `state` (its history has it): its record goes to the
        store; a unit's with the others made while the lock is held, in one list (the
        outermost `locked()` hands it to the writer: pmgr/store/writer.py `moved`)."""
        reason = obj.reason if state in S.FINAL else None
        seq = len(obj.history) - 1  # the change's place in the object's history
        if obj.KIND != "units":
            self.writer.hist((self.uid, obj.KIND, obj.uid, state, ts, reason, seq), obj)
            return
        prev = obj.history[-2][0] if seq else None
        moves = getattr(self.firing, "moves", None)
        if moves is None:  # (no locked() around it: written on its own)
            self.writer.moved([(obj, state, ts, seq, prev, reason)])
        else:
            moves.append((obj, state, ts, seq, prev, reason))

    def persist_together(self, state, units, ts, seqs, prevs, reasons) -> None:
        """(lock held) persist_state for units that moved together (advance_together's), as
        one record."""
        rec = MovedTogether(state, units, ts, seqs, prevs, reasons)
        moves = getattr(self.firing, "moves", None)
        if moves is None:
            self.writer.moved([rec])
        else:
            moves.append(rec)

    def changed_together(self, units: list, state: str) -> None:
        """`changed` for each of `units` (of one manager)."""
        tl = self.firing
        if not getattr(tl, "holding", False):
            raise RuntimeError(f"{len(units)} units -> {state} outside session.locked()")
        if state in S.FINAL or (units and units[0].manager_callbacks()):
            tl.pending.extend([(u, state) for u in units])
        else:
            tl.pending.extend([(u, state) for u in units if u.callbacks])
            tl.moved = True

    def hand_moves(self) -> None:
        """(lock held) The units' changes gathered so far in this `locked()` go to the writer
        now (not at its end): what is queued after them is written after them."""
        moves = getattr(self.firing, "moves", None)
        if moves:
            self.writer.moved(moves)
            self.firing.moves = []

    def wait_for(self, predicate, timeout: float | None, describe) -> None:
        if self.channel.in_thread():
            raise RuntimeError(
                "wait() inside a state callback would block the thread that "
                "delivers state changes; register another callback instead"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"timeout after {timeout} s: {describe()}")
                self.cond.wait(min(left, 1.0) if left is not None else 1.0)

    # -- state changes and their callbacks --------------------------------------------------
    # Every state change is made holding the session lock, inside `with session.locked()`:
    # `changed(obj, state)` queues its callbacks on this thread, and the outermost `locked()`
    # wakes the waiters and then, with the lock released (a callback may take its time, or
    # submit more units), runs them in order on the same thread.
    def tell_waiting(self, pilot) -> None:
        """(lock held) `pilot` ended or a manager took it: the other managers with units
        pinned to it, waiting for add_pilots, see whether those can still run
        (pmgr/core/routing.py _never_added)."""
        for umgr in self.umgrs:
            if umgr is not pilot.umgr and pilot.uid in umgr.waiting_for:
                umgr.route()

    @contextmanager
    def locked(self):
        """The session lock; the callbacks of what changed meanwhile run after its release."""
        tl = self.firing
        with self.lock:
            outer = not getattr(tl, "holding", False)
            if outer:
                tl.holding, tl.pending, tl.moves, tl.moved = True, [], [], False
            try:
                yield
            finally:
                if outer:
                    if tl.moves:  # (units' changes, to the store writer in one list)
                        self.writer.moved(tl.moves)
                    tl.moves = None
                    if self.releasable:
                        self._release()
                    tl.holding = False
                    pending, tl.pending = tl.pending, []
                    if pending or tl.moved:
                        tl.moved = False
                        self.cond.notify_all()
        if outer and pending:
            self.fire(pending)

    def changed(self, obj, state: str) -> None:
        """`obj` moved to `state` (lock held, inside `locked()`): its callbacks run after (a
        change nothing is called for, the object's own or its manager's, and that is not final,
        only wakes the waiters)."""
        tl = self.firing
        if not getattr(tl, "holding", False):
            raise RuntimeError(f"{obj.uid} -> {state} outside session.locked()")
        if obj.callbacks or state in S.FINAL or obj.manager_callbacks():
            tl.pending.append((obj, state))
        else:
            tl.moved = True

    def fire(self, fired: list) -> None:
        """Run callbacks for objects that changed (outside the lock): the object's own, then
        those of the manager that owns it (a unit's UnitManager, a pilot's PilotManager)."""
        ended = []
        self.firing.depth = getattr(self.firing, "depth", 0) + 1
        try:
            for obj, state in fired:
                own, theirs = obj.callbacks, obj.manager_callbacks()
                for cb in (*own, *theirs) if own else theirs:
                    try:
                        cb(obj, state)
                    except Exception:
                        log.exception("callback %r for %s failed", cb, obj.uid)
                if state in S.FINAL:
                    ended.append(obj)
                if state == S.FAILED and getattr(obj, "exit_on_error", False):
                    log.error(
                        "%s FAILED (%s) and exits on error: interrupting", obj.uid, obj.reason
                    )
                    _thread.interrupt_main()  # RP: KeyboardInterrupt in the script
        finally:
            self.firing.depth -= 1
            if ended:
                self._settle(ended)

    def _settle(self, ended: list) -> None:
        """(fire) Their final-state callbacks have run: waits count them now; a unit is
        released (its object let go of: pmgr/core/unit_table.py) once the store has its final
        state (the writer's `then`, drained by the next locked())."""
        units = []
        with self.cond:
            for obj in ended:
                obj.settled = True
                if obj.KIND == "units":
                    obj.umgr.units.settled(obj)
                    units.append(obj)
            self.cond.notify_all()
        if units:
            self.writer.then(functools.partial(self.releasable.extend, units), urgent=False)

    def _release(self) -> None:
        """(lock held) Release the units the store has the final state of."""
        lost = self.writer.unpersisted
        while self.releasable:
            unit = self.releasable.popleft()
            if unit.uid not in lost:
                unit.umgr.units.release(unit)

    def in_callback(self) -> bool:
        """Whether this thread is running callbacks: a wait there cannot wait for them."""
        return getattr(self.firing, "depth", 0) > 0

    # -- end ------------------------------------------------------------------------------------
    def get_resource_config(self, resource: str, schema: str | None = None) -> dict:
        """RADICAL-Pilot 1.x's: the RP config of `resource` with its access schema's endpoints
        laid over it (pilot/utils.py `session_config`).

        Args:
            resource (str): SITE.NAME.
            schema (str | None): the access schema (default: the config's default_schema).

        Raises:
            RuntimeError: an unknown resource or schema (RP's error).
        """
        from pilot import utils

        return utils.session_config(resource, schema)

    def close(
        self,
        timeout: float = 30.0,
        terminate: bool = True,
        cleanup: bool = False,
        download: bool = False,
    ) -> None:
        """Cancel running pilots, wait for them (bounded), clean up every process, flush.

        A second call does nothing.  Records the store could not take are logged (and stay in
        `unpersisted`).

        Args:
            timeout (float): seconds to wait in all for the cancelled pilots to end; one still
                running then is killed (by pid, on this host) and ends lost.
            terminate (bool): False leaves the pilots running (detach): another client
                process can attach to the session with Session(uid=...) within the pilots'
                client_timeout.  Only the links and the store are closed then (no cleanup, no
                download).
            cleanup (bool): True (or a pilot description's cleanup): pilot sandboxes, unit
                sandboxes in them, are removed once the pilots ended; the session directory
                (store, keys) stays.
            download (bool): True: the logs of pilots whose sandbox lies elsewhere (their
                description's `sandbox`) are copied into SESSION_DIR/<pilot uid>.logs (the
                others' are here already).
        """
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        if not terminate:
            if cleanup or download:
                log.warning(
                    "%s: close(terminate=False) leaves pilots running: no cleanup or download",
                    self.uid,
                )
            self._close_links()
            self.store.close()
            return
        self._end_pilots(timeout)
        self._kill_leftovers()
        self._close_links()
        if self.unpersisted:
            log.error(
                "%s: the store could not take the records of %d object(s), e.g. %s",
                self.uid,
                len(self.unpersisted),
                sorted(self.unpersisted)[:5],
            )
        self.store.close()
        self._pilot_files(download, cleanup)

    def _end_pilots(self, timeout: float) -> None:
        """(close) Cancel the live pilots, wait for them within `timeout`, end their jobs."""
        # (a pilot another client took over, or that refused to be attached, is not ours;
        # nor one the store says another client took over while this one did not hear)
        with self.lock:
            for p in self.pilots.values():
                p.taken_over_unheard()
        live = [p for p in self.pilots.values() if not p.final and not p.released]
        # what close owes them first: the acknowledgements of outcomes the store is writing
        # (a writer behind would send them after `cancel_pilot`, to pilots gone by then)
        if live and not self.writer.flush(timeout=min(10.0, timeout / 3)):
            log.warning("%s: the store did not catch up before the pilots were canceled", self.uid)
        for p in live:
            p.request_cancel("session closed")
        deadline = time.monotonic() + timeout
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                log.error("%s did not end within %g s; killing it", p.uid, timeout)
        attached = set()  # the bootstraps of local pilots this process attached to (no child
        if any(p.job is None and p.final for p in live):  # of its): found by the session's id
            attached = set(reaper.session_processes(self.uid))
        for p in self.pilots.values():
            if p.job is not None and p.final:  # it said bye: let the job end on its own
                p.job.wait(timeout=max(1.0, min(10.0, deadline - time.monotonic())))
            elif p in live and p.final and p.job_id in attached:  # (its pid, kept in the store)
                bootstrap = processes.Watched(p.job_id)
                bootstrap.wait(max(1.0, min(10.0, deadline - time.monotonic())))
                bootstrap.close()
            p.kill_job()

    def _kill_leftovers(self) -> None:
        """(close) Kill by pid what is left of the session's processes on this host; a pilot
        still not final is lost."""
        # the last resort finds processes on this host only: a batch job elsewhere ends through
        # its bootstrap and its batch system (cancel, scancel), never through our /proc
        here = any(p.resource.batch_system == "local" for p in self.pilots.values())
        # (the session's processes are found by its id: with a pilot another client owns
        # now, they are that client's too, and nothing is killed)
        ours = not any(p.released for p in self.pilots.values())
        left = reaper.kill_session_processes(self.uid) if here and ours else []
        if left:
            log.warning("killed %d leftover process(es) of %s: %s", len(left), self.uid, left)
        with self.locked():
            for p in self.pilots.values():
                if not p.final and not p.released:
                    p.lost("session closed before the pilot reported its end")

    def read_store(self):
        """The store to read back from: the session's, or once it is closed one opened again
        for reading (a released unit asked for after close: pmgr/core/unit_table.py)."""
        if not self.closed:
            return self.store
        if self.reader is None:
            self.reader = open_store(self.url)
            if self.reader.data is None:
                self.reader.data = self.store.data
        return self.reader

    @property
    def unpersisted(self) -> set[str]:
        """The uids whose records are not in the store: those it refused for good or the
        writer dropped and, while it fails (a full disk), those kept to be written when it is
        back.  Live; after close(), what was never written.

        Returns:
            set[str]: the uids (units, pilots, partitions); empty when the store has all.
        """
        return self.writer.unpersisted | self.writer.held

    def _close_links(self) -> None:
        """(close) Stop the transfers and the pilot link, write what the store writer has
        left (bounded); what it could not write stays in `unpersisted`."""
        self.transfers.close()
        self.channel.close()
        self.writer.close(timeout=10.0)

    def _pilot_files(self, download: bool, cleanup: bool) -> None:
        """(close, the pilots ended) Copy the pilots' logs here and remove their sandboxes,
        as asked."""
        for p in self.pilots.values():
            if download:
                pilot_files.download(p, self.dir)
            if cleanup or p.description.cleanup:
                pilot_files.remove(p, self.dir)
