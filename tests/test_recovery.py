"""A second client process attaches to a running session and takes it over."""

from __future__ import annotations

import json
import logging
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
    return run_client(FIRST_CLIENT, database_url, pilot, str(ranks))


def run_client(script: str, database_url: str, *args: str) -> dict:
    """Run a client `script` (python -c) on the store at `database_url`: the JSON it printed
    last (its session, ...), once it has exited (or died, as it means to)."""
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=database_url)
    out = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_client_attaches_and_takes_over(make_session, database_url, sessions_dir, caplog):
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
    # uids come from blocks the store reserves for each client: never one the first had
    assert int(more[0].uid.rsplit(".", 1)[1]) >= 8 and more[0].uid not in first["units"]
    new = pilot.reconfig(start=[rp.ComputePartitionDescription(cores=1)])[0]
    assert new.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE
    assert new.uid == f"{pilot.uid}.part.0001"
    session.writer.flush(timeout=60)
    rows = session.store.find("units", session=session.uid)
    assert Counter(r["state"] for r in rows) == {"DONE": 13}
    with caplog.at_level(logging.WARNING, logger="pmgr"):  # (the bootstrap, not its child,
        session.close()  # exits on its own after bye: nothing is left to kill)
    assert not [r.getMessage() for r in caplog.records if "leftover" in r.getMessage()]


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


# the start of the client scripts below: a local pilot of 2 cores, one partition of 1 core,
# and its UnitManager (`truth_unit`s write tests/faults.py's truth log)
LOCAL_CLIENT = r"""
import json, os, sys, time
import pilot as rp
from tests.faults import truth_unit
s = rp.Session()
pd = rp.ComputePilotDescription(resource="local.localhost", cores=2, runtime=5,
                                parts=[rp.ComputePartitionDescription(cores=1)])
pilot = rp.PilotManager(s).submit_pilots(pd)
pilot.partitions[0].wait(rp.ACTIVE, timeout=30)
umgr = rp.UnitManager(s)
umgr.add_pilots(pilot)
"""


TRUTH_CLIENT = (
    LOCAL_CLIENT
    + r"""
units = umgr.submit_units([truth_unit(sys.argv[1], sleep=0.2) for _ in range(8)])
units[0].wait(rp.EXECUTING, timeout=30)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "pilot": pilot.uid}), flush=True)
os._exit(0)  # the client dies: no close, no goodbye; the pilot goes on
"""
)


