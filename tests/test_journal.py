"""The start journal (pilot/wire/journal.py): which file systems it is synced on, a torn write,
and an agent killed mid-run on a pilot whose journal is synced (its lanes off)."""

from __future__ import annotations

import os
import time

import pytest

import pilot as rp
from pilot.wire import journal
from pilot.wire.journal import LOCAL_FS, StartJournal, fs_type
from tests.conftest import active_pilot
from tests.faults import agent_pid, check_exactly_once, kill, truth_unit

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /scratch rw,nosuid shared:9 - lustre 10.0.0.1@o2ib:/scratch rw,flock
31 22 0:41 / /home rw,relatime shared:10 master:3 - nfs4 fs:/home rw,vers=4.2
32 31 0:42 / /home/local rw - tmpfs tmpfs rw
33 22 0:43 / /mnt/my\\040disk rw - gpfs gpfs0 rw
34 22 0:44 / /scratch rw - xfs /dev/sdb1 rw
"""


def test_the_file_system_of_a_path_is_its_longest_mount_and_the_last_one_mounted_there():
    assert fs_type("/var/tmp/x", MOUNTINFO) == "ext4"
    assert fs_type("/home/alice/run/pilot.0000/part.0000.started", MOUNTINFO) == "nfs4"
    assert fs_type("/home/local/x", MOUNTINFO) == "tmpfs"  # (mounted inside /home)
    assert fs_type("/home", MOUNTINFO) == "nfs4"
    assert fs_type("/homework/x", MOUNTINFO) == "ext4"  # (a prefix of the name is not a mount)
    assert fs_type("/mnt/my disk/sandbox/j", MOUNTINFO) == "gpfs"  # (\040: a space)
    assert fs_type("/scratch/j", MOUNTINFO) == "xfs"  # (mounted over the lustre one)
    assert fs_type("/x", "garbage\n1 2 3\n") is None
    assert not {"nfs4", "lustre", "gpfs", "dvs", "fuse.ceph-fuse"} & LOCAL_FS


def test_what_is_mounted_over_a_deeper_mount_is_told_by_its_device():
    """/a/b was NFS; then /a was mounted over it (tmpfs): the journal's directory is on the
    tmpfs now, as the nearest existing directory's device says, whatever the mount points."""
    info = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:50 / /a/b rw - nfs4 f:/b rw\n"
    info += "3 1 0:51 / /a rw - tmpfs tmpfs rw\n"
    assert fs_type("/a/b/x", info) == "nfs4"  # (the mount points alone)
    assert fs_type("/a/b/x", info, device="0:51") == "tmpfs"
    assert fs_type("/a/b/x", info, device="0:50") == "nfs4"
    assert fs_type("/elsewhere", info, device="0:51") == "ext4"  # (a device not mounted there)
    here = fs_type(__file__)  # (this host's own: found, by its device or its mount point)
    assert here is not None


def test_a_journal_is_synced_only_where_another_host_reads_it(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd))
    monkeypatch.setattr(journal, "fs_type", lambda path: "ext4")
    local = StartJournal(str(tmp_path), "p.0")  # (auto, on this host's disk)
    assert not local.sync and "not synced (journal_sync: auto, a local" in local.describe()
    local.append(["u.1", "u.2"])
    assert synced == []
    monkeypatch.setattr(journal, "fs_type", lambda path: "lustre")
    shared = StartJournal(str(tmp_path), "p.1")
    assert shared.sync and "lustre: synced after each write" in shared.describe()
    monkeypatch.setattr(journal, "fs_type", lambda path: None)  # (not told: synced)
    assert StartJournal(str(tmp_path), "p.5").sync
    shared.append(["u.3"])
    assert synced == [shared.fd]
    assert not StartJournal(str(tmp_path), "p.2", "never").sync
    monkeypatch.setattr(journal, "fs_type", lambda path: "ext4")
    assert StartJournal(str(tmp_path), "p.3", "always").sync
    with pytest.raises(ValueError, match=r"journal_sync='sometimes' must be one of"):
        StartJournal(str(tmp_path), "p.4", "sometimes")
    for j in (local, shared):
        j.close()
    assert (tmp_path / "p.0.started").read_text() == "u.1\nu.2\n"


def test_a_write_torn_part_way_does_not_run_into_the_next_uid(tmp_path, monkeypatch):
    """A write that failed after part of its bytes (a full disk): the next write ends the torn
    line first, so every uid written whole is read back as itself."""
    j = StartJournal(str(tmp_path), "p.0", "never")
    j.append(["unit.000001"])
    real = os.write

    def torn(fd, data):
        real(fd, data[:7])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", torn)
    with pytest.raises(OSError):
        j.append(["unit.000002"])
    monkeypatch.setattr(os, "write", real)
    j.append(["unit.000003", "unit.000004"])
    j.close()
    lines = (tmp_path / "p.0.started").read_text().splitlines()
    assert lines == ["unit.000001", "unit.00", "unit.000003", "unit.000004"]


def test_an_agent_killed_mid_run_with_a_synced_journal(session, tmp_path):
    """journal_sync: always (as on a shared file system): the agent syncs each write, starts
    every unit itself (no lanes), and when it is killed mid-run nothing runs twice: its
    started units are FAILED, its queued ones run in the other partition."""
    cfg = tmp_path / "synced.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 2\njournal_sync: always\n")
    log = str(tmp_path / "truth.log")
    pilot, umgr = active_pilot(session, parts=((1,), (1,)), resource=str(cfg))
    victim, other = pilot.partitions
    units = umgr.submit_units([truth_unit(log, sleep=0.2) for _ in range(20)])
    pid = agent_pid(pilot, victim)
    text = open(os.path.join(pilot.sandbox, f"{victim.uid}.agent.log")).read()
    assert "lanes off" in text and "synced after each write" in text, text
    deadline = time.monotonic() + 20
    while not any(u.state == rp.EXECUTING and u.part == victim.uid for u in units):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    kill(pid)
    assert victim.wait(timeout=30) == rp.FAILED
    umgr.wait_units(timeout=60)
    states = check_exactly_once(session, units, log)
    assert states[rp.DONE] >= 10, states
    started = open(os.path.join(pilot.sandbox, f"{victim.uid}.started")).read().split()
    assert len(started) == len(set(started)) >= 1  # (each once, the first before its start)
    assert other.state == rp.ACTIVE
