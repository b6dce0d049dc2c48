"""A unit's output and sandbox on a local pilot: output goes through pipes into files made only
when the unit writes (agent/runners/streams.py); a sandbox the unit left empty is reused for a
later unit (agent/runners/sandboxes.py); whatever a unit leaves stays where it left it."""

from __future__ import annotations

import os
import re
import time

import pilot as rp
from tests.conftest import active_pilot

CUD = rp.ComputeUnitDescription


def test_a_unit_that_writes_nothing_leaves_nothing_and_its_directory_is_reused(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    quiet = umgr.submit_units([CUD(executable="/bin/true") for _ in range(300)])
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 300
    for u in quiet:
        assert u.stdout == "" and u.stderr == ""
    # renamed for later units, or removed once the agent had nothing to stage (0.1 s)
    deadline = time.monotonic() + 10
    while any(os.path.isdir(u.sandbox) for u in quiet) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not {u.uid for u in quiet} & set(os.listdir(pilot.sandbox))
    # and reused: 64 are staged ahead, so most of the 300 got a directory an earlier one left
    part = pilot.partitions[0]
    pilot.cancel()
    pilot.wait(timeout=30)
    with open(os.path.join(pilot.sandbox, f"{part.uid}.agent.log")) as f:
        made, reused = map(int, re.search(r"sandboxes made (\d+), reused (\d+)", f.read()).groups())
    assert made + reused == 300 and reused >= 150, (made, reused)


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