def test_outcomes_outlive_their_partition_and_the_clients_absence(make_session, tmp_path):
    """The client dies after its units were sent; they end while no client listens; a shell
    stops every partition (`pilot reconfig ... --stop all --start fill`); a new client
    attaches: every unit that ran to its end is DONE (the bootstrap kept the outcomes its
    agents reported until a client's store had them: partition/client/outbox.py)."""
    import time

    from tests.faults import check_exactly_once, read_truth

    url, log = f"sqlite:///{tmp_path / 'state.db'}", str(tmp_path / "truth.log")
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    first = run_client(TRUTH_CLIENT, url, log)
    deadline = time.monotonic() + 60
    while sum(read_truth(log)[1].values()) < 8 and time.monotonic() < deadline:
        time.sleep(0.1)  # (all 8 ended while no client listened)
    time.sleep(0.3)  # (their final states reach the bootstrap)
    out = subprocess.run(
        [sys.executable, "-m", "pilot", "reconfig", f"{first['session']}/{first['pilot']}"]
        + ["--stop", "all", "--start", "fill"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    session = make_session(uid=first["session"], database_url=url)
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    states = umgr.wait_units(timeout=60)
    units = umgr.get_units()
    assert states == [rp.DONE] * 8, [(u.uid, u.state, u.reason) for u in units]
    check_exactly_once(session, units, log)


LIVE_CLIENT = r"""
import json, sys, time
import pilot as rp
s = rp.Session()
pd = rp.ComputePilotDescription(resource=sys.argv[1], runtime=5,
                                parts=[rp.ComputePartitionDescription(cores=1)])
pilot = rp.PilotManager(s).submit_pilots(pd)
pilot.partitions[0].wait(rp.ACTIVE, timeout=30)
umgr = rp.UnitManager(s)
umgr.add_pilots(pilot)
units = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true") for _ in range(4)])
umgr.wait_units(timeout=30)
sleeper = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["30"]))
sleeper.wait(rp.EXECUTING, timeout=30)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "pilot": pilot.uid, "units": [u.uid for u in units]}),
      flush=True)
sys.stdin.readline()  # taken over meanwhile
time.sleep(5)  # beyond the resource's client_timeout: a client that was not told fails it
late = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
try:  # (the sleeper ends in the new owner's client, not here: it waited for ever)
    umgr.wait_units(timeout=20)
    waited = "returned"
except rp.PilotOwned as exc:
    waited = f"PilotOwned: {exc}"
except TimeoutError:
    waited = "timeout"
print(json.dumps({"released": pilot.released, "pilot": pilot.state,
                  "states": [u.state for u in units], "late": [late.state, late.reason],
                  "waited": waited}), flush=True)
s.close(terminate=False)
"""


def test_one_owner_per_pilot_and_a_take_over(make_session, tmp_path):
    """A pilot with a live owning client refuses a second client (rp.PilotOwned, naming the
    owner) unless it takes over; the old owner is told and stops acting on the pilot (it
    fails nothing on silence), and the two clients never hand out the same unit id."""
    cfg = tmp_path / "short.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 2\nclient_timeout: 3\n")
    url = f"sqlite:///{tmp_path / 'state.db'}"
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    first = subprocess.Popen(
        [sys.executable, "-c", LIVE_CLIENT, str(cfg)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        said = json.loads(first.stdout.readline())
        refused = make_session(uid=said["session"], database_url=url)
        with pytest.raises(rp.PilotOwned, match=rf"owned by the client on .*pid {first.pid}"):
            rp.PilotManager(refused)
        session = make_session(uid=said["session"], database_url=url, take_over=True)
        (pilot,) = rp.PilotManager(session).get_pilots()
        assert pilot.state == rp.ACTIVE, pilot.reason
        umgr = rp.UnitManager(session)
        more = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 3)
        assert umgr.wait_units([u.uid for u in more], timeout=60) == [rp.DONE] * 3, [
            (u.state, u.reason) for u in more
        ]
        assert not {u.uid for u in more} & set(said["units"])  # (ids from the store)
        first.stdin.write("report\n")
        first.stdin.flush()
        late = json.loads(first.stdout.readline())
        assert late["released"] and f"pid {os.getpid()}" in late["released"], late
        assert late["pilot"] == rp.ACTIVE and rp.FAILED not in late["states"], late
        # (what it asks of a pilot it no longer has: said at once, never waited for)
        assert late["late"][0] == rp.FAILED and "taken over" in late["late"][1], late
        assert late["waited"].startswith("PilotOwned: pilot.") and "taken over" in late["waited"]
        assert first.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_an_owner_stopped_through_a_take_over_fails_nothing_when_it_comes_back(
    make_session, tmp_path
):
    """The owning client is stopped (SIGSTOP) for longer than client_timeout; another client
    attaches meanwhile (the owner counts as gone: it is not told).  Back, the old owner finds
    its pilot silent: the store's owner mark (pmgr/core/ownership.py) says who took it over, so it
    releases the pilot and fails nothing (before: pilot, partition and units FAILED in the
    store the new owner writes)."""
    import signal
    import time

    cfg = tmp_path / "short.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 2\nclient_timeout: 6\n")
    url = f"sqlite:///{tmp_path / 'state.db'}"
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    first = subprocess.Popen(
        [sys.executable, "-c", LIVE_CLIENT, str(cfg)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        said = json.loads(first.stdout.readline())
        os.kill(first.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        time.sleep(3.5)  # (past OWNER_SILENCE: the owner counts as gone)
        session = make_session(uid=said["session"], database_url=url)
        (pilot,) = rp.PilotManager(session).get_pilots()
        umgr = rp.UnitManager(session)
        more = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 3)
        time.sleep(max(0.0, stopped + 7.0 - time.monotonic()))  # (past client_timeout)
        os.kill(first.pid, signal.SIGCONT)
        first.stdin.write("report\n")
        first.stdin.flush()
        late = json.loads(first.stdout.readline())
        assert late["released"] and f"pid {os.getpid()}" in late["released"], late
        assert late["pilot"] == rp.ACTIVE and rp.FAILED not in late["states"], late
        assert first.wait(timeout=30) == 0
        assert umgr.wait_units([u.uid for u in more], timeout=60) == [rp.DONE] * 3
        assert pilot.state == rp.ACTIVE and all(p.state == rp.ACTIVE for p in pilot.partitions)
        session.writer.flush(timeout=30)
        failed = [h for h in session.store.history(session=session.uid) if h["state"] == "FAILED"]
        assert not failed, failed
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
            first.wait()


ROWS_BEHIND_CLIENT = (
    LOCAL_CLIENT
    + r"""
send = s.channel.send
def sent_then_die(pilot_uid, frames):
    send(pilot_uid, frames)
    if frames[0] == b"units":  # (on the store writer: the units' docs are in, their rows wait)
        time.sleep(0.5)  # (the channel thread sends them)
        print(json.dumps({"session": s.uid}), flush=True)
        os._exit(0)  # the client dies before its writer wrote the units' NEW and SCHEDULING
s.channel.send = sent_then_die
umgr.submit_units([truth_unit(sys.argv[1], sleep=0.2) for _ in range(4)])
time.sleep(60)
"""
)


def test_units_sent_before_their_first_rows_were_written_keep_one_history(make_session, tmp_path):
    """A unit's doc is written ahead of its first history rows, so that it can be sent at
    once; the client dies after the send and before the rows.  The next client finds docs
    without rows: it writes the states they say (NEW, SCHEDULING) as the rows they lack, and
    the store's history and the client's agree row for row (before: the client's began at
    SCHEDULING, the store's at QUEUED)."""
    from tests.faults import check_exactly_once

    url, log = f"sqlite:///{tmp_path / 'state.db'}", str(tmp_path / "truth.log")
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    out = subprocess.run(
        [sys.executable, "-c", ROWS_BEHIND_CLIENT, log],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    uid = json.loads(out.stdout.strip().splitlines()[-1])["session"]
    session = make_session(uid=uid, database_url=url)
    assert not [h for h in session.store.history(session=uid) if h["kind"] == "units"]
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 4
    units = umgr.get_units()
    check_exactly_once(session, units, log)
    for u in units:
        assert [s for s, _ in u.history] == ["NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE"]


FINAL_DOCS_CLIENT = (
    LOCAL_CLIENT
    + r"""
from pymongo.collection import Collection
bulk_write, final = Collection.bulk_write, []
def dies_between(self, requests, *args, **kwargs):
    if self.name == "units" and any(
        getattr(r, "_doc", {}).get("$set", {}).get("state") in rp.FINAL for r in requests
    ):
        final.append(True)  # (a batch with a unit's final doc: it goes in, its rows never)
    elif self.name == "history" and final:
        print(json.dumps({"session": s.uid}), flush=True)
        os._exit(0)  # the client dies between the batch's docs and its history rows
    return bulk_write(self, requests, *args, **kwargs)
Collection.bulk_write = dies_between
umgr.submit_units([truth_unit(sys.argv[1], sleep=0.3) for _ in range(3)])
time.sleep(60)
"""
)


def test_final_docs_written_without_their_rows_get_them_at_the_next_attach(
    make_session, tmp_path, mongo_url
):
    """MongoDB writes a batch's docs, then its history rows; the client dies between them
    with a unit's final doc in: the unit is final in the store, so the next client adopts it
    as final and asks no agent of it.  The unit was recorded until its rows were in: the next
    client writes the rows the doc's own history has (the chaos campaign's seed 21 found a
    DONE doc whose history stopped at EXECUTING), and the store's history and the units'
    agree row for row."""
    from tests.faults import check_exactly_once

    log = str(tmp_path / "truth.log")
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=mongo_url)
    out = subprocess.run(
        [sys.executable, "-c", FINAL_DOCS_CLIENT, log],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    uid = json.loads(out.stdout.strip().splitlines()[-1])["session"]
    session = make_session(uid=uid, database_url=mongo_url)
    behind = session.store.rows_pending(uid)
    assert behind, "the dying client's final doc is not recorded as pending"
    for doc in behind:  # (the state its doc says, no history row of it)
        rows = [h["state"] for h in session.store.history(uid=doc["uid"])]
        assert doc["state"] in rp.FINAL and doc["state"] not in rows, (doc["state"], rows)
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 3
    check_exactly_once(session, umgr.get_units(), log)
    assert session.store.rows_pending(uid) == []


LARGE_CLIENT = r"""
import json, os, sys
import pilot as rp

def digest_times(blob, n):
    import hashlib, time
    time.sleep(1.0)  # (the client dies meanwhile)
    return hashlib.sha256(blob).digest() * n

s = rp.Session()
pd = rp.ComputePilotDescription(resource="local.localhost", cores=2, runtime=5,
                                parts=[rp.ComputePartitionDescription(cores=2)])
pilot = rp.PilotManager(s).submit_pilots(pd)
pilot.partitions[0].wait(rp.ACTIVE, timeout=30)
assert pilot.partitions[0].data_shared  # (a local pilot sees the session's data directory)
umgr = rp.UnitManager(s)
umgr.add_pilots(pilot)
units = umgr.submit_units([
    rp.ComputeUnitDescription(function=digest_times, args=(bytes([i]) * 100_000, 4096))
    for i in range(4)])
for u in units:
    u.wait(rp.EXECUTING, timeout=30)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "units": [u.uid for u in units]}), flush=True)
os._exit(0)  # the client dies while the calls run: their values are files no one asked for yet
"""


def test_large_values_by_reference_outlive_the_client(make_session, tmp_path):
    """A call's large arguments and value cross by reference (the data directory's file
    names), and its outcome still waits for a client: the client dies while its calls run,
    the workers write their values and the bootstrap keeps the outcomes (with the names); a
    new client attaches and gets every value, whole, each unit DONE once."""
    import hashlib

    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = run_client(LARGE_CLIENT, url)
    session = make_session(uid=first["session"], database_url=url)
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    assert umgr.wait_units(first["units"], timeout=60) == [rp.DONE] * 4
    for i, unit in enumerate(umgr.get_units(first["units"])):
        assert unit.return_value == hashlib.sha256(bytes([i]) * 100_000).digest() * 4096
        assert [s for s, _ in unit.history].count(rp.DONE) == 1, unit.history


OWNER_CLIENT = r"""
import json, os
import pilot as rp
s = rp.Session()
pd = rp.ComputePilotDescription(resource="local.localhost", cores=1, runtime=5,
                                parts=[rp.ComputePartitionDescription(cores=1)])
pilot = rp.PilotManager(s).submit_pilots(pd)
pilot.partitions[0].wait(rp.ACTIVE, timeout=30)
assert pilot.partitions[0].data_shared
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid}), flush=True)
os._exit(0)
"""


def big_value(n):
    return bytes([7]) * n


def test_a_client_with_another_data_directory_gets_large_values_as_bytes(
    make_session, tmp_path, monkeypatch
):
    """A client that attaches with a data directory the pilot's agents do not see (another
    host's) is told of in the attach: the agents' workers send it large values as bytes from
    then on, not names of files where it cannot read them."""
    from pilot.pmgr.core import recovery

    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = run_client(OWNER_CLIENT, url)
    elsewhere = {"dir": str(tmp_path / "elsewhere"), "token": "1" * 32, "sync": True}
    monkeypatch.setattr(recovery.data_files, "for_pilot", lambda data, local: elsewhere)
    session = make_session(uid=first["session"], database_url=url)
    (pilot,) = rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    unit = umgr.submit_units(rp.ComputeUnitDescription(function=big_value, args=(100_000,)))
    assert umgr.wait_units(unit.uid, timeout=60) == [rp.DONE], unit.reason
    assert type(unit.value) is bytes  # (not a name of a file in the first client's directory)
    assert unit.return_value == bytes([7]) * 100_000


CANCELING_CLIENT = (
    LOCAL_CLIENT
    + r"""
sleepers = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/sleep",
                                                        arguments=["30"]) for _ in range(3)])
sleepers[0].wait(rp.EXECUTING, timeout=30)
sent = [u.uid for u in sleepers if u.part is not None]
send = pilot.command  # the client dies after cancel_units returned, before its cancel left:
pilot.command = lambda cmd: None if cmd["op"] == "cancel_units" else send(cmd)
umgr.cancel_units(reason="not wanted any more")
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "pilot": pilot.uid, "sent": sent}), flush=True)
os._exit(0)  # no close, no goodbye; the pilot goes on
"""
)


def test_a_cancel_outlives_the_client_that_asked_it(make_session, database_url):
    """A client asks its units' cancel and dies before the cancel reaches the pilot: a client
    that attaches asks it again (the reason is kept with each unit's doc), so the units end
    CANCELED with that reason instead of running on (`sleep 30`), and the store agrees."""

    first = run_client(CANCELING_CLIENT, database_url)
    assert first["sent"], first  # (one at least is at the partition, running)
    session = make_session(uid=first["session"], database_url=database_url)
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    states = umgr.wait_units(timeout=20)  # (not after the sleeps' 30 s)
    units = umgr.get_units()
    assert states == [rp.CANCELED] * 3, [(u.uid, u.state, u.reason) for u in units]
    assert {u.reason for u in units} == {"not wanted any more"}
    session.writer.flush(timeout=30)
    rows = session.store.find("units", session=session.uid)
    assert Counter(r["state"] for r in rows) == {"CANCELED": 3}


HANDED_BACK_CLIENT = (
    LOCAL_CLIENT
    + r"""
units = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["30"])]
                          + [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(3)])
units[0].wait(rp.EXECUTING, timeout=30)
umgr.events.on_units_back = lambda *a, **k: None  # the client dies before the `back` is read:
part = pilot.partitions[0]  # it never routes them again, and its store has them sent to `part`
pilot.reconfig(stop=part.uid, start=[rp.ComputePartitionDescription(cores=1)])
part.wait(timeout=30)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "stopped": part.uid, "sent": [u.uid for u in units
                  if u.part == part.uid and u.state == rp.QUEUED]}), flush=True)
os._exit(0)  # no close, no goodbye; the pilot goes on
"""
)


def test_units_handed_back_while_no_client_listened_run_after_an_attach(make_session, tmp_path):
    """A partition is stopped and hands its queued units back, and the client dies before it
    reads the `back`: its store has them QUEUED there.  The client that attaches asks that
    partition (gone) with `sync`; the bootstrap kept the hand-back and says `back` again, so
    they are routed again and run (before: FAILED, "lost with" the partition, never having
    run); the unit that ran there ends as its stop ended it."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = run_client(HANDED_BACK_CLIENT, url)
    assert first["sent"], first  # (queued at the stopped partition when it stopped)
    session = make_session(uid=first["session"], database_url=url)
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    umgr.wait_units(timeout=30)
    units = {u.uid: u for u in umgr.get_units()}
    assert [units[uid].state for uid in first["sent"]] == [rp.DONE] * len(first["sent"]), [
        (u.uid, u.state, u.reason) for u in units.values()
    ]
    assert all(units[uid].part != first["stopped"] for uid in first["sent"])
    assert units["unit.000000"].state == rp.CANCELED  # (it ran there: stopped with it)


GIVEN_BACK_CLIENT = (
    LOCAL_CLIENT
    + r"""
units = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["2"])]
                          + [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(3)])
units[0].wait(rp.EXECUTING, timeout=30)
part = pilot.partitions[0]
queued = [u.uid for u in units if u.part == part.uid and u.state == rp.QUEUED]
read = []  # the client dies before it acts on the `back`: its store has them QUEUED at `part`
umgr.events.on_units_back = lambda *a, **k: read.append(a)
pilot.command({"cid": None, "op": "give_back", "args": {"part": part.uid, "uids": queued}})
deadline = time.monotonic() + 30
while not read and time.monotonic() < deadline:
    time.sleep(0.05)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "sent": queued, "read": len(read)}), flush=True)
