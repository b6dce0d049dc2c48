"""A take-over cut short: the clients that take a running pilot over (rp.Session(uid=...,
take_over=True)) are killed (SIGKILL) at random points of the hand-over, the first of them
together with the old owner; a last client takes over: every unit any of them submitted ends
exactly once, DONE, started once (the units' own log and the agents' start journals say so),
none ran that the store does not know, and no process is left.

The points: a stage the client reached (tests/scenarios/takeover_client.py says each on
stdout: the process started, its Session made, the pilot attached, its units adopted, more
units submitted), then a random delay; the one after `session` spans the bootstrap's side of
the hand-over (partition/control.py attach: the old owner told, up to RELEASE_WAIT s for its
`released`, the link switched).
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

import pilot as rp
from pilot.pmgr.core import reaper
from tests.conftest import ROOT
from tests.faults import check_exactly_once, read_truth

FIRST_UNITS = 40  # 0.3 s each on 4 cores: in flight through the first take-overs
MORE_UNITS = 6  # submitted by each client that gets that far
CUTS = 4  # take-overs cut short, the first with the old owner killed at the same time
# a stage reached, and the longest delay after it: `start` covers the client's imports and
# its Session; `session` the bootstrap's side of the hand-over
SPREAD = {"start": 1.5, "session": 2.5, "attached": 0.5, "adopted": 0.5, "submitted": 0.5}
# clients killed as soon as they asked the bootstrap to attach: their requests wait there
# while it hands the pilot to the one before (RELEASE_WAIT s for a dead owner's `released`),
# and the last client's may be served before them (a ROUTER serves its peers in turn).  Before
# the bootstrap probed an attaching client, such a stale request took the pilot from the last
# client, which had taken it over (and released it: rp.PilotOwned)
QUEUED = [("attached", 0.1), ("session", 0.1), ("session", 0.1), ("session", 0.1)]
RESOURCE = "batch_system: local\ncores_per_node: 4\nclient_timeout: 60\n"


class Client:
    """A takeover_client process, its stdout's stage lines read with a deadline."""

    def __init__(self, argv: list[str], env: dict, errors) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.scenarios.takeover_client", *argv],
            stdout=subprocess.PIPE,
            stderr=errors,
            cwd=ROOT,
            env=env,
        )
        self.stages: dict[str, dict] = {}
        self.buf = b""

    def read(self, timeout: float) -> None:
        """Read what it said, for at most `timeout` s."""
        if select.select([self.proc.stdout], [], [], max(timeout, 0))[0]:
            data = os.read(self.proc.stdout.fileno(), 65536)
            *lines, self.buf = (self.buf + data).split(b"\n")
            for line in lines:
                said = json.loads(line)
                self.stages[said["stage"]] = said
            if not data:  # it exited: say so to the one waiting
                time.sleep(min(timeout, 0.05))

    def wait_for(self, stage: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while stage not in self.stages:
            assert self.proc.poll() is None, f"the client exited {self.proc.returncode}"
            left = deadline - time.monotonic()
            assert left > 0, f"the client did not reach {stage} in {timeout:g} s: {self.stages}"
            self.read(min(left, 0.5))
        return self.stages[stage]

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, reading what it says meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and self.proc.poll() is None:
            self.read(left)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def reap(self) -> None:
        self.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def started_in_journals(sandbox: str) -> Counter:
    """uid -> how many times its agent journaled its start (agent/agent.py)."""
    started: Counter = Counter()
    for name in os.listdir(sandbox):
        if name.endswith(".started"):
            with open(os.path.join(sandbox, name)) as f:
                started.update(line.strip() for line in f if line.strip())
    return started


@pytest.mark.parametrize("cuts", ["random", "queued"])
def test_a_take_over_cut_short_loses_nothing_and_runs_nothing_twice(make_session, tmp_path, cuts):
    seed = int(os.environ.get("PILOT_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    rnd = random.Random(seed)
    points = QUEUED
    if cuts == "random":
        stages = [rnd.choice(list(SPREAD)) for _ in range(CUTS)]
        points = [(stage, round(rnd.uniform(0, SPREAD[stage]), 2)) for stage in stages]
    why = f"seed {seed}, killed at {points}, see {tmp_path / 'clients.log'}"
    resource = tmp_path / "four.yaml"
    resource.write_text(RESOURCE)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    log = str(tmp_path / "truth.log")
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    clients: list[Client] = []
    last = None  # the last client's Session (the make_session fixture closes it)
    t0 = time.monotonic()
    with open(tmp_path / "clients.log", "ab") as errors:
        try:
            owner = Client([str(resource), log, str(FIRST_UNITS)], env, errors)
            clients.append(owner)
            uid = owner.wait_for("running")["session"]
            for i, (stage, delay) in enumerate(points):
                new = Client([str(resource), log, str(MORE_UNITS), uid], env, errors)
                clients.append(new)
                if stage != "start":
                    new.wait_for(stage)
                new.sleep(delay)
                new.kill()
                if i == 0:
                    owner.kill()  # (the old owner, alive so far, at the same moment)
                new.reap()
                errors.write(f"--- killed after {stage} + {delay} s: {new.stages}\n".encode())
                errors.flush()
            cut = time.monotonic() - t0
            session = last = make_session(uid=uid, database_url=url, take_over=True)
            errors.write(f"--- the last client: {session.channel.endpoint}\n".encode())
            errors.flush()
            (pilot,) = rp.PilotManager(session).get_pilots()
            assert pilot.state == rp.ACTIVE, (pilot.reason, why)
            umgr = rp.UnitManager(session)
            states = umgr.wait_units(timeout=60)
            units = umgr.get_units()
            assert Counter(states) == {rp.DONE: len(units)}, (
                [(u.uid, u.state, u.reason) for u in units if u.state != rp.DONE],
                why,
            )
            try:
                check_exactly_once(session, units, log)
            except AssertionError as exc:
                raise AssertionError(f"{exc} ({why})") from None
            known = {u.uid for u in units}
            starts, _ = read_truth(log)
            assert set(starts) <= known, (set(starts) - known, why)  # (none ran unknown)
            journaled = started_in_journals(pilot.sandbox)
            assert max(journaled.values()) == 1, ([u for u, n in journaled.items() if n > 1], why)
            assert set(journaled) == known, why
            session.close()
            left = reaper.session_processes(uid)
            assert not left, (f"processes left behind: {left}", why)
        finally:
            for c in clients:
                c.reap()
            said = clients[0].stages.get("session") if clients else None
            if last is None and said:  # (failed before the last client took the pilot)
                reaper.kill_session_processes(said["session"])
    print(
        f"{len(units)} units, {CUTS} take-overs cut short ({why}): {cut:.1f} s, "
        f"in all {time.monotonic() - t0:.1f} s"
    )
