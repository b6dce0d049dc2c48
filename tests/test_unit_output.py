"""A unit's output and sandbox on a local pilot: output goes through pipes into files made only
when the unit writes (agent/runners/streams.py); a sandbox the unit left empty leaves no
directory behind and may serve a later unit once it is safe (agent/runners/stager.py,
spares.py); whatever a unit leaves stays where it left it, and never shows up in another unit's
sandbox."""

from __future__ import annotations

import os
import re
import time

import pytest

import pilot as rp
from tests.conftest import active_pilot

CUD = rp.ComputeUnitDescription


def test_a_unit_that_writes_nothing_leaves_nothing(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    quiet = umgr.submit_units([CUD(executable="/bin/true") for _ in range(300)])
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 300
    for u in quiet:
        assert u.stdout == "" and u.stderr == ""
    deadline = time.monotonic() + 10
    while any(os.path.isdir(u.sandbox) for u in quiet) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not {u.uid for u in quiet} & set(os.listdir(pilot.sandbox))
    part = pilot.partitions[0]
    pilot.cancel()
    pilot.wait(timeout=30)
    with open(os.path.join(pilot.sandbox, f"{part.uid}.agent.log")) as f:
        found = re.search(r"sandboxes made (\d+), reused (\d+)", f.read())
    made, reused = int(found[1]), int(found[2])
    assert made + reused == 300 and reused >= 30, (made, reused)  # empty ones served again
    assert not [n for n in os.listdir(pilot.sandbox) if n.startswith(".fresh")]


def test_what_a_unit_writes_stays_in_its_own_sandbox(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units(
        [CUD(executable="/bin/true") for _ in range(10)]
        + [CUD(executable="/bin/sh", arguments=["-c", "echo made > result.txt"])]
        + [CUD(executable="/bin/sh", arguments=["-c", "echo oops >&2; exit 3"])]
        + [CUD(executable="/bin/true") for _ in range(10)]
    )
    states = umgr.wait_units(timeout=60)
    assert states[10] == rp.DONE and states[11] == rp.FAILED
    writer, failer = units[10], units[11]
    assert open(os.path.join(writer.sandbox, "result.txt")).read() == "made\n"
    assert sorted(os.listdir(writer.sandbox)) == ["result.txt"]  # no empty output files
    assert failer.stderr == "oops\n" and failer.stdout == ""
    assert sorted(os.listdir(failer.sandbox)) == ["STDERR"]
    assert failer.exit_code == 3
    for u in units[12:]:  # later units got recycled directories: none holds a stranger's file
        if os.path.isdir(u.sandbox):
            assert os.listdir(u.sandbox) == []


def test_output_larger_than_a_pipe_and_both_streams_arrive_whole(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    n = 3 * 1024 * 1024  # 48 times a pipe's buffer: the agent must drain while it runs
    code = (
        "import sys\n"
        f"sys.stdout.write('o' * {n}); sys.stdout.flush()\n"
        f"sys.stderr.write('e' * {n // 3}); sys.stderr.flush()\n"
        "sys.stdout.write('end')\n"
    )
    units = umgr.submit_units(
        [CUD(executable="python3", arguments=["-c", code], shell=False) for _ in range(2)]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 2
    for u in units:
        out, err = u.stdout, u.stderr
        assert len(out) == n + 3 and out.endswith("end") and set(out[:-3]) == {"o"}
        assert err == "e" * (n // 3)


def test_a_unit_whose_child_keeps_its_stdout_ends_when_it_exits(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    # the background child holds the pipe 1.5 s after the unit's own process exits
    unit = umgr.submit_units(
        CUD(executable="/bin/sh", arguments=["-c", "(sleep 1.5; echo late) & echo early"])
    )
    t0 = time.monotonic()
    assert unit.wait(timeout=30) == rp.DONE
    assert time.monotonic() - t0 < 1.4, "the unit waited for its background child"
    deadline = time.monotonic() + 10
    while "late" not in unit.stdout and time.monotonic() < deadline:
        time.sleep(0.1)
    assert unit.stdout == "early\nlate\n"
    assert os.path.isdir(unit.sandbox)  # something of it was still running: never reused


def test_what_others_leave_never_reaches_a_later_unit(session, tmp_path):
    pilot, umgr = active_pilot(session, parts=((1,),))
    (tmp_path / "secret.dat").write_text("not yours")
    # a detached process keeps working in its unit's (empty) sandbox after the unit ended,
    # a unit makes its sandbox read-only, a queued unit with staged input is canceled
    detached = umgr.submit_units(
        CUD(
            executable="/bin/sh",
            arguments=[
                "-c",
                "setsid sh -c 'for i in $(seq 40); do sleep 0.2; : > late; done' >/dev/null 2>&1 &",
            ],
        )
    )
    closed = umgr.submit_units(CUD(executable="/bin/sh", arguments=["-c", "chmod 0555 ."]))
    blocker = umgr.submit_units(CUD(executable="/bin/sleep", arguments=["1"]))
    staged = umgr.submit_units(
        CUD(executable="/bin/true", input_staging=[str(tmp_path / "secret.dat")])
    )
    staged.wait(rp.QUEUED, timeout=30)
    umgr.cancel_units([staged.uid])
    later = umgr.submit_units(
        [
            CUD(executable="/bin/sh", arguments=["-c", "sleep 0.1; ls -A; test -w ."])
            for _ in range(80)
        ]
    )
    assert umgr.wait_units(timeout=60)[-80:] == [rp.DONE] * 80
    assert detached.state == closed.state == blocker.state == rp.DONE
    assert staged.state == rp.CANCELED
    for u in later:
        assert u.stdout == "", (u.uid, u.stdout)  # each saw an empty, writable sandbox


def test_stdout_and_stderr_in_one_file_and_empty_files_for_staging(session, tmp_path):
    pilot, umgr = active_pilot(session, parts=((1,),))
    both = umgr.submit_units(
        CUD(
            executable="/bin/sh",
            arguments=["-c", "echo out-one; echo err-one >&2; echo out-two; echo err-two >&2"],
            stdout="all.txt",
            stderr="all.txt",
        )
    )
    umgr.submit_units(
        CUD(executable="/bin/true", output_staging=[f"STDOUT > {tmp_path}/quiet.out"])
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE, rp.DONE]
    lines = open(os.path.join(both.sandbox, "all.txt")).read().split()
    assert sorted(lines) == ["err-one", "err-two", "out-one", "out-two"]
    assert (tmp_path / "quiet.out").read_text() == ""  # STDOUT was made, empty, to be staged


@pytest.mark.parametrize("native", [True, False])  # agent/_spawn-src/take_dir.c, or Python's calls
def test_a_spare_sandbox_is_reused_only_when_nothing_can_reach_it(tmp_path, monkeypatch, native):
    import subprocess

    from pilot.agent.runners import spares
    from pilot.agent.runners.spares import SCAN_EVERY, SparePool

    if native and spares.take_dir is None:
        pytest.skip("agent/_spawn-src/ was not built")
    if not native:
        monkeypatch.setattr(spares, "take_dir", None)
    pool = SparePool(str(tmp_path))
    pool.mode = 0o755
    dirs = {}
    for name in ("quiet", "worked_in", "read_only", "written_late", "has_subdir"):
        dirs[name] = tmp_path / name
        dirs[name].mkdir(mode=0o755)
    dirs["read_only"].chmod(0o555)
    (dirs["has_subdir"] / "sub").mkdir()
    holder = subprocess.Popen(["sleep", "30"], cwd=dirs["worked_in"])  # a detached process
    try:
        for name in dirs:
            pool.add(str(dirs[name]))
        (dirs["written_late"] / "late.txt").write_text("x")  # after its unit ended
        time.sleep(SCAN_EVERY * 2)
        got = []
        for i in range(5):
            target = tmp_path / f"new{i}"
            if pool.take(str(target)):
                got.append(target)
        assert len(got) == 1 and os.listdir(got[0]) == []  # only the quiet one
        assert os.readlink(f"/proc/{holder.pid}/cwd").endswith("(deleted)")  # removed
        assert (dirs["written_late"] / "late.txt").read_text() == "x"  # left where it was
        assert (dirs["has_subdir"] / "sub").is_dir()
        assert not dirs["read_only"].exists()  # empty, but not what a new sandbox is
    finally:
        holder.kill()
        holder.wait(timeout=10)
    # a unit run again finds its sandbox as it left it: the spare is kept for another
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "result").write_text("kept")
    pool.add(str(got[0]))
    time.sleep(SCAN_EVERY * 2)
    with pytest.raises(FileExistsError):
        pool.take(str(tmp_path / "again"))
    assert (tmp_path / "again" / "result").read_text() == "kept" and got[0].is_dir()
    assert pool.trim() == 1 and not got[0].exists()


def test_a_spare_that_a_unit_names_as_its_sandbox_is_never_moved_under_it(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    quiet = umgr.submit_units([CUD(executable="/bin/true") for _ in range(6)])
    umgr.wait_units(timeout=30)
    time.sleep(0.1)
    umgr.submit_units([CUD(executable="/bin/true")])  # its take releases the spares
    umgr.wait_units(timeout=30)
    spare = next(u for u in quiet if os.path.isdir(u.sandbox))  # an empty one, still there
    named = umgr.submit_units(
        CUD(executable="/bin/sh", sandbox=spare.uid, arguments=["-c", "sleep 1; echo b > b.txt"])
    )
    time.sleep(0.3)
    # (it leaves a file: an empty sandbox of a unit that ended becomes a spare, and spares go
    # after a second without a take, which could be before the listing below)
    later = umgr.submit_units(
        CUD(executable="/bin/sh", arguments=["-c", "sleep 1.5; echo l > l.txt"])
    )
    assert umgr.wait_units(timeout=30)[-2:] == [rp.DONE, rp.DONE]
    assert os.listdir(later.sandbox) == ["l.txt"]  # not the named unit's directory
    assert open(os.path.join(named.sandbox, "b.txt")).read() == "b\n"
    time.sleep(2.5)  # idle: the spares go, never the named unit's directory
    assert os.listdir(named.sandbox) == ["b.txt"]


def test_a_unit_killed_by_a_real_time_signal_fails_naming_it(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    units = umgr.submit_units(
        [CUD(executable="/bin/true") for _ in range(40)]
        + [CUD(executable="/bin/sh", arguments=["-c", "kill -40 $$"])]
        + [CUD(executable="/bin/true") for _ in range(40)]
    )
    states = umgr.wait_units(timeout=60)
    assert states.count(rp.DONE) == 80 and states[40] == rp.FAILED
    assert units[40].reason == "killed by signal 40"


def test_a_program_that_cannot_be_executed_fails_naming_why(session, tmp_path):
    """Found on arrival (it is there and executable) but refused by exec: the unit never ran,
    so it ends FAILED with the reason and no exit code, and the partition goes on."""
    script = tmp_path / "no-program-line"
    script.write_text("echo ran\n")
    script.chmod(0o755)
    pilot, umgr = active_pilot(session, parts=((1,),))
    bad, good = umgr.submit_units(
        [CUD(executable=str(script), shell=False), CUD(executable="/bin/true")]
    )
    assert umgr.wait_units(timeout=60) == [rp.FAILED, rp.DONE]
    assert "cannot start" in bad.reason and "Exec format error" in bad.reason, bad.reason
    assert bad.exit_code is None


def test_a_bare_program_name_is_looked_up_on_the_units_own_path(session, tmp_path):
    """As a unit's shell would: a PATH in its environment decides which program runs, whether
    the agent's PATH has one of that name (`true`) or none (`only-here`), spawned directly or
    not; a relative entry is the shell's to search (from the sandbox)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("true", "mine"), ("only-here", "here")):
        (bin_dir / name).write_text(f'#!/bin/sh\necho {text} "$@"\n')
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:{os.environ.get('PATH', os.defpath)}"
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units(
        [
            CUD(executable="true", arguments=["a"], environment={"PATH": path}),
            CUD(executable="true", arguments=["b"], environment={"PATH": path}, shell=False),
            CUD(executable="only-here", shell=False, environment={"PATH": path}),
            CUD(executable="true"),  # the agent's own PATH
            CUD(executable="only-here", shell=False),
            CUD(executable="only-here", environment={"PATH": f"rel:{path}"}),
        ]
    )
    states = umgr.wait_units(timeout=60)
    assert states == [rp.DONE] * 4 + [rp.FAILED, rp.DONE], [u.reason for u in units]
    assert [u.stdout for u in units[:4]] == ["mine a\n", "mine b\n", "here\n", ""]
    assert "not found" in units[4].reason
    assert units[5].stdout == "here\n"
