"""Session: the client's root object, the public face of the parts that do its work.

    with rp.Session() as session:          # embedded sqlite store in the session directory
        ...
    rp.Session(database_url="sqlite:////path/state.db")
    rp.Session(address="ib0")              # pilots reach the client there (PILOT_CLIENT_ADDRESS)
    rp.Session(uid=UID)                    # attach to a session's running pilots: refused
                                           # (rp.PilotOwned) for one whose owner is alive,
    rp.Session(uid=UID, take_over=True)    # unless taking it over (the old owner is told)

The session directory is $PILOT_SESSIONS_DIR/<uid> (default ~/.pilot/sessions/<uid>): the
sqlite file, one sandbox per pilot (logs, unit sandboxes, the control endpoint for the CLI).
A Session owns the session directory, the state store and its writer thread, and the pilot link
(channel thread); its machinery is in parts it holds, one module each:
    ids        pmgr/core/session_ids.py       uids: the store's reserved blocks, own counts
    changes    pmgr/core/state_changes.py     the session lock (`locked()`), every state change
                                              persisted and its callbacks fired (`record`)
    dispatch   pmgr/core/session_dispatch.py  what pilots send, by pilot/wire/links.py's table
    teardown   pmgr/core/session_teardown.py  close(): its steps, in order
The rest of the client's core calls the parts' methods that the Session names as its own
(`locked`, `on_message`, ...: listed in `__init__`), or the parts.
close() runs at interpreter exit too.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING

from pilot import young_gc
from pilot.config import network
from pilot.errors import PilotOwned
from pilot.pmgr.core import ownership
from pilot.pmgr.core.channel import Channel
from pilot.pmgr.core.recovery import Recovery
from pilot.pmgr.core.session_dispatch import SessionDispatch
from pilot.pmgr.core.session_ids import FROM_STORE, ID_BLOCK, STORE_WAIT, SessionIds
from pilot.pmgr.core.session_teardown import Teardown
from pilot.pmgr.core.state_changes import StateChanges
from pilot.pmgr.core.transfers import Transfers
from pilot.pmgr.store import open_store
from pilot.pmgr.store.base import StateStore
from pilot.pmgr.store.data_files import DataFiles
from pilot.pmgr.store.writer import BatchWriter
from pilot.wire import security

if TYPE_CHECKING:
    from pilot.pmgr.core.handles import Stateful
    from pilot.pmgr.core.pilot import Pilot

__all__ = ["Session", "sessions_dir", "private_dir", "FROM_STORE", "ID_BLOCK", "STORE_WAIT"]
log = logging.getLogger("pmgr.session")


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
        ids (SessionIds): the uids it hands out (pmgr/core/session_ids.py).
        changes (StateChanges): its lock, state changes persisted and the callbacks they
            fire (pmgr/core/state_changes.py).
        dispatch (SessionDispatch): what pilots send, by the protocol table
            (pmgr/core/session_dispatch.py).
        teardown (Teardown): close()'s steps (pmgr/core/session_teardown.py).
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
        # its owner epoch (pmgr/core/ownership.py): a new session's at once; an attaching
        # client's asked for now, installed once its pilots took it (Recovery); every write
        # carries it, and the store refuses an older owner's
        try:
            self.epoch = ownership.candidate(self) if attach else ownership.take(self)
        except Exception:
            self.store.close()
            raise
        self.writer = BatchWriter(self.store)
        self.writer.on_deposed = self._deposed
        self.writer.on_renewed = self._store_renewed
        self.pilots: dict[str, Pilot] = {}  # uid -> Pilot
        self.pmgrs: list = []
        self.umgrs: list = []
        self.reader: StateStore | None = None  # read_store() after close
        self.url = url
        self.closed = False
        self.created = doc["created"] if doc else time.time()
        self.writer.doc(
            "sessions", {"uid": self.uid, "created": self.created, "dir": self.dir, "url": url}
        )
        # the parts (the module's header), and what of them the rest of the core calls here
        self.changes = StateChanges(self.uid, self.writer)
        self.ids = SessionIds(self.uid, self.store, url, self.changes.locked)
        self.dispatch = SessionDispatch(self)
        self.teardown = Teardown(self)
        # the session lock, which every core object takes (`with session.locked():` also
        # delivers the callbacks of what changed under it); the rest of the machinery is
        # called on its part: session.ids.next_uid(...), session.changes.record(...)
        self.locked = self.changes.locked
        self.on_message, self.on_unsent = self.dispatch.on_message, self.dispatch.on_unsent
        self.on_tick = self.dispatch.on_tick
        self.keys = security.load(security.make_keys(self.dir))  # CURVE on every channel
        self.channel = Channel(self.on_message, self.on_tick, self.keys, self.address)
        self.transfers = Transfers(self)  # data staging over the pilot links
        self.recovery = Recovery(self) if attach else None
        atexit.register(self.close)
        young_gc.hold()  # (given back at close: pilot/young_gc.py)
        log.info("%s: dir %s, store %s, link %s", self.uid, self.dir, url, self.channel.endpoint)

    @property
    def deposed(self):
        """Why this client no longer owns the session (the store's refusal, `Fenced`: a newer
        client took it over), or None while it does."""
        return self.writer.deposed

    def check_owner(self) -> None:
        """PilotOwned when another client owns the session now (this one was deposed)."""
        exc = self.writer.deposed
        if exc is not None:
            raise PilotOwned(self.uid, f"this client no longer owns the session: {exc}", exc.owner)

    def _deposed(self, exc) -> None:
        """(the store writer) A newer client owns the session (the store refused a write of
        this one: Fenced): every pilot is let go, as when told `taken_over`."""
        with self.locked():
            for p in self.pilots.values():
                if not p.final and not p.released:
                    p.release_to(exc.owner, f" (the store's owner epoch {exc.current})")

    def _store_renewed(self, exc) -> None:
        """(the store writer) The store's file was lost and made anew: this client's epoch is
        installed there again, and everything it holds is queued to be written again: the
        session, its pilots, partitions and the units it has not let go of, in full; the
        units it let go of (one byte each: pmgr/core/unit_table.py) with their final state
        only, and a reason that says so."""
        self.store.install_epoch(self.uid, self.epoch, self.owner)
        self.writer.doc(
            "sessions", {"uid": self.uid, "created": self.created, "dir": self.dir, "url": self.url}
        )
        with self.locked():
            objs: list[Stateful] = [*self.pilots.values()]
            objs += [part for p in self.pilots.values() for part in p.parts.values()]
            released = []
            for umgr in self.umgrs:
                objs += umgr.units.active()
                released += list(umgr.units.released_states())
            for obj in objs:
                obj.stored = False
                if hasattr(obj, "written"):
                    obj.written = None
                self.writer.changed(obj)
        why = "its record was lost with the store file; this client kept its final state only"
        for uid, state in released:
            self.writer.doc("units", {"uid": uid, "session": self.uid, "state": state,
                                      "reason": why})  # fmt: skip
        log.error(
            "%s: written again into the new store file: %d records in full, %d units ended "
            "before as their final state only",
            self.uid, len(objs), len(released),
        )  # fmt: skip

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_for(self, predicate, timeout: float | None, describe) -> None:
        """Wait, holding the session's condition, until `predicate()` is true; TimeoutError
        (naming `describe()`) after `timeout` s; RuntimeError on the channel thread, which
        delivers the changes waited for."""
        if self.channel.in_thread():
            raise RuntimeError(
                "wait() inside a state callback would block the thread that "
                "delivers state changes; register another callback instead"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.changes.wait_until(predicate, deadline):
            raise TimeoutError(f"timeout after {timeout} s: {describe()}")

    def tell_waiting(self, pilot) -> None:
        """(lock held) `pilot` ended or a manager took it: the other managers with units
        pinned to it, waiting for add_pilots, see whether those can still run
        (pmgr/core/routing.py _never_added)."""
        for umgr in self.umgrs:
            if umgr is not pilot.umgr and pilot.uid in umgr.waiting_for:
                umgr.routing.route()

    def get_resource_config(self, resource: str, schema: str | None = None) -> dict:
        """RADICAL-Pilot 1.x's: the RP config of `resource` with its access schema's endpoints
        laid over it (pilot/rp/utils.py `session_config`).

        Args:
            resource (str): SITE.NAME.
            schema (str | None): the access schema (default: the config's default_schema).

        Raises:
            RuntimeError: an unknown resource or schema (RP's error).
        """
        from pilot.rp import utils

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
        self.teardown.close(timeout, terminate, cleanup, download)

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
