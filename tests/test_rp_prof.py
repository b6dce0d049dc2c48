"""$RP_PROF and $RP_GTOD as each API generation of RADICAL-Pilot defines them, and never a file
of the installed package: a ComputeUnit's (RP 0.90's, and this project's own units) RP_PROF is
its profile file <sandbox>/<uid>.prof, which RP 0.90's scripts append to; an RP 1.x task's is a
command that appends to RP_PROF_TGT, the same file of the task's; both commands are the pilot
sandbox's copies.  RP 0.90's hello script (tests/rp_scripts/hello_rp.sh) and then RP 1.x's
radical-pilot-hello.sh run in one session, on the local runner and on node daemons, and neither
leaves a file of the checkout or the package changed (tests/tree_state.py)."""

from __future__ import annotations

import os
import sys

import pytest

import pilot as rp
from tests import tree_state
from tests.conftest import ROOT, active_pilot, local_pilot

HELLO_090 = os.path.join(ROOT, "tests", "rp_scripts", "hello_rp.sh")
_INSTALLED = os.path.join(os.path.dirname(sys.executable), "radical-pilot-hello.sh")
HELLO_1X = (  # as RP's tutorials find it (installed beside the interpreter), else the package's
    _INSTALLED
    if os.path.exists(_INSTALLED)
    else os.path.join(ROOT, "pilot", "rp_bin", "radical-pilot-hello.sh")
)
PACKAGE = os.path.realpath(os.path.dirname(rp.__file__))
SHOW = 'echo "RP_PROF=$RP_PROF"; echo "RP_PROF_TGT=${RP_PROF_TGT-unset}"; echo "RP_GTOD=$RP_GTOD"'


def _events(path: str, uid: str) -> list[str]:
    """The events of a trace file, each line checked: time,event,comp,thread,uid,state,msg."""
    with open(path) as f:
        lines = f.read().splitlines()
    events = []
    for line in lines:
        fields = line.split(",")
        assert len(fields) == 7 and fields[4] == uid, line
        assert float(fields[0]) > 1.6e9, line  # ($RP_GTOD's time: seconds since the epoch)
        events.append(fields[1])
    return events


def _shown(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.mark.parametrize("resource", ["local.localhost", "local.nodes4"])
def test_rp090_then_rp1_traces_are_where_rp_puts_them_and_nothing_installed_changes(
    session, resource
):
    before = tree_state.snapshot()
    _, umgr = active_pilot(session, parts=((2,),), resource=resource, runtime=60)

    # RP 0.90: ComputeUnits; hello_rp.sh appends to $RP_PROF, and so does a unit of one's own
    cud = rp.ComputeUnitDescription
    units = umgr.submit_units(
        [
            cud(executable="/bin/sh", arguments=[HELLO_090, "0"]),
            cud(executable="/bin/sh", arguments=["-c", 'echo x >> "$RP_PROF"']),
            cud(executable="/bin/sh", arguments=["-c", SHOW]),
            cud(executable="/bin/sh", arguments=[HELLO_1X, "0"]),  # RP 1.x's, as a ComputeUnit
        ]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 4, [(u.state, u.stderr) for u in units]
    hello, own, show, hello_1x = units
    assert _events(os.path.join(hello.sandbox, f"{hello.uid}.prof"), hello.uid) == [
        "app_start",
        "app_stop",
    ]
    with open(os.path.join(own.sandbox, f"{own.uid}.prof")) as f:
        assert f.read() == "x\n"
    env = _shown(show.stdout)
    assert env["RP_PROF"] == os.path.join(show.sandbox, f"{show.uid}.prof")
    assert env["RP_PROF_TGT"] == "unset"
    gtod = env["RP_GTOD"]
    assert os.access(gtod, os.X_OK) and not os.path.realpath(gtod).startswith(PACKAGE)
    assert _events(os.path.join(hello_1x.sandbox, f"{hello_1x.uid}.prof"), hello_1x.uid) == [
        "app_start",
        "app_stop",
    ]

    # RP 1.x: tasks (a pilot of their own, as a pilot has one manager); `$RP_PROF EVENT`
    # appends to the task's <uid>.prof
    pilot = local_pilot(session, parts=((2,),), resource=resource, runtime=60)
    box = pilot.pilot_sandbox
    tmgr = rp.TaskManager(session)
    tmgr.add_pilots(pilot)
    td = rp.TaskDescription
    tasks = tmgr.submit_tasks(
        [
            td({"executable": HELLO_1X, "arguments": ["0"]}),
            td({"executable": "/bin/sh", "arguments": ["-c", "$RP_PROF mine a_msg; " + SHOW]}),
        ]
    )
    assert tmgr.wait_tasks(timeout=60) == [rp.DONE] * 2, [(t.state, t.stderr) for t in tasks]
    hello1, mine = tasks
    assert hello1.stdout.startswith("0 : PID     : ")
    assert _events(os.path.join(hello1.sandbox, f"{hello1.uid}.prof"), hello1.uid) == [
        "app_start",
        "app_stop",
    ]
    assert _events(os.path.join(mine.sandbox, f"{mine.uid}.prof"), mine.uid) == ["mine"]
    env = _shown(mine.stdout)
    assert env["RP_PROF_TGT"] == os.path.join(mine.sandbox, f"{mine.uid}.prof")
    prof = env["RP_PROF"]
    assert os.access(prof, os.X_OK) and not os.path.realpath(prof).startswith(PACKAGE)
    assert os.path.dirname(prof) == box == os.path.dirname(env["RP_GTOD"])

    assert tree_state.changes(before, tree_state.snapshot()) == []
