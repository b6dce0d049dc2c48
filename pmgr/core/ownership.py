"""Who owns a pilot, as the store says: the mark a take-over leaves.

One client owns a pilot at a time (partition/control.py `attach`).  The bootstrap tells a live
owner that another client took the pilot over (`taken_over`), but only an owner it heard from
within OWNER_SILENCE s, and only over a link it then drops: an owner that was stopped, asleep
or cut off through the take-over never hears it.  Coming back, it would find its pilot silent
and, after client_timeout s, fail the pilot, its partitions and its units in the store the new
owner is writing.  So the store keeps the last owner:

    <session>/owner/<pilot>  ->  JSON {host, pid, since}

written durably (`StateStore.put_mark`) by a client whose attach the bootstrap accepted,
before it acts on the pilot (pmgr/core/recovery.py); none means the client that submitted it.
A client reads it (`taken_by`) before it acts on a pilot's silence: when the bootstrap does not
take its messages (not connected to it: pmgr/core/session_dispatch.py `on_unsent`, at most once a
heartbeat), before it fails the pilot for client_timeout s of silence, and before close()
cancels it.  Another owner named there: the pilot is released, as after `taken_over`.
Cost: one small write per attach, one read per check.
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger("pmgr.ownership")


def mark_of(session_uid: str, pilot_uid: str) -> str:
    return f"{session_uid}/owner/{pilot_uid}"


def claim(session, pilot_uid: str) -> None:
    """This client owns the pilot now (its attach was accepted): said in the store."""
    try:
        session.store.put_mark(mark_of(session.uid, pilot_uid), json.dumps(session.owner))
    except Exception as exc:  # (a store that fails: the bootstrap's `taken_over` still tells)
        log.error("%s: the store did not take this client as its owner: %s", pilot_uid, exc)


def taken_by(session, pilot_uid: str) -> dict | None:
    """The owner the store names for the pilot when that is another client, else None (this
    client, none named, or a store that cannot say: logged)."""
    name = mark_of(session.uid, pilot_uid)
    try:
        value = session.read_store().marks(name).get(name)
    except Exception as exc:
        log.error("%s: the store cannot say who owns it: %s", pilot_uid, exc)
        return None
    if value is None:
        return None
    owner = json.loads(value)
    return None if owner == session.owner else owner
