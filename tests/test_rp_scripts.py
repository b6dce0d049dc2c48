"""RADICAL-Pilot scripts run here with one changed line (tests/rp_scripts/: written in RP's
style, `import pilot as rp`): each runs as its own process, to its end, and checks what RP
would give."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pilot.pmgr.core import reaper
from tests.conftest import ROOT

SCRIPTS = os.path.join(ROOT, "tests", "rp_scripts")
NAMES = sorted(f[:-3] for f in os.listdir(SCRIPTS) if f.endswith(".py"))


@pytest.mark.parametrize("name", NAMES)
def test_rp_script_runs_to_its_end(name, tmp_path):
    sessions = tmp_path / "sessions"
    out = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=ROOT, PILOT_SESSIONS_DIR=str(sessions)),
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.rstrip().endswith(f"OK {name}"), out.stdout[-2000:]
    for uid in os.listdir(sessions):
        left = reaper.session_processes(uid)
        if left:
            reaper.kill_session_processes(uid)
        assert not left, f"processes left behind: {left}"


def test_command_lines_are_what_rps_shell_line_gives(session, tmp_path):
    """Argument quoting as RP writes it, checked against /bin/sh; the fast path (no shell) and
    the shell give the same argv."""
    import pilot as rp
    from tests.conftest import active_pilot

    (tmp_path / "a.dat").write_text("")
    (tmp_path / "b.dat").write_text("")
    pilot, umgr = active_pilot(session, parts=((1,),))
    show = '\'for a in "$@"; do printf "<%s>" "$a"; done; echo\''  # single-quoted: as written
    cases = {
        "plain": (["x", "y z", "", 'q"t'], '<x><y z><q"t>'),
        "expands": (
            ["$HOME", "${RP_UNIT_ID:+set}", "$(echo nested)"],
            f"<{os.environ['HOME']}><set><nested>",
        ),
        "single quoted": (["'$HOME'"], "<$HOME>"),
        "glob": ([f"{tmp_path}/*.dat"], f"<{tmp_path}/a.dat><{tmp_path}/b.dat>"),
    }
    units = {
        name: umgr.submit_units(
            rp.ComputeUnitDescription(executable="/bin/sh", arguments=["-c", show, "sh", *args])
        )
        for name, (args, _) in cases.items()
    }
    redirect = umgr.submit_units(
        rp.ComputeUnitDescription(executable="/bin/echo", arguments=["hi", ">", "out.txt"])
    )
    umgr.wait_units(timeout=60)
    for name, (_, expected) in cases.items():
        assert units[name].stdout.strip() == expected, (name, units[name].stdout)
    assert redirect.state == rp.DONE and redirect.stdout == ""
    with open(os.path.join(redirect.sandbox, "out.txt")) as f:
        assert f.read() == "hi\n"


def test_every_rp_name_is_reachable_from_the_package():
    """pilot/__init__.py names RP's constants statically (lazy imports): none may be missing."""
    import pilot as rp
    from pilot.rp import names as rp_names

    public = [n for n in vars(rp_names) if n[0].isupper() and n != "SCHEDULERS"]
    assert public and all(getattr(rp, n) == getattr(rp_names, n) for n in public)
    assert all(n in dir(rp) for n in public)
