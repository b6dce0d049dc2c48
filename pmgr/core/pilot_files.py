"""Pilot sandboxes at the end of a session: `session.close(download=True, cleanup=True)`.

A pilot's sandbox is SESSION_DIR/<pilot uid>, or, when its description names a `sandbox`
(RADICAL-Pilot's key, e.g. a scratch file system the compute nodes share), SANDBOX/<session
uid>/<pilot uid> with a link of the pilot's name in the session directory.
    download  copies the pilot's logs and records (*.log, *.out, *.json but control.json, and
              nodes/*.log) from a sandbox elsewhere into SESSION_DIR/<pilot uid>.logs; a sandbox
              in the session directory has them there already
    remove    deletes the sandbox (unit sandboxes in it included) and the link; the session
              directory itself (the store, the keys) stays
"""

from __future__ import annotations

import glob
import logging
import os
import shutil

log = logging.getLogger("pmgr.pilot_files")
KEPT = ("*.log", "*.out", "*.json", "nodes/*.log")


def elsewhere(pilot, session_dir: str) -> bool:
    return os.path.dirname(pilot.sandbox) != session_dir


def download(pilot, session_dir: str) -> str:
    """Where the pilot's logs are now (its sandbox, or the copy made here)."""
    if not elsewhere(pilot, session_dir):
        return pilot.sandbox
    target = os.path.join(session_dir, f"{pilot.uid}.logs")
    for pattern in KEPT:
        for src in glob.glob(os.path.join(pilot.sandbox, pattern)):
            if os.path.basename(src) == "control.json":
                continue
            dst = os.path.join(target, os.path.relpath(src, pilot.sandbox))
            os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
            try:
                shutil.copy2(src, dst)
            except OSError as exc:
                log.warning("%s: could not download %s: %s", pilot.uid, src, exc)
    return target


def remove(pilot, session_dir: str) -> None:
    if not pilot.final:
        log.warning("%s is %s: its sandbox is kept", pilot.uid, pilot.state)
        return
    shutil.rmtree(pilot.sandbox, ignore_errors=True)
    link = os.path.join(session_dir, pilot.uid)
    if os.path.islink(link):
        os.unlink(link)
    if elsewhere(pilot, session_dir):
        try:
            os.rmdir(os.path.dirname(pilot.sandbox))  # SANDBOX/<session uid>, when empty
        except OSError:
            pass