os._exit(0)
"""
)


def test_units_a_live_partition_gave_back_while_no_client_listened_run_after_an_attach(
    make_session, tmp_path
):
    """As above, with the partition alive: it gave its queued units back when asked
    (`give_back`), and forgot them; its agent answers the next client's `sync` that it does
    not know them, and the bootstrap, which kept the hand-back, says `back`: they run."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = run_client(GIVEN_BACK_CLIENT, url)
    assert first["sent"] and first["read"] == 1, first
    session = make_session(uid=first["session"], database_url=url)
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    assert umgr.wait_units(timeout=30) == [rp.DONE] * 4, [
        (u.uid, u.state, u.reason) for u in umgr.get_units()
    ]


UNHEARD_CLIENT = (
    LOCAL_CLIENT
    + r"""
from tests.faults import read_truth
umgr.events.on_unit_moves = lambda groups: []  # it dies before any move of theirs is stored:
units = umgr.submit_units([truth_unit(sys.argv[1], sleep=60), truth_unit(sys.argv[1], sleep=0.1)])
deadline = time.monotonic() + 30  # its store has them sent to the partition (SCHEDULING)
while (any(u.part is None for u in units) or not read_truth(sys.argv[1])[0]) \
        and time.monotonic() < deadline:
    time.sleep(0.05)  # (until the first has started there)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "sandbox": pilot.sandbox, "part": pilot.partitions[0].uid,
                  "units": [u.uid for u in units]}), flush=True)
os._exit(0)
"""
)


