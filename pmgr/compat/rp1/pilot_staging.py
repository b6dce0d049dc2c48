"""RADICAL-Pilot 1.x's PilotDescription input_staging / output_staging: files into the pilot
sandbox before the pilot's agents start, and back when the pilot ends.

    stage_in(pilot, steps)    (PilotManager, before the job is submitted) every step, in order
    stage_out(pilot, steps)   (the PilotManager's callback, once the pilot is final)

Directives are written as for pilot.stage_in / stage_out (pmgr/core/pilot_transfers.py `directives`:
a bare name at the pilot's end is in the pilot sandbox, at the client's end in the working
directory; RP's `[input_dir]` is client:///input_dir -> pilot:///input_dir).  The client writes
the pilot sandbox itself (its bootstrap.json, its job script): the sandbox is on a file system
the client shares with the job, so files are copied there directly, before anything of the job
runs, and back after it ended.  TRANSFER and TARBALL leave the same files (a TARBALL's target
is what COPY leaves, pilot/staging.py): a directory whole, a file at its target (in it when the
target is a directory).  A failed step raises StagingError naming it, before the job is
submitted (the pilot ends FAILED with it); one marked SKIP_FAILED / NON_FATAL is logged.
"""

from __future__ import annotations

import logging

from pilot import staging

log = logging.getLogger("pmgr.pilots")


def _copy(d: dict, pilot) -> None:
    """One directive, done as a unit's COPY is (pilot/staging.py act: the same places)."""
    why = staging.act(dict(d, action=staging.COPY), pilot.sandbox, None)
    if why is None:
        return
    if why.startswith("skipped: "):
        log.warning("%s: %s", pilot.uid, why)
        return
    raise staging.StagingError(f"{pilot.uid}: {why}")


def stage_in(pilot, steps: list[dict]) -> None:
    for d in steps:
        _copy(d, pilot)


def stage_out(pilot, steps: list[dict]) -> None:
    for d in steps:
        try:
            _copy(d, pilot)
        except staging.StagingError as exc:
            log.error("output staging: %s", exc)
