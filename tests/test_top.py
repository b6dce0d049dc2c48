"""`pilot top` and the wait_units progress bar, as a user at a terminal sees them.

A real session runs in another process (its client writes the store there, as a user's script
would) under a pseudo-terminal: a pilot with two partitions running sleep units, one unit that
FAILED, one reconfig.  `pilot top` runs under its own pseudo-terminal (pexpect), behind a shell
that records the terminal's modes (`stty -g`) before and after it.  Every wait has a deadline;
every process started here is ended by its pid (pexpect's close, the session's processes found
by PILOT_SESSION_ID).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

import pilot as rp
from pilot.pmgr.core import reaper
from tests.conftest import ROOT, active_pilot

pexpect = pytest.importorskip("pexpect")
pytest.importorskip("rich")

DEADLINE = 30  # s for any one thing to show up on a terminal

# the watched session: run as `python -c HELPER resource.yaml`; prints READY and waits for a line
HELPER = r"""
import sys

import pilot as rp

CPD, CUD = rp.ComputePartitionDescription, rp.ComputeUnitDescription
with rp.Session() as session:
    pd = rp.ComputePilotDescription(
        resource=sys.argv[1], parts=[CPD(cores=1), CPD(cores=1)], runtime=10, cores=4, gpus=2
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    for part in pilot.partitions:
        assert part.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, part.reason
    p0, p1 = (part.uid for part in pilot.partitions)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    quick = umgr.submit_units(
        [CUD(executable="/bin/true", partition=p0), CUD(executable="/bin/false", partition=p1)]
    )
    umgr.wait_units([u.uid for u in quick], timeout=60, progress=True)  # stderr: the pty
    (extra,) = pilot.reconfig(start=[CPD(cores=1)])
    assert extra.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, extra.reason
    pilot.reconfig(stop=extra.uid)
    assert extra.wait(timeout=60) == rp.CANCELED
    sleeps = umgr.submit_units(
        [CUD(executable="/bin/sleep", arguments=["300"], partition=p) for p in (p0, p0, p1)]
    )
    umgr.wait_units([sleeps[0].uid, sleeps[2].uid], state=rp.EXECUTING, timeout=60)
    session.writer.flush(timeout=30)
    print("READY", session.uid, pilot.uid, p0, p1, extra.uid, flush=True)
    sys.stdin.readline()
print("CLOSED", flush=True)
"""

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]|\r")
COLOUR = re.compile(r"\x1b\[(?:[0-9]+;)*(?:3[0-8]|4[0-8]|9[0-7])(?:;[0-9]+)*m")  # SGR colours
BOX = re.compile(r"[│┃┆╇━─╭╮╰╯┼╋┿|+]")


def plain(text: str) -> str:
    return ANSI.sub("", text)


def rows(text: str) -> dict[str, list[str]]:
    """uid -> the cells of its row in the partitions table."""
    out = {}
    for line in plain(text).splitlines():
        cells = BOX.sub(" ", line).split()
        if cells and cells[0].startswith("pilot.") and ".part." in cells[0]:
            out.setdefault(cells[0], cells[1:])  # the table comes before the reasons
    return out


class Watched:
    def __init__(self, env, session, pilot, parts, extra, progress_output):
        self.env, self.session, self.pilot = env, session, pilot
        self.parts, self.extra = parts, extra
        self.progress_output = progress_output


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    d = tmp_path_factory.mktemp("top")
    (d / "sessions").mkdir()
    cfg = d / "four.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 4\ngpus_per_node: 2\n")
    env = dict(os.environ, PILOT_SESSIONS_DIR=str(d / "sessions"), PYTHONPATH=ROOT)
    env["TERM"] = "xterm-256color"
    for name in ("NO_COLOR", "PILOT_PROGRESS", "PILOT_DATABASE_URL", "COLUMNS", "LINES"):
        env.pop(name, None)
    child = pexpect.spawn(
        sys.executable,
        ["-c", HELPER, str(cfg)],
        env=env,
        dimensions=(40, 160),
        encoding="utf-8",
        timeout=DEADLINE,
    )
    uid = None
    try:
        child.expect(r"READY (\S+) (\S+) (\S+) (\S+) (\S+)\r\n", timeout=120)
        uid, pilot, p0, p1, extra = child.match.groups()
        yield Watched(env, uid, pilot, [p0, p1], extra, child.before)
        child.sendline("")  # the session closes: its pilot ends CANCELED
        child.expect("CLOSED", timeout=60)
        child.expect(pexpect.EOF, timeout=30)
    finally:
        child.close(force=True)  # by its pid: SIGHUP, SIGINT, then SIGKILL
        left = reaper.kill_session_processes(uid) if uid else []
        assert not left, f"processes of {uid} left behind: {left}"


def top_on_a_terminal(watched, tmp_path, *args, **env):
    """`pilot top ARGS` under a pseudo-terminal, behind a shell that records the terminal's
    modes before (tmp_path/before) and after (tmp_path/after) and prints rc=<exit status>;
    `child.logfile_read` keeps everything written to the terminal."""
    script = (
        f'trap : INT; stty -g > "{tmp_path}/before"; "$@"; echo "rc=$?"; '
        f'stty -g > "{tmp_path}/after"'
    )
    child = pexpect.spawn(
        "/bin/sh",
        ["-c", script, "sh", sys.executable, "-m", "pilot", "top", *args],
        env={**watched.env, **env},
        dimensions=(40, 160),
        encoding="utf-8",
        timeout=DEADLINE,
    )
    child.logfile_read = io.StringIO()  # all it wrote
    return child


def ends_with_terminal_restored(child, tmp_path) -> str:
    """Waits for the exit (status 0), checks the terminal's modes are as before; returns all
    that was written to the terminal."""
    try:
        child.expect(r"rc=(\d+)")
        assert child.match.group(1) == "0", plain(child.before)[-2000:]
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    before = (tmp_path / "before").read_text()
    assert before and (tmp_path / "after").read_text() == before  # echo, canonical mode back
    return child.logfile_read.getvalue()


def test_top_shows_the_pilot_live_and_q_quits(watched, tmp_path):
    p0, p1 = watched.parts
    child = top_on_a_terminal(watched, tmp_path)  # no name: the newest running pilot
    try:
        child.expect("q quits")
        child.expect("q quits")  # a second frame: it refreshes
        frame = child.before.split("\x1b[H")[-1]  # each frame starts at the home position
        text = plain(frame)
        table = rows(frame)
        # uid: state, cores busy/total, GPUs busy/total, QUEUED, EXECUTING, DONE, FAILED,
        # CANCELED units
        assert table[p0] == ["ACTIVE", "1/1", "0/0", "1", "1", "1", "0", "0"], text
        assert table[p1] == ["ACTIVE", "1/1", "0/0", "0", "1", "0", "1", "0"], text
        assert table[watched.extra] == ["CANCELED", "0/1", "0/0", "0", "0", "0", "0", "0"], text
        assert f"{watched.extra} CANCELED: stopped by reconfig" in text
        assert f"{watched.pilot}  ACTIVE  1 node(s), 4 cores, 2 GPUs" in text
        assert re.search(r"runtime 0:10:00, left 0:0\d:\d\d", text), text
        assert f"session {watched.session}" in text
        assert "units 5: QUEUED 1, EXECUTING 2, DONE 1, FAILED 1" in text
        assert f"reconfig: started {watched.extra} (cores=1)" in text
        assert f"reconfig: stopped {watched.extra}" in text
        assert f"unit.000001 FAILED in {p1}: exit code 1" in text
        assert f"{p0} ACTIVE" in text and f"{p1} ACTIVE" in text  # partition state changes
        child.send("q")
        shown = ends_with_terminal_restored(child, tmp_path)
    finally:
        child.close(force=True)
    assert COLOUR.search(shown)  # states in colour (test_no_colour_and_dumb_terminals: none)
    assert "\x1b[?1049h" in shown  # on the alternate screen; after q the main screen and the
    assert shown.rindex("\x1b[?1049l") > shown.rindex("q quits")  # cursor are back
    assert shown.rindex("\x1b[?25h") > shown.rindex("q quits")


def test_ctrl_c_quits_and_restores_the_terminal(watched, tmp_path):
    child = top_on_a_terminal(watched, tmp_path, watched.session)  # named by its session
    try:
        child.expect("q quits")
        child.sendintr()
        shown = ends_with_terminal_restored(child, tmp_path)
    finally:
        child.close(force=True)
    assert shown.rindex("\x1b[?1049l") > shown.rindex("q quits")
    assert shown.rindex("\x1b[?25h") > shown.rindex("q quits")
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown


def test_no_colour_and_dumb_terminals(watched, tmp_path):
    child = top_on_a_terminal(watched, tmp_path, watched.pilot, NO_COLOR="1")
    try:
        child.expect("q quits")
        child.expect("q quits")
        assert not COLOUR.search(child.logfile_read.getvalue())
        child.send("q")
        ends_with_terminal_restored(child, tmp_path)
    finally:
        child.close(force=True)
    # a terminal without cursor control: plain frames, not one escape sequence; q still quits
    child = top_on_a_terminal(watched, tmp_path, f"{watched.session}/{watched.pilot}", TERM="dumb")
    try:
        child.expect("latest events")
        child.expect(r"\n\r?\n")  # the frame is out
        child.send("q")
        shown = ends_with_terminal_restored(child, tmp_path)
    finally:
        child.close(force=True)
    assert "\x1b" not in shown  # no colour, no cursor movement, no alternate screen
    assert rows(shown)[watched.parts[0]][:1] == ["ACTIVE"]


def test_once_prints_one_frame(watched):
    for name in ([], [watched.session], [f"{watched.session}/{watched.pilot}"]):
        out = subprocess.run(
            [sys.executable, "-m", "pilot", "top", *name, "--once"],
            capture_output=True,
            text=True,
            timeout=60,
            env=watched.env,
        )
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout  # not a terminal: no escape codes at all
        table = rows(out.stdout)
        assert table[watched.parts[0]] == ["ACTIVE", "1/1", "0/0", "1", "1", "1", "0", "0"]
        assert table[watched.parts[1]] == ["ACTIVE", "1/1", "0/0", "0", "1", "0", "1", "0"]
        assert out.stdout.count("latest events") == 1
        # how each partition's agent starts its units (agent/runners/local.py describe)
        said = [line for line in out.stdout.splitlines() if "lanes" in line]
        assert len(said) == 2 and all("spawn " in line for line in said), out.stdout


def test_progress_bar_on_a_terminal(watched):
    text = plain(watched.progress_output)
    assert "units" in text and "2/2" in text, text
    assert "done 1  failed 1  canceled 0" in text
    assert "units/s" in text


def test_progress_is_silent_without_a_terminal(make_session, capfd, monkeypatch):
    session = make_session()
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 3)
    capfd.readouterr()
    assert umgr.wait_units(timeout=60, progress=True) == [rp.DONE] * 3
    monkeypatch.setenv("PILOT_PROGRESS", "1")
    more = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 2)
    assert umgr.wait_units([u.uid for u in more], timeout=60) == [rp.DONE] * 2
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert len(units) == 3


def test_progress_is_asked_for_explicitly_or_by_environment(monkeypatch):
    from pilot.pmgr.core import progress

    monkeypatch.delenv("PILOT_PROGRESS", raising=False)
    assert not progress.asked(None) and progress.asked(True)
    monkeypatch.setenv("PILOT_PROGRESS", "1")
    assert progress.asked(None) and not progress.asked(False)
    monkeypatch.setenv("PILOT_PROGRESS", "0")
    assert not progress.asked(None)


def cli(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "pilot", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )


def test_top_says_when_nothing_runs(make_session, sessions_dir):
    out = cli("top")
    assert out.returncode == 2 and f"no running pilot under {sessions_dir}" in out.stderr
    session = make_session()
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/false")])
    umgr.wait_units(timeout=60)
    from pilot.pmgr.observe import top_store
    from pilot.pmgr.store import open_store

    # the generic reader (MongoDB's path) and the sqlite one see the same
    path = os.path.join(session.dir, "state.db")
    session.writer.flush(timeout=30)
    fast, generic = (
        top_store.SqliteReader(path),
        top_store.StoreReader(open_store(f"sqlite:///{path}")),
    )
    try:
        for name, args in (
            ("unit_counts", (session.uid, pilot.uid)),
            ("state_times", (pilot.uid,)),
            ("events", (session.uid,)),
        ):
            assert getattr(fast, name)(*args) == getattr(generic, name)(*args), name
    finally:
        fast.close()
        generic.close()
    session.close()
    last = rf"\(last: {pilot.uid} CANCELED at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d: session closed\)"
    for args in (["top"], ["top", session.uid], ["top", "--once"]):
        out = cli(*args)
        assert out.returncode == 2, out
        assert out.stdout == ""
        assert re.search(rf"^pilot: no running pilot in session {session.uid} {last}$", out.stderr)
    out = cli("top", pilot.uid)
    assert out.returncode == 2
    assert f"no running pilot '{pilot.uid}' in session {session.uid} (last:" in out.stderr
    out = cli("top", "session.nope/pilot.0000")
    assert out.returncode == 2 and "no session 'session.nope'" in out.stderr