def attach_after_agent_killed(make_session, first: dict, url: str) -> tuple:
    """The agent of `first`'s partition killed (-9) while no client listens, then a client
    attached, and, once that partition ended, a new one of a core started for what is routed
    again: (the session, the pilot, its UnitManager)."""
    import re
    import signal
    import time

    with open(os.path.join(first["sandbox"], f"{first['part']}.agent.log")) as f:
        os.kill(int(re.search(r": up, pid (\d+)", f.read())[1]), signal.SIGKILL)
    session = make_session(uid=first["session"], database_url=url)
    (pilot,) = rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    deadline = time.monotonic() + 30
    while not pilot.partitions[0].final and time.monotonic() < deadline:
        time.sleep(0.1)
    pilot.reconfig(start=[rp.ComputePartitionDescription(cores=1)])
    return session, pilot, umgr


def test_a_unit_started_by_an_agent_that_died_while_no_client_listened_never_runs_again(
    make_session, tmp_path
):
    """The client dies right after its units were sent (its store has them SCHEDULING at the
    partition); the first starts; the partition's agent is killed (-9) while no client
    listens; a client attaches.  The partition's start journal has the first: it ends FAILED
    (killed with its agent, or its outcome unknown), and never runs again (before: routed
    again as never sent, it ran twice, and its history hid it); the second never started and
    runs once elsewhere."""
    from tests.faults import check_exactly_once, read_truth

    url, log = f"sqlite:///{tmp_path / 'state.db'}", str(tmp_path / "truth.log")
    first = run_client(UNHEARD_CLIENT, url, log)
    assert read_truth(log)[0] == {first["units"][0]: 1}
    session, pilot, umgr = attach_after_agent_killed(make_session, first, url)
    states = umgr.wait_units(timeout=60)
    units = umgr.get_units()
    assert states == [rp.FAILED, rp.DONE], [(u.uid, u.state, u.reason) for u in units]
    assert any(w in units[0].reason for w in ("its agent exited with code -9", "agent is gone"))
    check_exactly_once(session, units, log)
    assert read_truth(log)[0] == {u: 1 for u in first["units"]}


