"""Shutdown in order: every message a close owes its pilots is sent before the pilot ends, or
knowingly dropped, silently (pmgr/core/session.py `close`, pmgr/core/pilot.py `_ack`).

The acknowledgement of a unit's outcome (`ack`: the store has it, the pilot may let go of it)
follows the store's write of that outcome; a store writer that is behind at close used to
leave it queued behind `cancel_pilot`, and it reached a pilot already gone ("cannot send to
pilot.0000: Host unreachable").
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pilot as rp
from tests.conftest import ROOT, active_pilot

EXECUTOR = r"""
import pilot as rp

def f(b):
    return len(b)

with rp.Executor() as ex:
    assert ex.submit(f, b"x" * 2_000_000).result() == 2_000_000
"""


def test_close_sends_the_acks_it_owes_before_the_pilot_ends(session, caplog):
    """The store writer held up for 1 s (a slow store) while a unit ends: its outcome's `ack`
    waits behind it; close() then sends it before `cancel_pilot`, nothing is refused."""
    pilot, umgr = active_pilot(session, parts=((1,),))
    u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["0.3"]))
    assert u.wait(rp.EXECUTING, timeout=20) == rp.EXECUTING
    session.writer.then(lambda: time.sleep(1.0))  # (the writer thread: the store is slow)
    assert u.wait(timeout=20) == rp.DONE
    with caplog.at_level(logging.INFO, logger="pmgr"):
        session.close()
    assert pilot.state == rp.CANCELED, pilot.reason
    said = [r.getMessage() for r in caplog.records if "not sent" in r.getMessage()]
    said += [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not said, said
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        bye = f.read().split("down.bye: ", 1)[1].split("\n", 1)[0]
    assert bye.endswith("1 outcome(s) acknowledged by the client, 0 not"), bye


def test_an_executor_closes_without_a_word_on_stderr(sessions_dir):
    """The manual's first executor example, as a script: its stderr stays empty."""
    out = subprocess.run(
        [sys.executable, "-c", EXECUTOR],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=str(sessions_dir),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr == "", out.stderr[-3000:]
