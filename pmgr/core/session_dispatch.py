"""The client's dispatch of what pilots send on the pilot link, built from pilot/wire/links.py's
table.

`HANDLERS` names a handler for every kind the table says the client receives on the pilot link
(links.Dispatch checks that at import: no kind more, none less).  Each is called on the channel
thread as handler(dispatch, pilot, frames, body): `body` checked by the table's check
(pilot/wire/messages.py); for ustates the groups of unit moves pilot/wire/updates.py read; None for
put_ack and got (the transfer waiting for them reads their frames).  The Pilot's handlers run
with the session lock held, inside `session.locked()` (its callbacks after), but `output`, whose
callbacks may be slow (`pilot_handler` makes one of a Pilot method).

A message from a pilot the session does not know, of a kind the table does not list, or whose
body fails its check is a bad message: reported on the channel (`bad`, logged once per 10 s),
dropped; the link goes on.  `unsent` is the channel's own word, never a pilot's: a message it
could not send (`on_unsent`).
"""

from __future__ import annotations

import logging
import time

from pilot import validate
from pilot.pmgr.core.pilot import Pilot
from pilot.wire import links, updates
from pilot.wire.protocol import ProtocolError, unpack

log = logging.getLogger("pmgr.session")


def pilot_handler(method):
    """A Pilot method called with the body, holding the session lock."""

    def handler(dispatch, pilot, frames, body) -> None:
        with dispatch.session.locked():
            method(pilot, body)

    handler.__name__ = method.__name__
    return handler


def _read_ustates(frames: list[bytes]):
    """A `ustates` message's groups of unit moves (pilot/wire/updates.py checks them)."""
    if len(frames) < 3:
        raise ProtocolError(f"ustates of {len(frames) - 1} frames (head, times)")
    return updates.read(frames[1], frames[2], frames[3:])


def _ustates(dispatch, pilot, frames, groups) -> None:
    with dispatch.session.locked():
        pilot.on_unit_moves(groups)


def _output(dispatch, pilot, frames, body) -> None:
    pilot.on_output(body)  # (without the lock: output callbacks may be slow)


def _transfer(dispatch, pilot, frames, body) -> None:
    dispatch.session.transfers.on_reply(frames)  # data staging: to the transfer waiting for it


HANDLERS = {
    b"hello": pilot_handler(Pilot.on_hello),
    b"bye": pilot_handler(Pilot.on_bye),
    b"reply": pilot_handler(Pilot.on_reply),
    b"state": pilot_handler(Pilot.on_states),
    b"back": pilot_handler(Pilot.on_back),
    b"lost": pilot_handler(Pilot.on_lost),
    b"synced": pilot_handler(Pilot.on_synced),
    b"hb": pilot_handler(Pilot.on_hb),
    b"taken_over": pilot_handler(Pilot.on_taken_over),
    b"grow": pilot_handler(Pilot.on_grow),
    b"release": pilot_handler(Pilot.on_release),
    b"jobs": pilot_handler(Pilot.on_jobs),
    b"ustates": _ustates,
    b"output": _output,
    b"put_ack": _transfer,
    b"got": _transfer,
}
FROM_PILOT = links.Dispatch("pilot", "client", HANDLERS)


class SessionDispatch:
    """The session's part that takes what the channel thread receives (`on_message`)."""

    def __init__(self, session) -> None:
        self.session = session

    def on_message(self, pilot_uid: str, frames: list[bytes]) -> None:
        """A message from `pilot_uid` (the channel thread): its handler, by the table."""
        session = self.session
        bad = session.channel.bad
        pilot = session.pilots.get(pilot_uid)
        if pilot is None:
            bad.report(f"message from unknown pilot {pilot_uid!r:.60} dropped")
            return
        kind = frames[0]
        if kind == b"unsent":  # our own send failed: that is no word from the pilot
            with session.locked():
                self.on_unsent(pilot, frames[2:], frames[1].decode())
            return
        try:  # (the body's shape is checked before anything acts on it: pilot/wire/messages.py)
            handler, _, body = FROM_PILOT.read(kind, frames[1] if len(frames) > 1 else None)
            if kind == b"ustates":  # (put_ack, got: the transfer reads their frames itself)
                body = _read_ustates(frames)
        except validate.Invalid as exc:
            bad.report(f"bad message {kind[:16]!r} from {pilot_uid}: {exc}")
            return
        pilot.last_heard = time.monotonic()
        handler(self, pilot, frames, body)

    def on_unsent(self, pilot, frames: list[bytes], why: str) -> None:
        """A message the channel could not send (the pilot is not connected): units go back to
        be routed again, a command is answered as failed; said, unless it was an ack or a
        heartbeat for a pilot that is ending (its outbox ends with it: nothing to let go of).
        A pilot another client took over unheard (pmgr/core/ownership.py) is released first."""
        pilot.unreachable()
        if (pilot.ending or pilot.released) and frames[0] in (b"ack", b"hb"):
            log.debug("%r to %s, ending or not ours, not sent: %s", frames[0], pilot.uid, why)
        else:
            log.warning("cannot send %r to %s: %s", frames[0][:16], pilot.uid, why)
        if frames[0] == b"units":
            pilot.on_back({"part": frames[1].decode(), "units": unpack(frames[2])})
        elif frames[0] == b"cmd":
            cid = unpack(frames[1]).get("cid")
            pilot.on_reply({"cid": cid, "ok": False, "error": "pilot not connected"})
        # (an ack, a heartbeat, a release: let go; the pilot keeps its outcomes, and a sync,
        # an attach, asks for them again)

    def on_tick(self) -> None:
        """At least every channel.TICK s, on the channel thread: each pilot's clocks."""
        with self.session.locked():
            for pilot in list(self.session.pilots.values()):
                pilot.tick()
            for umgr in self.session.umgrs:  # (units queued behind long ones: Routing.rebalance)
                if not umgr.routing.pending:
                    umgr.routing.rebalance()
