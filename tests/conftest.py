"""Shared fixtures: isolated session directories, sessions that are always closed, and a check
that no process of a session is left behind (found by pid through PILOT_SESSION_ID)."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pilot as rp  # noqa: E402

try:  # Hypothesis keeps its example database and caches outside the checkout (tests/tree_state.py)
    import tempfile

    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), f"pilot-hypothesis-{os.getuid()}"))
except ImportError:
    pass
from pilot.pmgr.core import reaper  # noqa: E402


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker is given LINES=24 COLUMNS=80: the
        os.environ.pop("LINES", None)  # commands the tests run (`pilot top`) see what they
        os.environ.pop("COLUMNS", None)  # would under a serial run (no terminal: 120 x 40)
    config.addinivalue_line(
        "markers", "internal_errors_expected: the test injects a bug (no_internal_errors)"
    )


# `make test` runs the suite on pytest-xdist workers (twice the cores, --dist loadgroup): most
# tests wait on processes, timeouts and the store more than they compute.  The modules that
# use the one set of network-namespace test hosts (tests/netns.py: one subnet) or the one local
# SLURM cluster (tests/slurm.sh) run in one group, on one worker, one after another.
HOSTS_GROUP = {
    "test_chaos.py",
    "test_cluster.py",
    "test_liveness.py",
    "test_netns.py",
    "test_rp_sites.py",
    "test_slurm.py",
}


@pytest.hookimpl(tryfirst=True)  # (before xdist reads the groups)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in HOSTS_GROUP:
            item.add_marker(pytest.mark.xdist_group("hosts"))


def pytest_collection_finish(session):
    """Under --dist loadgroup the hosts group must have reached xdist (its nodeid suffix):
    else those modules would bring up one SLURM and one subnet on two workers at once."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [i.nodeid for i in session.items if i.path.name in HOSTS_GROUP]
    lost = [n for n in lost if not n.endswith("@hosts")]
    if lost:
        raise pytest.UsageError(
            f"xdist_group('hosts') did not reach pytest-xdist's scheduler ({lost[0]}): this "
            f"pytest {pytest.__version__} and pytest-xdist disagree on node ids (setup.cfg "
            "pins pytest for it); run without -n instead"
        )


# Nothing the suite runs may change the checkout or the installed package (tests/tree_state.py):
# the files as the run found them, compared with what it leaves; a difference fails the run.
# (PILOT_TREE_CHECK=0: not checked, for a run beside one's own edits of the tree.)
_TREE: dict = {}


def pytest_sessionstart(session):
    if os.environ.get("PILOT_TREE_CHECK") == "0":
        return
    if not hasattr(session.config, "workerinput"):  # (the controller only, under xdist)
        from tests import tree_state

        _TREE["before"] = tree_state.snapshot()


def pytest_sessionfinish(session, exitstatus):
    before = _TREE.get("before")
    if before is None:
        return
    from tests import tree_state

    changed = tree_state.changes(before, tree_state.snapshot())
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the run changed the checkout or the installed package:\n  " + "\n  ".join(changed)
        if reporter is not None:
            reporter.write_sep("=", "tree changed", red=True)
            reporter.write_line(text)
        else:
            print(text, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory):
    """A MongoDB to test against: MONGODB_URI when set, else SecantusDB started here.

    Never skipped silently: without a server the MongoDB tests fail, unless PILOT_SKIP_MONGO=1
    says to skip them (then they are reported as skipped, with that reason)."""
    from tests.mongo_server import MongoServer

    if os.environ.get("MONGODB_URI"):
        yield ("external", os.environ["MONGODB_URI"], None)
        return
    if os.environ.get("PILOT_SKIP_MONGO") == "1":
        pytest.skip("PILOT_SKIP_MONGO=1: MongoDB tests skipped on request")
    storage = tmp_path_factory.mktemp("secantus") / "data"
    storage.mkdir()
    server = MongoServer(str(storage))
    server.start()
    try:
        yield ("secantus", server.url, server)
    finally:
        server.stop()


@pytest.fixture
def mongo_url(mongo_server):
    """A fresh database on the test MongoDB, as a database_url."""
    import uuid

    from tests.mongo_server import with_database

    return with_database(mongo_server[1], f"pilot_test_{uuid.uuid4().hex[:8]}")


