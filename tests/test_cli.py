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
    ],
)
def test_a_bad_start_size_says_what_is_accepted(size, says):
    from pilot.control_client import parse_size

    with pytest.raises(ValueError, match=re.escape(f"--start {size!r}: {says}")):
        parse_size(size)