def test_units_whose_pilot_died_unheard_are_not_run_again_elsewhere(make_session, tmp_path):
    """The client dies right after its units were sent (its store has them SCHEDULING at
    the partition); the first starts; the pilot's bootstrap is stopped; a client attaches
    and adds a second pilot; the bootstrap is killed.  Nothing that outlived the first pilot
    knows whether its units reached it (the attach went unanswered): they end FAILED (their
    outcome unknown) and do not run again on the second pilot (before: routed again as only
    sent, each ran twice); only a restartable one would."""
    import signal

    from pilot.pmgr.core import reaper
    from tests.faults import read_truth

    url, log = f"sqlite:///{tmp_path / 'state.db'}", str(tmp_path / "truth.log")
    first = run_client(UNHEARD_CLIENT, url, log)
    assert read_truth(log)[0] == {first["units"][0]: 1}
    (boot,) = [p for p in reaper.session_processes(first["session"])
               if "pilot.partition.bootstrap" in open(f"/proc/{p}/cmdline").read()]  # fmt: skip
    os.kill(boot, signal.SIGSTOP)  # (it does not answer the attach: its units are adopted)
    session = make_session(uid=first["session"], database_url=url)
    pmgr = rp.PilotManager(session)
    (gone,) = pmgr.get_pilots()
    umgr = rp.UnitManager(session)
    assert not gone.final
    os.kill(boot, signal.SIGKILL)
    other = pmgr.submit_pilots(
        rp.ComputePilotDescription(resource="local.localhost", cores=1, runtime=5)
    )
    umgr.add_pilots(other)
    states = umgr.wait_units(timeout=60)
    units = umgr.get_units()
    assert gone.state == rp.FAILED
    starts = read_truth(log)[0]  # (the second may have started on the first pilot meanwhile)
    assert starts[first["units"][0]] == 1 and set(starts.values()) == {1}, starts
    assert states == [rp.FAILED] * 2, [(u.uid, u.state, u.reason) for u in units]
    assert all(u.pilot is gone and "lost with partition" in u.reason for u in units)