@pytest.fixture(params=["sqlite", "mongodb"])
def database_url(request, tmp_path):
    """Each backend in turn: the same tests run on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return request.getfixturevalue("mongo_url")


@pytest.fixture(autouse=True)
def sessions_dir(tmp_path, monkeypatch):
    d = tmp_path / "sessions"
    d.mkdir()
    monkeypatch.setenv("PILOT_SESSIONS_DIR", str(d))
    # a home of its own: what a test leaves under ~ (RP 1.x's ~/radical.pilot.sandbox) goes
    # with its tmp_path, and the user's own ~/.radical configs never change a test; the
    # caches stay where they are (pip's, XDG's)
    real = os.path.expanduser("~")
    monkeypatch.setenv("XDG_CACHE_HOME", os.environ.get("XDG_CACHE_HOME", f"{real}/.cache"))
    monkeypatch.setenv("PIP_CACHE_DIR", os.environ.get("PIP_CACHE_DIR", f"{real}/.cache/pip"))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return d


@pytest.fixture(autouse=True)
def no_internal_errors(sessions_dir, request):
    """A test fails when any component met a bug of our own (pilot/wire/checks.py InternalErrors:
    INTERNAL ERROR, with its traceback): in this process's log, or in the logs of the
    sessions it ran (their bootstraps, agents, node daemons)."""
    import logging

    from pilot.wire.checks import InternalErrors

    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if text.startswith(InternalErrors.MARK):
                seen.append(text)

    catch = Catch(logging.ERROR)
    logging.getLogger().addHandler(catch)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(catch)
    for path in sessions_dir.rglob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if InternalErrors.MARK in line:
                seen.append(f"{path.relative_to(sessions_dir)}: {line}")
    if request.node.get_closest_marker("internal_errors_expected") is None:
        assert not seen, "internal errors (bugs of our own, not bad input):\n" + "\n".join(seen)


def _described(pid: int) -> str:
    """A leftover process as `pid (ppid P, PILOT_UNIT_ID/PARTITION_ID...): cmdline`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = f.read().rsplit(b")", 1)[-1].split()[1].decode()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(
                kv.decode(errors="replace").partition("=")[::2]
                for kv in f.read().split(b"\0")
                if kv.startswith((b"PILOT_UNIT_ID=", b"PILOT_PARTITION_ID=", b"PILOT_ROLE="))
            )
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} (ppid {ppid}, {env}): {cmd}"


@pytest.fixture
def make_session():
    """make_session(**kw) -> an open Session; all are closed after the test (even on failure),
    and the test fails if any of their processes is still alive then."""
    made: list[rp.Session] = []

    def make(**kw):
        s = rp.Session(**kw)
        made.append(s)
        return s

    yield make
    leftovers = {}
    for s in made:  # (all closed first: two clients of one session share its processes)
        s.close()
    for uid in dict.fromkeys(s.uid for s in made):
        left = reaper.session_processes(uid)
        if left:
            leftovers[uid] = [_described(pid) for pid in left]
            reaper.kill_session_processes(uid)
    assert not leftovers, f"processes left behind after close: {leftovers}"


@pytest.fixture
def session(make_session):
    return make_session()


def local_pilot(session, parts=((1,), (1,)), runtime=5, resource="local.localhost", **kw):
    """Submit a pilot on `resource` with one partition of `cores` per entry of parts."""
    descs = [
        rp.ComputePartitionDescription(cores=p[0]) if isinstance(p, tuple) else p for p in parts
    ]
    pd = rp.ComputePilotDescription(resource=resource, parts=descs, runtime=runtime, **kw)
    return rp.PilotManager(session).submit_pilots(pd)


def active_pilot(session, **kw):
    pilot = local_pilot(session, **kw)
    for part in pilot.partitions:
        assert part.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE, part.reason
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    return pilot, umgr


def unmoved(states: list[str]) -> list[str]:
    """A unit's states as if it had not moved between partitions: each QUEUED -> SCHEDULING
    (given back unstarted, or handed back by a stopped partition, and routed again: a move the
    client's rebalance may make, pmgr/core/routing.py) taken out."""
    out: list[str] = []
    for s in states:
        if s == "SCHEDULING" and out and out[-1] == "QUEUED":
            out.pop()
            continue
        out.append(s)
    return out
