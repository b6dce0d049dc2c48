"""A client that attached to a session judges its pilots as the one that submitted them: silence
is no death while the pilot's batch job lives (followed by its id: pmgr/batch/ `follow`), an
attach that gets no answer (a stalled bootstrap) fails nothing and is asked again, and a job
that ended without a word ends its pilot lost at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pilot as rp
from pilot.pmgr.core import recovery
from tests.conftest import ROOT
from tests.faults import check_exactly_once, truth_unit

FIRST = r"""
import json, os, sys
import pilot as rp
from tests.faults import truth_unit
s = rp.Session()
pd = rp.ComputePilotDescription(resource=sys.argv[1], runtime=5,
                                parts=[rp.ComputePartitionDescription(cores=1)])
pilot = rp.PilotManager(s).submit_pilots(pd)
pilot.partitions[0].wait(rp.ACTIVE, timeout=30)
umgr = rp.UnitManager(s)
umgr.add_pilots(pilot)
units = umgr.submit_units([truth_unit(sys.argv[2], sleep=0.5) for _ in range(4)])
units[0].wait(rp.EXECUTING, timeout=30)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "pilot": pilot.uid, "job": pilot.job.pid}), flush=True)
os._exit(0)  # the client dies: no close; the pilot waits client_timeout s for another
"""


def first_client(tmp_path, url: str, client_timeout: int) -> tuple[dict, str]:
    cfg = tmp_path / "short.yaml"
    cfg.write_text(f"batch_system: local\ncores_per_node: 2\nclient_timeout: {client_timeout}\n")
    log = str(tmp_path / "truth.log")
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    out = subprocess.run(
        [sys.executable, "-c", FIRST, str(cfg), log],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), log


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # (the pilot job: the bootstrap's process group)
    except ProcessLookupError:
        pass


def test_an_attach_a_stalled_pilot_does_not_answer_fails_nothing(
    make_session, tmp_path, monkeypatch
):
    """The bootstrap is stopped (SIGSTOP) while a new client attaches: no answer in
    ATTACH_TIMEOUT s.  The pilot stays as it was (before: FAILED, "did not take the new
    client", its units with it); once it runs again the client attaches and its units end
    DONE.  (ATTACH_TIMEOUT 10 s and ATTACH_RETRY 5 s lowered to 4 s and 1 s here: the test
    is of what an unanswered attach does, not of how long it is waited for; an attach retried
    under load that takes longer than 4 s is only asked again.)"""
    monkeypatch.setattr(recovery, "ATTACH_TIMEOUT", 4.0)
    monkeypatch.setattr(recovery, "ATTACH_RETRY", 1.0)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first, log = first_client(tmp_path, url, client_timeout=60)
    job = first["job"]
    signal_group(job, signal.SIGSTOP)
    try:
        session = make_session(uid=first["session"], database_url=url)
        (pilot,) = rp.PilotManager(session).get_pilots()  # (waits ATTACH_TIMEOUT s)
        assert pilot.state == rp.ACTIVE and pilot.reattaching, (pilot.state, pilot.reason)
        umgr = rp.UnitManager(session)
    finally:
        signal_group(job, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while not pilot.linked:
        assert time.monotonic() < deadline, "the client did not attach once the pilot ran"
        time.sleep(0.1)
    units = umgr.get_units()
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 4, [(u.uid, u.reason) for u in units]
    check_exactly_once(session, units, log)
    more = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 2)
    assert umgr.wait_units([u.uid for u in more], timeout=30) == [rp.DONE] * 2
    session.writer.flush(timeout=30)
    failed = [h for h in session.store.history(session=session.uid) if h["state"] == "FAILED"]
    assert not failed, failed


def test_an_attached_client_waits_for_a_silent_pilot_whose_job_lives(make_session, tmp_path):
    """Attached, the client hears nothing from its pilot for longer than client_timeout (its
    bootstrap stopped 9 s, client_timeout 4 s): its job lives, so the pilot is waited for
    (before: given up as lost on silence alone, its units FAILED), and runs on after."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first, log = first_client(tmp_path, url, client_timeout=4)
    session = make_session(uid=first["session"], database_url=url)
    (pilot,) = rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    deadline = time.monotonic() + 30
    while not pilot.linked:  # (its hello, after the attach's answer)
        assert time.monotonic() < deadline, "the pilot did not say hello"
        time.sleep(0.05)
    assert pilot.job is not None
    signal_group(first["job"], signal.SIGSTOP)
    try:
        time.sleep(9)
        assert pilot.state == rp.ACTIVE, pilot.reason
    finally:
        signal_group(first["job"], signal.SIGCONT)
    units = umgr.get_units()
    more = umgr.submit_units([truth_unit(log, sleep=0.1) for _ in range(3)])
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 7, [(u.uid, u.reason) for u in units]
    check_exactly_once(session, list(units) + list(more), log)
    assert pilot.state == rp.ACTIVE


def test_an_attached_clients_pilot_whose_job_ended_without_a_word_is_lost(make_session, tmp_path):
    """The bootstrap killed (kill -9, its whole job) under an attached client: the pilot is
    lost at once, not after client_timeout (60 s), naming its job, and every unit ends once."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first, log = first_client(tmp_path, url, client_timeout=60)
    session = make_session(uid=first["session"], database_url=url)
    (pilot,) = rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    units = umgr.get_units()
    signal_group(first["job"], signal.SIGKILL)
    t0 = time.monotonic()
    assert pilot.wait(timeout=30) == rp.FAILED
    assert time.monotonic() - t0 < 10
    assert "without saying bye" in pilot.reason and "started by another client" in pilot.reason
    umgr.wait_units(timeout=30)
    states = check_exactly_once(session, units, log)
    assert sum(states.values()) == 4