# (a client script's part: one unit running and three queued behind it at one agent)
ONE_RUNNING_THREE_QUEUED = r"""
units = umgr.submit_units([truth_unit(sys.argv[1], sleep=30)]
                          + [truth_unit(sys.argv[1], sleep=0.1) for _ in range(3)])
deadline = time.monotonic() + 30
while [u.state for u in units] != ["EXECUTING"] + ["QUEUED"] * 3 \
        and time.monotonic() < deadline:
    time.sleep(0.05)
"""

QUEUED_CLIENT = (
    LOCAL_CLIENT
    + ONE_RUNNING_THREE_QUEUED
    + r"""
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid, "sandbox": pilot.sandbox, "part": pilot.partitions[0].uid,
                  "states": [u.state for u in units]}), flush=True)
os._exit(0)
"""
)


def test_units_queued_at_an_agent_that_died_while_no_client_listened_run_elsewhere(
    make_session, tmp_path
):
    """One unit runs and three wait QUEUED at a partition of one core; the client dies; the
    partition's agent is killed (-9) while no client listens; a client attaches.  The start
    journal shows the three never started: they run once elsewhere (before: FAILED "lost",
    never having run); the one that ran ends FAILED, killed with its agent."""
    from tests.faults import check_exactly_once, read_truth

    url, log = f"sqlite:///{tmp_path / 'state.db'}", str(tmp_path / "truth.log")
    first = run_client(QUEUED_CLIENT, url, log)
    assert first["states"] == ["EXECUTING"] + ["QUEUED"] * 3, first
    session, pilot, umgr = attach_after_agent_killed(make_session, first, url)
    states = umgr.wait_units(timeout=60)
    units = umgr.get_units()
    assert states == [rp.FAILED] + [rp.DONE] * 3, [(u.uid, u.state, u.reason) for u in units]
    assert all(u.part == pilot.partitions[1].uid for u in units[1:])
    check_exactly_once(session, units, log)
    assert set(read_truth(log)[0].values()) == {1}


