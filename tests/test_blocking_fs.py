"""The bootstrap's loop never waits on a file system (partition/off_loop.py): the pilot's
sandbox on a FUSE file system whose writes block (tests/blocking_fs.py) for 8 s while the
bootstrap is asked to start a partition (a log line, an agent's config): its heartbeats to
the client go on all the while; once the writes go through, the new partition runs units.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import pilot as rp
from tests import blocking_fs
from tests.conftest import ROOT

HOLD_S = 8.0
pytestmark = pytest.mark.skipif(
    blocking_fs.unavailable() is not None, reason=str(blocking_fs.unavailable())
)


@pytest.fixture
def blocking_dir(tmp_path):
    """A FUSE mount over tmp_path/backing and the file whose presence blocks its writes."""
    backing, mount, hold = tmp_path / "backing", tmp_path / "fs", tmp_path / "hold"
    backing.mkdir()
    mount.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.blocking_fs", str(backing), str(mount), str(hold)],
        cwd=ROOT,
        # (fusepy where this process found it: the PYTHONPATH given, after the project)
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])),
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mount):
            assert server.poll() is None, server.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the FUSE file system did not mount"
            time.sleep(0.05)
        yield mount, hold
    finally:
        if hold.exists():
            hold.unlink()
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        server.stderr.close()


def test_a_file_system_that_blocks_writes_delays_no_message(make_session, blocking_dir, tmp_path):
    mount, hold = blocking_dir
    session = make_session(
        dir=str(mount / "session"), database_url=f"sqlite:///{tmp_path / 'state.db'}"
    )
    pd = rp.ComputePilotDescription(
        resource="local.localhost",
        cores=2,
        parts=[rp.ComputePartitionDescription(cores=1)],
        runtime=5,
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.partitions[0].wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, pilot.reason
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    hold.write_text("writes wait")
    t0 = time.monotonic()
    try:
        (new,) = pilot.reconfig(start=[rp.ComputePartitionDescription(cores=1)])
        gaps = []
        while time.monotonic() - t0 < HOLD_S:
            gaps.append(time.monotonic() - pilot.last_heard)
            time.sleep(0.05)
        assert new.state != rp.ACTIVE  # (its agent's config is not written yet)
    finally:
        hold.unlink()
    assert max(gaps) < 3.0, f"the client heard nothing from the pilot for {max(gaps):.1f} s"
    print(f"writes held {HOLD_S:g} s: the longest silence the client heard {max(gaps):.2f} s")
    assert new.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, new.reason
    units = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 4)
    assert umgr.wait_units([u.uid for u in units], timeout=30) == [rp.DONE] * 4
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        assert f"{new.uid}: agent requested" in f.read()
    session.close()  # (before the file system goes: its files there closed, it unmounts at once)
