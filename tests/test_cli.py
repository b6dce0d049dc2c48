"""The `pilot` command line against a running pilot, as a user at a shell would use it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

import pilot as rp
from tests.conftest import ROOT, active_pilot

CPD = rp.ComputePartitionDescription


def known(pilot, uid, timeout=20.0):
    """The client's handle of a partition a shell started (its first update may be on the way)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return pilot.partition(uid)
        except ValueError:
            assert time.monotonic() < deadline, f"{uid} never reached the client"
            time.sleep(0.02)


def cli(*args, timeout=30):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pilot", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def running(session, tmp_path):
    cfg = tmp_path / "four.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 4\ngpus_per_node: 2\n")
    pilot, umgr = active_pilot(session, parts=((1,), (1,)), resource=str(cfg), cores=4, gpus=2)
    return pilot, umgr


def test_partitions_lists_state_and_size(running):
    pilot, _ = running
    out = cli("partitions", pilot.uid)
    assert out.returncode == 0, out.stderr
    assert f"{pilot.uid}: 1 node(s), 4 cores, 2 GPUs; free: 2 cores, 2 GPUs" in out.stdout
    for p in pilot.partitions:
        assert f"{p.uid:28} ACTIVE" in out.stdout
    data = json.loads(cli("partitions", pilot.uid, "--json").stdout)
    assert [p["state"] for p in data["partitions"]] == ["ACTIVE", "ACTIVE"]