PINNED_UNSENT_CLIENT = (
    LOCAL_CLIENT
    + r"""
send = s.channel.send  # its units are stored as sent, and never leave (it dies first)
s.channel.send = lambda pilot_uid, frames: None if frames[0] == b"units" else send(pilot_uid,
                                                                                   frames)
pinned = umgr.submit_units([truth_unit(sys.argv[1], sleep=0.1,
                                       partition=pilot.partitions[0].uid) for _ in range(2)])
deadline = time.monotonic() + 30
while any(u.part is None for u in pinned) and time.monotonic() < deadline:
    time.sleep(0.05)
s.writer.flush(timeout=30)
print(json.dumps({"session": s.uid}), flush=True)
os._exit(0)
"""
)


def test_units_pinned_to_a_live_partition_that_never_got_them_go_there_after_an_attach(
    make_session, tmp_path
):
    """Units pinned to a partition are stored as sent there and never leave the client,
    which dies; the partition's live agent tells the next client it never had them: they
    are sent there again and run once (before: FAILED "lost", as if the partition were
    gone)."""
    from tests.faults import check_exactly_once

    url, log = f"sqlite:///{tmp_path / 'state.db'}", str(tmp_path / "truth.log")
    first = run_client(PINNED_UNSENT_CLIENT, url, log)
    session = make_session(uid=first["session"], database_url=url)
    rp.PilotManager(session).get_pilots()
    umgr = rp.UnitManager(session)
    states = umgr.wait_units(timeout=60)
    units = umgr.get_units()
    assert states == [rp.DONE] * 2, [(u.uid, u.state, u.reason) for u in units]
    check_exactly_once(session, units, log)


