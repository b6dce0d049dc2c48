"""Which form of the messages a peer speaks: a client and the pilots it uses must run the same.

A pilot runs the package its resource's python finds on the nodes, which need not be the
client's (another virtualenv or module on a cluster's compute nodes), and a client may attach
to a pilot started by an older install.  Messages change between versions (a bulk of calls
became a template and each unit's arguments), and a peer that misreads one fails units in ways
that name no cause.  So each side says what it speaks, and a mismatch is refused at the door,
saying both:

    bootstrap -> client   hello {..., protocol, version, python}        (partition/client/link.py)
        the client uses no pilot that speaks another PROTOCOL: one it launched is canceled
        and ends FAILED, saying why; one it attached to is not its to use (pmgr/core/pilot.py
        `on_hello`)
    client -> bootstrap   cmd attach {..., protocol}                    (partition/control.py)
        the bootstrap refuses an attach of another PROTOCOL before it changes owner (the
        reply carries its own: the client raises rp.PilotIncompatible, pmgr/core/recovery.py)

A peer that says nothing (a version before this one) speaks another.  PROTOCOL is raised with
every change to a message that a peer of the version before would misread; the package
version and Python's are said beside it for the person reading the error (a call's pickle
made by one Python may not load in another).
"""

from __future__ import annotations

import platform

from pilot.release import RELEASE

PROTOCOL = 2  # (1: every version before peers said what they speak)


def mine() -> dict:
    """What this process speaks, as a hello or an attach says it."""
    return {"protocol": PROTOCOL, "version": RELEASE, "python": platform.python_version()}


def differs(theirs: dict, who: str) -> str | None:
    """Why a peer that said `theirs` ({protocol, version, python}, as `mine`) cannot be used,
    named `who` ("the pilot", "the client"); None when it speaks this PROTOCOL."""
    protocol = theirs.get("protocol")
    if type(protocol) is int and protocol == PROTOCOL:
        return None
    me = mine()
    if protocol is None:
        said = "protocol 1 or none (a version that does not say)"
    else:
        shown = protocol if type(protocol) is int else _text(protocol)
        version, python = _text(theirs.get("version")), _text(theirs.get("python"))
        said = f"protocol {shown} (package {version}, Python {python})"
    return (
        f"{who} speaks {said}, this process protocol {PROTOCOL} (package {me['version']}, "
        f"Python {me['python']}): both must run the same version of the package (a pilot runs "
        "the one its resource's python finds)"
    )


def _text(value) -> str:
    return value[:40] if type(value) is str else "?"  # (a peer's: bounded)
