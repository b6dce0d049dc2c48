"""A second client process attaches to a running session and takes it over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

import pilot as rp
from tests.conftest import ROOT

FIRST_CLIENT = r"""
import json, os, sys
import pilot as rp
CUD = rp.ComputeUnitDescription
s = rp.Session()
pd = rp.ComputePilotDescription(**eval(sys.argv[1]), runtime=5)
pilot = rp.PilotManager(s).submit_pilots(pd)
pilot.partitions[0].wait(rp.ACTIVE, timeout=30)
umgr = rp.UnitManager(s)
umgr.add_pilots(pilot)
ranks = int(sys.argv[2])
sleepers = umgr.submit_units([CUD(executable="/bin/sleep", arguments=["0.4"], ranks=ranks)
                              for _ in range(8)])
sleepers[0].wait(rp.EXECUTING, timeout=30)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "pilot": pilot.uid,
                  "units": [u.uid for u in sleepers]}), flush=True)
os._exit(0)  # the client dies: no close, no goodbye; the pilot goes on
"""


LOCAL = "dict(resource='local.localhost', cores=2, parts=[rp.ComputePartitionDescription(cores=1)])"
NODES = "dict(resource='local.nodes4', parts=[rp.ComputePartitionDescription(nodes=2)])"


def first_client(database_url: str, pilot: str = LOCAL, ranks: int = 1) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=database_url)
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CLIENT, pilot, str(ranks)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_client_attaches_and_takes_over(make_session, database_url, sessions_dir):
    first = first_client(database_url)
    session = make_session(uid=first["session"], database_url=database_url)
    pmgr = rp.PilotManager(session)
    (pilot,) = pmgr.get_pilots()
    assert pilot.uid == first["pilot"] and pilot.state == rp.ACTIVE
    assert [p.state for p in pilot.partitions] == [rp.ACTIVE]
    umgr = rp.UnitManager(session)
    units = umgr.get_units()
    assert [u.uid for u in units] == first["units"]
    # units that ended while no client listened are reconciled with the agent, not guessed
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 8
    for u in units:
        assert [s for s, _ in u.history] == ["NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE"], (
            u.history
        )
    more = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true") for _ in range(5)])
    assert umgr.wait_units([u.uid for u in more], timeout=60) == [rp.DONE] * 5
    assert int(more[0].uid.rsplit(".", 1)[1]) == 8  # uids continue where the first left off
    new = pilot.reconfig(start=[rp.ComputePartitionDescription(cores=1)])[0]
    assert new.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE
    assert new.uid == f"{pilot.uid}.part.0001"
    session.writer.flush(timeout=60)
    rows = session.store.find("units", session=session.uid)
    assert Counter(r["state"] for r in rows) == {"DONE": 13}


def test_second_client_takes_over_a_multinode_pilot(make_session, tmp_path, sessions_dir):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = first_client(url, NODES, ranks=2)
    session = make_session(uid=first["session"], database_url=url)
    (pilot,) = rp.PilotManager(session).get_pilots()
    assert pilot.state == rp.ACTIVE
    umgr = rp.UnitManager(session)
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 8
    assert all(sorted(u.node) == ["node0", "node1"] for u in umgr.get_units())
    seen = []
    umgr.register_output_callback(lambda u, node, rank, stream, text: seen.append(node))
    more = umgr.submit_units(
        rp.ComputeUnitDescription(executable="/bin/echo", arguments=["hi"], ranks=2)
    )
    assert more.wait(timeout=30) == rp.DONE
    assert sorted(seen) == ["node0", "node1"]  # output now reaches the new client


def test_attaching_to_an_unknown_session_says_so(tmp_path):
    with pytest.raises(ValueError, match=r"Session: uid='session.nope' not found: no store"):
        rp.Session(uid="session.nope")


def test_outcomes_outlive_their_partition_and_the_clients_absence(make_session, tmp_path):
    """The client dies after its units were sent; they end while no client listens; a shell
    stops every partition (`pilot reconfig ... --stop all --start fill`); a new client
    attaches: every unit that ran to its end is DONE (the bootstrap kept the outcomes its
    agents reported until a client's store had them: partition/outbox.py)."""
    import time

    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = first_client(url)
    sandbox = os.path.join(os.environ["PILOT_SESSIONS_DIR"], first["session"], first["pilot"])
    journal = os.path.join(sandbox, f"{first['pilot']}.part.0000.started")  # (its start journal)
    log = os.path.join(sandbox, f"{first['pilot']}.part.0000.agent.log")
    deadline = time.monotonic() + 60  # 8 units of 0.4 s on one core
    while time.monotonic() < deadline:
        if os.path.exists(journal) and len(open(journal).read().split()) == 8:
            break
        time.sleep(0.2)
    time.sleep(1.0)  # the last one ends
    out = subprocess.run(
        [sys.executable, "-m", "pilot", "reconfig", f"{first['session']}/{first['pilot']}"]
        + ["--stop", "all", "--start", "fill"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PILOT_DATABASE_URL=url),
    )
    assert out.returncode == 0, out.stderr + out.stdout + open(log).read()[-2000:]
    session = make_session(uid=first["session"], database_url=url)
    (pilot,) = rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    states = umgr.wait_units(timeout=60)
    units = umgr.get_units()
    assert states == [rp.DONE] * 8, [(u.uid, u.state, u.reason) for u in units]
    assert all(u.exit_code == 0 for u in units)