DEPOSED_CLIENT = (
    LOCAL_CLIENT
    + ONE_RUNNING_THREE_QUEUED
    + r"""
held = []  # the `back` of a stop is read only once another client took the pilot over
read_back = umgr.events.on_units_back
umgr.events.on_units_back = lambda *a, **k: held.append((a, k))
print(json.dumps({"session": s.uid, "pilot": pilot.uid}), flush=True)
sys.stdin.readline()  # (a shell stopped the partition)
deadline = time.monotonic() + 30
while not held and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"held": len(held)}), flush=True)
sys.stdin.readline()  # taken over meanwhile
with s.locked():
    for a, k in held:
        read_back(*a, **k)
print(json.dumps({"held": len(held), "released": pilot.released,
                  "states": [[u.state, u.reason] for u in units]}), flush=True)
s.close(terminate=False)
"""
)


def test_a_client_taken_over_leaves_the_units_it_had_sent_to_their_new_owner(
    make_session, tmp_path
):
    """A shell stops the owner's partition (`pilot reconfig --stop all --start fill`): its
    queued units are handed back; another client takes the pilot over before the owner
    reads the `back`.  The new owner runs them (they are in the store, sent there); the old
    one leaves them unfinished (a wait for them raises PilotOwned) instead of failing them
    ("no pilot is left to this client"), which gave them two final states."""
    from tests.faults import read_truth

    url, log = f"sqlite:///{tmp_path / 'state.db'}", str(tmp_path / "truth.log")
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_DATABASE_URL=url)
    first = subprocess.Popen(
        [sys.executable, "-c", DEPOSED_CLIENT, log],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        said = json.loads(first.stdout.readline())
        out = subprocess.run(
            [sys.executable, "-m", "pilot", "reconfig", f"{said['session']}/{said['pilot']}"]
            + ["--stop", "all", "--start", "fill"],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr + out.stdout
        first.stdin.write("stopped\n")
        first.stdin.flush()
        assert json.loads(first.stdout.readline())["held"]  # (the owner holds the `back`)
        session = make_session(uid=said["session"], database_url=url, take_over=True)
        rp.PilotManager(session).get_pilots()
        umgr = rp.UnitManager(session)
        first.stdin.write("go\n")
        first.stdin.flush()
        late = json.loads(first.stdout.readline())
        assert late["held"] and late["released"], late
        assert [s for s, _ in late["states"][1:]] == [rp.SCHEDULING] * 3, late
        states = umgr.wait_units(timeout=60)
        units = umgr.get_units()
        assert states == [rp.CANCELED] + [rp.DONE] * 3, [(u.uid, u.state, u.reason) for u in units]
        assert set(read_truth(log)[0].values()) == {1}
        session.writer.flush(timeout=30)
        rows = session.store.find("units", session=session.uid)
        assert Counter(r["state"] for r in rows) == {"CANCELED": 1, "DONE": 3}
        assert first.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
