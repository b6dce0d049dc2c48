"""The pilot's own main process dies (kill -9 of the bootstrap, as a failure of its node would
end it): every unit the store has ends exactly once, FAILED with the reason where nothing that
outlived the bootstrap knows its outcome; the pilot ends FAILED with its job's words; the job
ends and nothing of it is left running (agents, node daemons, zygotes, units), before the
client closes."""

from __future__ import annotations

import json
import os
import time

import pytest

import pilot as rp
from pilot.pmgr.core import reaper
from tests.conftest import active_pilot
from tests.faults import check_exactly_once, kill, truth_unit


@pytest.mark.parametrize("resource", ["local.localhost", "local.nodes4"])
def test_the_bootstrap_killed_ends_every_unit_once_and_leaves_nothing(session, tmp_path, resource):
    log = str(tmp_path / "truth.log")
    parts = ((2,),) if resource == "local.localhost" else (rp.ComputePartitionDescription(nodes=2),)
    pilot, umgr = active_pilot(session, parts=parts, resource=resource, runtime=10)
    units = umgr.submit_units([truth_unit(log, sleep=0.3) for _ in range(40)])
    deadline = time.monotonic() + 30
    while sum(u.state == rp.DONE for u in units) < 5:
        assert time.monotonic() < deadline, [u.state for u in units]
        time.sleep(0.02)
    with open(os.path.join(pilot.sandbox, "control.json")) as f:
        bootstrap = json.load(f)["pid"]
    kill(bootstrap)
    assert pilot.wait(timeout=30) == rp.FAILED
    assert pilot.reason
    umgr.wait_units(timeout=60)
    states = check_exactly_once(session, units, log)
    assert states[rp.DONE] >= 5 and states[rp.FAILED] >= 1, states
    for u in units:
        if u.state == rp.FAILED:
            assert u.reason and ("unknown" in u.reason or "lost" in u.reason), u.reason
    deadline = time.monotonic() + 30  # (the job's processes end on their own: no close yet)
    while reaper.session_processes(session.uid):
        assert time.monotonic() < deadline, [
            open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:120]
            for p in reaper.session_processes(session.uid)
        ]
        time.sleep(0.2)
    assert pilot.job.poll() is not None  # the job ended
