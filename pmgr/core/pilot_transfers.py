"""RADICAL-Pilot's pilot.stage_in / pilot.stage_out: files between the client and a pilot's
sandbox, outside any unit, over the pilot link (pmgr/core/transfers.py moves them;
partition/client/data_port.py is the pilot's end).

    stage(pilot, directives, into_pilot) -> the targets, once every file is there

Directives are written as for units (pilot/staging.py), with the pilot's sandbox where a unit's
would be: a path without a scheme at the pilot's end is in the pilot sandbox (pilot://), at
the client's end in the client's working directory (client://).  Only TRANSFER and TARBALL
move files here (COPY, LINK and MOVE act on the pilot's file system: a task's staging does
them).  The call waits for the pilot to be ACTIVE, then for the files; a failed directive
raises StagingError naming it (one marked SKIP_FAILED / NON_FATAL is logged and skipped).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pilot import staging, states as S

WAIT = 600.0  # seconds for the pilot to become ACTIVE and the files to move


@dataclass(frozen=True)
class _Files:
    """What pmgr/core/transfers.py needs of the thing whose files move: a uid (the pilot's) and
    a description whose sandbox is None (no unit sandbox: pilot:// is where they go)."""

    uid: str
    description: object = field(default_factory=lambda: _NoSandbox())


class _NoSandbox:
    sandbox = None


def directives(value, into_pilot: bool) -> list[dict]:
    """`value` (a directive or a list) in normal form, the pilot sandbox as the default."""
    items = [value] if isinstance(value, (str, dict)) else list(value or ())
    where = "Pilot.stage_in" if into_pilot else "Pilot.stage_out"
    pilot_end = "target" if into_pilot else "source"
    out = []
    for i, d in enumerate(items):
        if isinstance(d, str):
            src, _, tgt = (x.strip() for x in d.partition(">"))
            d = {"source": src, "target": tgt or None}
        if not isinstance(d, dict):
            raise ValueError(f"{where}: directives[{i}]={d!r} must be a string or a dict")
        d = dict(d)
        end = d.get(pilot_end)
        if end is None and pilot_end == "target":
            end = staging.split(str(d.get("source", "")))[1].rstrip("/").rsplit("/", 1)[-1]
        if isinstance(end, str) and end and not staging.split(end)[0]:
            d[pilot_end] = "pilot:///" + end.lstrip("/")
        norm = staging.normalize(where, f"directives[{i}]", [d], output=not into_pilot)[0]
        if not staging.at_client(norm):
            raise ValueError(
                f"{where}: directives[{i}]: {staging.describe(norm)} has no client end; "
                "COPY, LINK and MOVE on the pilot's file system are done by a task's staging"
            )
        out.append(norm)
    return out


def stage(pilot, value, into_pilot: bool) -> list[str]:
    steps = directives(value, into_pilot)
    if not steps:
        return []
    state = pilot.wait([S.ACTIVE], timeout=WAIT)
    if state != S.ACTIVE:
        raise staging.StagingError(f"{pilot.uid} is {state}: nothing can be staged")
    done = threading.Event()
    result: list = []

    def then(error: str | None) -> None:  # (the transfer thread)
        result.append(error)
        done.set()

    pilot.session.transfers.stage(_Files(pilot.uid), pilot, steps, then)
    if not done.wait(WAIT):
        raise staging.StagingError(f"{pilot.uid}: staging took more than {WAIT:g} s")
    if result[0]:
        raise staging.StagingError(f"{pilot.uid}: {result[0]}")
    return [d["target"] for d in steps]
