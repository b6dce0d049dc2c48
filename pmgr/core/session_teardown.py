"""The session's teardown: the part of a Session (pmgr/core/session.py) that runs close().

Its steps, in order, named as in the logs:
    end_pilots      cancel the live pilots (the store's writer caught up first: the
                    acknowledgements it owes them), wait for them within the timeout, end
                    their jobs (a local pilot's bootstrap this process attached to: by pid)
    kill_leftovers  kill by pid what is left of the session's processes on this host (none
                    when another client owns one of its pilots now); a pilot still not final
                    ends lost
    close_links     stop the transfers, the pilot link and the store writer (bounded); what it
                    could not write stays in `unpersisted` (logged)
    then the store is closed and pilot_files runs: the pilots' logs copied into the session
    directory (download), their sandboxes removed (cleanup, or a description's cleanup).
close(terminate=False) only closes the links and the store: the pilots run on, for another
client process to attach to.  A second close does nothing, from any thread (`claim`).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time

from pilot import processes, young_gc
from pilot.pmgr.core import pilot_files, reaper

log = logging.getLogger("pmgr.session")


class Teardown:
    """close()'s steps for one session (the module's header)."""

    def __init__(self, session) -> None:
        self.session = session
        self._once = threading.Lock()

    def claim(self) -> bool:
        """True for the one close() that runs: two threads may close a session at once (each
        would give back its hold on the collector, young_gc, and end its pilots)."""
        with self._once:
            if self.session.closed:
                return False
            self.session.closed = True
            return True

    def close(self, timeout: float, terminate: bool, cleanup: bool, download: bool) -> None:
        """Session.close (its docstring says what the arguments do)."""
        session = self.session
        if not self.claim():
            return
        atexit.unregister(session.close)
        young_gc.release()
        if not terminate:
            if cleanup or download:
                log.warning(
                    "%s: close(terminate=False) leaves pilots running: no cleanup or download",
                    session.uid,
                )
            self.close_links()
            session.store.close()
            return
        self.end_pilots(timeout)
        self.kill_leftovers()
        self.close_links()
        if session.unpersisted:
            log.error(
                "%s: the store could not take the records of %d object(s), e.g. %s",
                session.uid,
                len(session.unpersisted),
                sorted(session.unpersisted)[:5],
            )
        session.store.close()
        self.pilot_files(download, cleanup)

    def end_pilots(self, timeout: float) -> None:
        """(close) Cancel the live pilots, wait for them within `timeout`, end their jobs."""
        session = self.session
        # (a pilot another client took over, or that refused to be attached, is not ours;
        # nor one the store says another client took over while this one did not hear)
        with session.locked():
            for p in session.pilots.values():
                p.taken_over_unheard()
        live = [p for p in session.pilots.values() if not p.final and not p.released]
        # what close owes them first: the acknowledgements of outcomes the store is writing
        # (a writer behind would send them after `cancel_pilot`, to pilots gone by then)
        if live and not session.writer.flush(timeout=min(10.0, timeout / 3)):
            log.warning(
                "%s: the store did not catch up before the pilots were canceled", session.uid
            )
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
            attached = set(reaper.session_processes(session.uid))
        for p in session.pilots.values():
            if p.released:  # (another client owns it now: its job is that client's)
                continue
            if p.job is not None and p.final:  # it said bye: let the job end on its own
                p.job.wait(timeout=max(1.0, min(10.0, deadline - time.monotonic())))
            elif p in live and p.final and p.job_id in attached:  # (its pid, kept in the store)
                bootstrap = processes.Watched(p.job_id)
                bootstrap.wait(max(1.0, min(10.0, deadline - time.monotonic())))
                bootstrap.close()
            p.kill_job()

    def kill_leftovers(self) -> None:
        """(close) Kill by pid what is left of the session's processes on this host; a pilot
        still not final is lost."""
        session = self.session
        # the last resort finds processes on this host only: a batch job elsewhere ends through
        # its bootstrap and its batch system (cancel, scancel), never through our /proc
        here = any(p.resource.batch_system == "local" for p in session.pilots.values())
        # (the session's processes are found by its id: with a pilot another client owns
        # now, they are that client's too, and nothing is killed)
        ours = not any(p.released for p in session.pilots.values())
        left = reaper.kill_session_processes(session.uid) if here and ours else []
        if left:
            log.warning("killed %d leftover process(es) of %s: %s", len(left), session.uid, left)
        with session.locked():
            for p in session.pilots.values():
                if not p.final and not p.released:
                    p.lost("session closed before the pilot reported its end")

    def close_links(self) -> None:
        """(close) Stop the transfers and the pilot link, write what the store writer has
        left (bounded); what it could not write stays in `unpersisted`."""
        session = self.session
        session.transfers.close()
        session.channel.close()
        session.writer.close(timeout=10.0)

    def pilot_files(self, download: bool, cleanup: bool) -> None:
        """(close, the pilots ended) Copy the pilots' logs here and remove their sandboxes,
        as asked."""
        session = self.session
        for p in session.pilots.values():
            if download:
                pilot_files.download(p, session.dir)
            if cleanup or p.description.cleanup:
                pilot_files.remove(p, session.dir)
