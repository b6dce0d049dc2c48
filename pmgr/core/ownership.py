"""Who owns a session, as the store says: the owner epoch (pmgr/store/base.py, `owner epoch`).

One client owns a session's pilots at a time (partition/control.py `attach`).  The bootstrap
tells a live owner that another client took the pilot over (`taken_over`), but only an owner
it heard from within OWNER_SILENCE s, and only over a link it then drops: an owner that was
stopped, asleep or cut off through the take-over never hears it.  So the store keeps the
owner, as an epoch that only grows, and refuses the writes of every older one, atomically
with the write: a deposed owner's late writes never land, whatever their timing.

    take(session)       a new session's first client: the next epoch, installed at once
    candidate(session)  an attaching client: the next epoch, asked for before it attaches
                        (its writes carry it from then on); each pilot's `attach` names it,
                        and the bootstrap refuses an epoch older than its owner's (a request
                        still queued from a client gone since never takes the pilot)
    install(session)    once its pilots took it: the store holds this client's epoch, older
                        owners' writes are refused (Fenced)
    taken_by(session)   the owner the store names when it is a newer client, else None: read
                        before a client acts on a pilot's silence (pmgr/core/pilot.py), when
                        the bootstrap does not take its messages (session_dispatch.py
                        `on_unsent`, at most once a heartbeat), and before close() cancels
A store that fails (a full disk) is asked again for up to STORE_WAIT s; the store's owner row is
{epoch, host, pid, since}.  Cost: two small writes per owner, one read per check.
"""

from __future__ import annotations

import logging

from pilot.errors import PilotOwned
from pilot.pmgr.core.session_ids import asking_store
from pilot.pmgr.store.base import Fenced

log = logging.getLogger("pmgr.ownership")


def take(session) -> int:
    """A new session's first client owns it: its epoch, installed."""
    store = session.store
    epoch = asking_store(f"{session.uid}: owner epoch", lambda: store.next_epoch(session.uid))
    asking_store(
        f"{session.uid}: owner", lambda: store.install_epoch(session.uid, epoch, session.owner)
    )
    return epoch


def candidate(session) -> int:
    """An attaching client's epoch (installed once its pilots took it: `install`); the
    store's writes carry it from now on."""
    store = session.store
    epoch = asking_store(f"{session.uid}: owner epoch", lambda: store.next_epoch(session.uid))
    store.own(session.uid, epoch)
    return epoch


def install(session) -> None:
    """This client owns the session now (its pilots took it): said in the store, so that an
    older owner's writes are refused from now on.  PilotOwned when a newer client installed
    its epoch meanwhile (it attached after this one)."""
    store = session.store
    try:
        asking_store(
            f"{session.uid}: owner",
            lambda: store.install_epoch(session.uid, session.epoch, session.owner),
        )
    except Fenced as exc:
        raise PilotOwned(session.uid, f"taken over meanwhile: {exc}", exc.owner) from None
    log.info("%s: this client owns it now (owner epoch %d)", session.uid, session.epoch)


def taken_by(session) -> dict | None:
    """The owner the store names when it is a newer client than this one, else None (this
    client, none named, or a store that cannot say: logged)."""
    try:
        owner = session.read_store().owner_of(session.uid)
    except Exception as exc:
        log.error("%s: the store cannot say who owns it: %s", session.uid, exc)
        return None
    if owner is None or owner.get("epoch", 0) <= session.epoch:
        return None
    return owner