def test_reconfig_from_a_shell_reaches_the_client(running):
    pilot, umgr = running
    first = pilot.partitions[0].uid
    out = cli("reconfig", pilot.uid, "--stop", first, "--start", "50%")
    assert out.returncode == 0, out.stderr
    assert f"stopped: {first}" in out.stdout
    new_uid = f"{pilot.uid}.part.0002"
    assert f"started: {new_uid}" in out.stdout
    assert pilot.partitions[0].wait(timeout=20) == rp.CANCELED
    # the client learns of the partition the shell started and can use it
    new = known(pilot, new_uid)
    assert new.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    assert (new.cores, new.gpus) == (2, 1)
    unit = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true", partition=new_uid))
    assert unit.wait(timeout=30) == rp.DONE
    out = cli(
        "reconfig", pilot.uid, "--stop", new_uid, "--start", "cores=1,gpus=1", "--start", "fill"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("started: ") == 2 and "FAILED" not in out.stdout
    fill = known(pilot, f"{pilot.uid}.part.0004")
    assert fill.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    assert (fill.cores, fill.gpus) == (2, 1)
    out = cli("reconfig", pilot.uid, "--stop", "all")
    assert out.returncode == 0
    for p in pilot.partitions:
        assert p.wait(timeout=20) in (rp.CANCELED,)
    out = cli("reconfig", pilot.uid, "--stop", first)  # (ended: no error, and said so)
    assert out.returncode == 0 and f"not stopped, ended already: {first}" in out.stdout, out


def test_bad_commands_change_nothing(running):
    pilot, _ = running
    before = cli("partitions", pilot.uid, "--json").stdout
    out = cli("reconfig", pilot.uid, "--stop", "part.0042")
    assert out.returncode == 1
    assert "stop='part.0042': no such partition" in out.stderr
    out = cli("reconfig", pilot.uid, "--start", "150%")
    assert out.returncode == 2 and "size='150%' must be a share" in out.stderr
    out = cli("reconfig", pilot.uid, "--start", "cores=lots")
    assert out.returncode == 2 and "cores='lots' must be a whole number" in out.stderr
    out = cli("reconfig", pilot.uid, "--start", "memory=4")
    assert out.returncode == 2 and "'memory=4' must be cores=N" in out.stderr
    out = cli("reconfig", "pilot.0999", "--stop", "all")
    assert out.returncode == 2 and "no running pilot 'pilot.0999'" in out.stderr
    assert cli("partitions", pilot.uid, "--json").stdout == before


def test_a_retried_command_is_applied_once(running):
    pilot, _ = running
    for _ in range(2):
        out = cli("reconfig", pilot.uid, "--start", "cores=1", "--id", "retry-me")
        assert out.returncode == 0, out.stderr
        assert f"started: {pilot.uid}.part.0002" in out.stdout
    data = json.loads(cli("partitions", pilot.uid, "--json").stdout)
    assert len(data["partitions"]) == 3


def test_a_wait_for_a_state_its_object_never_takes_and_other_bad_arguments_are_refused(running):
    """wait(state="BOGUS") waited for its timeout (a unit's returned at once); cancel_units(5)
    raised int's TypeError; `--stop all --stop UID` ignored the uid; a raw reconfig with no
    stop and no start, or an argument it does not take, was answered ok."""
    from pilot.cli import find_pilot
    from pilot.control_client import command, reconfig_args

    pilot, umgr = running
    part = pilot.partitions[0]
    unit = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    for call, where in (
        (lambda: part.wait("BOGUS", timeout=30), "Partition.wait"),
        (lambda: pilot.wait(["ACTIVE", "RUNNING"], timeout=30), "Pilot.wait"),
        (lambda: unit.wait("BOGUS"), "Unit.wait"),
        (lambda: umgr.wait_units(state="BOGUS"), "UnitManager.wait_units"),
        (lambda: rp.PilotManager(pilot.session).wait_pilots(state=5), "wait_pilots"),
    ):
        t0 = time.monotonic()
        with pytest.raises(ValueError, match=rf"{where}: state=.* must be one of \["):
            call()
        assert time.monotonic() - t0 < 5
    assert part.wait(rp.ACTIVE, timeout=10) == rp.ACTIVE  # (a state it takes: as before)
    with pytest.raises(ValueError, match="cancel_units: uids: 5 is not a unit or its uid"):
        umgr.cancel_units(5)
    with pytest.raises(ValueError, match="cancel_units: reason=5 must be a text"):
        umgr.cancel_units(unit.uid, reason=5)
    # (what it took before stays taken: a unit, a generator, a dict's keys, a list of units)
    for uids in (unit, (u for u in [unit.uid]), {unit.uid: 1}.keys(), [unit], ()):
        umgr.cancel_units(uids)
    assert part.wait(iter([rp.ACTIVE]), timeout=10) == rp.ACTIVE  # (a generator of states)
    assert pilot.pmgr.wait_pilots(pilot.uid, iter([rp.ACTIVE]), timeout=10) == [rp.ACTIVE]
    with pytest.raises(ValueError, match=r"Partition.wait: state=b'ACTIVE' must be one of"):
        part.wait(b"ACTIVE")  # (it said state=65)
    out = cli("reconfig", pilot.uid, "--start", "cores=1", "--id", "a b/../x")
    assert out.returncode == 2 and "--id='a b/../x' must be 1-64 of A-Z" in out.stderr, out
    with pytest.raises(ValueError, match=r"'all' stops every partition; give it alone"):
        reconfig_args(["all", "part.0099"], [])
    control = find_pilot(f"{pilot.session.uid}/{pilot.uid}")
    for args, says in (({}, "a reconfig gives stop"), ({"stop": [], "x": 1}, "args.x: not a")):
        reply = command(control, "reconfig", args)
        assert not reply["ok"] and says in reply["error"], reply
    assert unit.wait(timeout=30) in (rp.DONE, rp.CANCELED)
    assert all(p.state == rp.ACTIVE for p in pilot.partitions)


def test_an_id_used_again_for_another_command_is_refused(running):
    """A retry repeats its command under its id; another command under a used id was answered
    with the first one's result and did nothing (the user's stop was lost, silently)."""
    pilot, _ = running
    out = cli("reconfig", pilot.uid, "--start", "cores=1", "--id", "mine")
    assert out.returncode == 0, out.stderr
    out = cli("reconfig", pilot.uid, "--stop", "all", "--id", "mine")
    assert out.returncode == 1 and "command id 'mine' was used already" in out.stderr
    assert all(p.state == rp.ACTIVE for p in pilot.partitions)  # (nothing stopped)


def test_a_gpu_partition_without_cores_gets_a_core_per_gpu(running):
    """`--start gpus=1`: a partition of GPUs and no core could run no unit (every unit has a
    core a rank); it takes one core per GPU, as gpus=all does."""
    pilot, umgr = running
    out = cli("reconfig", pilot.uid, "--start", "gpus=1", "--json")
    assert out.returncode == 0, out.stderr
    uid = json.loads(out.stdout)["reconfig"]["started"][0]["uid"]
    part = known(pilot, uid)
    assert part.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE, part.reason
    assert (part.cores, part.gpus) == (1, 1)
    cud = rp.ComputeUnitDescription(executable="/bin/true", gpus=1, partition=uid)
    unit = umgr.submit_units(cud)
    assert unit.wait(timeout=30) == rp.DONE, unit.reason


def test_an_output_file_in_no_directory_is_a_usage_error(tmp_path):
    for args in (
        ("export", "session.x", "-o", "/nonexistent/x.jsonl"),
        ("plot", "session.x", "-o", "/nonexistent/x.png"),
        ("network-config", "--output", "/nonexistent/node.yaml"),
    ):
        out = cli(*args)
        assert out.returncode == 2 and "no such directory '/nonexistent'" in out.stderr, out
        assert "Traceback" not in out.stderr
    out = cli("network-config", "--output", str(tmp_path))
    assert out.returncode == 2 and "is a directory: give a file name" in out.stderr


def test_resources_lists_configs():
    out = cli("resources")
    assert out.returncode == 0
    names = out.stdout.split()
    assert names == sorted(names)
    native = ["cray.fake", "local.localhost", "local.nodes4", "local.simulated", "local.zero"]
    assert set(native + ["slurm.localhost"]) <= set(names)
    # RADICAL-Pilot's site configs are resources too (pilot/config/rp_sites.py)
    assert {"ornl.frontier", "anl.polaris", "nersc.perlmutter"} <= set(names)


def test_status_and_export_read_the_store(make_session):
    session = make_session()
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units(
        [rp.ComputeUnitDescription(executable="/bin/true")] * 3
        + [rp.ComputeUnitDescription(executable="/bin/false")]
    )
    umgr.wait_units(timeout=60)
    session.writer.flush(timeout=30)
    out = cli("status", session.uid)
    assert out.returncode == 0, out.stderr
    assert f"{pilot.uid}" in out.stdout and "ACTIVE" in out.stdout
    assert "units: 4, DONE 3, FAILED 1" in out.stdout
    exported = cli("export", session.uid)
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert {r["uid"] for r in rows} >= {u.uid for u in units}
    assert [r["state"] for r in rows if r["uid"] == units[3].uid][-1] == "FAILED"
    missing = cli("status", "session.nope")
    assert missing.returncode == 2 and "no session 'session.nope'" in missing.stderr


def test_a_bad_database_url_is_said_and_makes_no_file(tmp_path):
    """A command that reads a store makes none where the URL names no file, and says why a
    URL cannot be read, in one line (it raised sqlite3's traceback, and made typo.db)."""
    where = tmp_path / "stores"
    where.mkdir()
    typo = where / "typo.db"
    for cmd in ("status", "export", "plot"):
        out = cli(cmd, "session.x", "--database-url", f"sqlite:///{typo}")
        assert out.returncode == 2 and f"there is no file {typo}" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    assert not list(where.iterdir())
    nested = cli("status", "session.x", "--database-url", f"sqlite:///{tmp_path}/no/dir/x.db")
    assert nested.returncode == 2 and "there is no file" in nested.stderr, nested.stderr
    other = tmp_path / "notes.txt"
    other.write_text("not a database, " * 100)
    out = cli("export", "session.x", "--database-url", f"sqlite:///{other}")
    assert out.returncode == 2 and "file is not a database" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "size, says",
    [
        ("cores=-1", "cores='-1' must be a whole number >= 0"),
        ("gpus=half", "gpus='half' must be a whole number >= 0 or all"),
        ("50%,cores=2", "'50%' is a size of its own: give a share or fill alone"),
        ("fill,gpus=1", "'fill' is a size of its own"),
        ("cores=2,bogus=1", "'bogus=1' must be cores=N, gpus=N|all, nodes=N or config=NAME"),
        ("cores=\u00b2", "cores='\u00b2' must be a whole number >= 0"),  # (isdigit, not int)
        ("cores=\u0663", "cores='\u0663' must be a whole number >= 0"),  # (an Arabic-Indic 3)
        ("cores=" + "9" * 10, f"cores='{'9' * 10}' must be a whole number >= 0"),  # (5,000
        # digits: int()'s "Exceeds the limit", no field named)
        ("0.5%", 'ComputePartitionDescription: size=\'0.5%\' must be a share "1%".."100%"'),
        ("1e2%", "ComputePartitionDescription: size='1e2%' must be a share"),
        ("+50%", "ComputePartitionDescription: size='+50%' must be a share"),
        ("50 %", "ComputePartitionDescription: size='50 %' must be a share"),
    ],
)
def test_a_bad_start_size_says_what_is_accepted(size, says):
    from pilot.control_client import parse_size

    with pytest.raises(ValueError, match=re.escape(f"--start {size!r}: {says}")):
        parse_size(size)


def test_a_share_is_a_plain_decimal_from_1_to_100_percent():
    assert CPD("12.5%").size == "12.5%" and CPD("1%").size == "1%" and CPD("100%").size == "100%"
