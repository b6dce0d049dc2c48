"""The store never takes the client down: whatever its files do while units run (deleted, made
immutable, read-only, slow; a full disk: tests/test_full_disk.py), the client says so, keeps
every outcome it holds, and writes them when the store takes writes again (a deleted file: into
the new one the store makes).  Each scenario runs a client of its own
(tests/scenarios/store_files_client.py): a regression that ends it with a signal (a store that
maps its files: SIGBUS) fails the test, not the suite."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from pilot.pmgr.core import reaper
from tests import blocking_fs
from tests.conftest import ROOT


def run(argv: list[str], cwd: str, timeout: float = 240) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, (
        f"the client ended with {proc.returncode} (a negative code is a signal)\n{err[-3000:]}"
    )
    result = json.loads(out.strip().splitlines()[-1])
    left = reaper.session_processes(result["session"])
    if left:
        reaper.kill_session_processes(result["session"])
    assert not left, f"processes left behind: {left}"
    return result


def client(kind: str, store_dir, *extra) -> list[str]:
    return [sys.executable, "-m", "tests.scenarios.store_files_client", kind, str(store_dir),
            *map(str, extra)]  # fmt: skip


def check(result: dict) -> None:
    """Every unit DONE at the client, and the store has each one's final state."""
    assert result["client"] == {"DONE": 500}, result
    assert set(result["stored"]) == {"DONE"}, result
    assert result["unpersisted"] == 0 and result["flushed"], result
    assert result["pilot_stored"] is not None, result


def test_the_store_file_deleted_under_a_running_client(tmp_path):
    result = run(client("deleted", tmp_path), str(tmp_path))
    check(result)
    assert any("was deleted or replaced" in line for line in result["said"]), result["said"]
    assert any("written again" in line for line in result["said"]), result["said"]
    assert result["stored_all"] == 500, result


def _no_chattr(path) -> str | None:
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return "chattr +i needs root and e2fsprogs' chattr"
    probe = path / "probe"
    probe.write_text("")
    made = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True)
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    probe.unlink()
    return None if made.returncode == 0 else f"this file system refuses chattr +i: {made.stderr}"


def test_the_store_files_made_immutable_under_a_running_client(tmp_path):
    """Before the store stopped mapping its files (a write-ahead log's index): SIGBUS, the
    client gone, 190 of 300 units without a final record."""
    why = _no_chattr(tmp_path)
    if why:
        pytest.skip(why)
    result = run(client("immutable", tmp_path), str(tmp_path))
    check(result)
    assert result["unpersisted_while"] > 0, result  # (it said what it held, live)
    assert any("keeping them to retry" in line for line in result["said"]), result["said"]


def test_the_store_made_read_only_under_a_running_client(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a read-only remount needs root and util-linux's unshare")
    store = tmp_path / "store"
    store.mkdir()
    script = f"mount --bind {store} {store} && exec " + " ".join(client("readonly", store))
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    result = run(argv, str(tmp_path))
    check(result)
    assert result["unpersisted_while"] > 0, result
    assert any("keeping them to retry" in line for line in result["said"]), result["said"]


def test_the_store_slow_under_a_running_client(tmp_path):
    """Writes held 3 s (a FUSE file system, tests/blocking_fs.py): units already sent run on,
    the others wait for the store, then all end and are kept."""
    why = blocking_fs.unavailable()
    if why:
        pytest.skip(why)
    backing, mount, hold = tmp_path / "backing", tmp_path / "fs", tmp_path / "hold"
    backing.mkdir()
    mount.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.blocking_fs", str(backing), str(mount), str(hold)],
        cwd=ROOT, env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        import time

        deadline = time.monotonic() + 20
        while not os.path.ismount(mount):
            assert server.poll() is None, server.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the FUSE file system did not mount"
            time.sleep(0.05)
        result = run(client("slow", mount, hold), str(tmp_path))
        check(result)
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
