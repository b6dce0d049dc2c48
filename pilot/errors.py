"""The errors a user can catch by name (`rp.PilotError` and its children).

PilotError    the base of them all
PilotOwned    a client attached to a pilot that another live client owns, without asking
              to take it over (Session(uid=..., take_over=True)); names the owner
PilotIncompatible  a client attached to a pilot that speaks another protocol (another
              version of the package): says both
StoreUnavailable  the state store cannot hand out ids now (a full disk, a database down):
              nothing of the call that asked was made
"""

from __future__ import annotations


class PilotError(Exception):
    """What went wrong with a pilot, as the user can catch it."""


class PilotOwned(PilotError):
    """The pilot has a live owning client; `owner` is {host, pid, since}.

    Raised when a client attaches to a pilot another live client owns without
    `Session(uid=..., take_over=True)`, and when a client acts on a pilot another client took
    over since.

    Args:
        pilot (str): the pilot's uid (the message starts with it).
        message (str): what happened.
        owner (dict | None): the owning client: {"host": str, "pid": int, "since": float
            (time.time() it became the owner)}; None: {}.

    Attributes:
        pilot (str): the pilot's uid.
        owner (dict): the owning client, as given.
    """

    def __init__(self, pilot: str, message: str, owner: dict | None = None) -> None:
        super().__init__(f"{pilot}: {message}")
        self.pilot = pilot
        self.owner = owner or {}


class PilotIncompatible(PilotError):
    """The pilot speaks another protocol than this client (another version of the package:
    pilot/wire/peer_version.py); raised when a client attaches to it (Session(uid=...)).  The
    message says what each side runs; the pilot is left as it was, its owner unchanged (a
    pilot of a version from before this check takes the attach: its hello shows what it
    speaks, and the client lets it go).

    Attributes:
        pilot (str): the pilot's uid.
    """

    def __init__(self, pilot: str, message: str) -> None:
        super().__init__(f"{pilot}: {message}")
        self.pilot = pilot


class StoreUnavailable(PilotError):
    """The state store refused what a call needed before it could make anything (unit and
    pilot ids come from it); the store's own error is the cause."""
