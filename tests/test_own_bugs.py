"""A unit's environment is the user's, and our own bugs are not a peer's bad messages.

Nothing of the client's Python reaches a unit (the pilot's processes find this project as its
installation does; function workers alone get the client's module directories, in a variable
only they see).  A handler that raises after the message it handles was checked
(pilot/wire/messages.py) is an internal error: logged once per kind with its traceback, and the
component goes on; a malformed message is a bad message, named, without a traceback."""

from __future__ import annotations

import logging
import os
import time

import pytest

import pilot as rp
from pilot.pmgr.core.pilot import Pilot
from tests.conftest import active_pilot


def test_a_units_environment_is_the_users(session, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    pilot, umgr = active_pilot(session, parts=((1,),))
    seen = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/sh",
            arguments=["-c", 'echo "${PYTHONPATH-unset}|${PILOT_FUNCTION_PATH-unset}"'],
        )
    )
    assert seen.wait(timeout=30) == rp.DONE, seen.reason
    assert seen.stdout.strip() == "unset|unset"
    if os.path.exists("/usr/bin/python3"):  # another interpreter does not find the project
        other = umgr.submit_units(
            rp.ComputeUnitDescription(
                executable="/usr/bin/python3", arguments=["-c", "import pilot"]
            )
        )
        assert other.wait(timeout=30) == rp.FAILED and "ModuleNotFoundError" in other.stderr


@pytest.mark.internal_errors_expected
def test_a_bug_in_a_handler_is_an_internal_error_not_a_bad_message(session, caplog, monkeypatch):
    calls = []

    def broken(self, body):  # a bug of our own in the heartbeat handler
        calls.append(1)
        raise KeyError("no such field")

    monkeypatch.setattr(Pilot, "on_hb", broken)
    from pilot.pmgr.core import session_dispatch

    monkeypatch.setitem(session_dispatch.HANDLERS, b"hb", session_dispatch.pilot_handler(broken))
    with caplog.at_level(logging.ERROR):
        pilot, umgr = active_pilot(session, parts=((1,),))
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        unit = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
        assert unit.wait(timeout=30) == rp.DONE  # the client went on
    internal = [r for r in caplog.records if r.getMessage().startswith("INTERNAL ERROR")]
    assert len(calls) >= 3 and len(internal) == 1, [r.getMessage() for r in internal]
    assert "KeyError" in internal[0].getMessage() and internal[0].exc_info is not None
    assert not any("bad message" in r.getMessage() for r in caplog.records)
