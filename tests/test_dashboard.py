"""`pilot dashboard` as a user sees it: in a real browser, against a running pilot.

The session runs in this process (its client writes the store, as a user's script would): a
pilot on local.simulated with two partitions, sleep units holding cores, one unit that FAILED.
`pilot dashboard SESSION --port 0` runs as a user starts it, in its own process; the first
line it prints is the URL.  The browser is Debian's Chromium (/usr/bin/chromium; Playwright's
own browser download cannot be reached here), started by this file with the flags this
machine needs and a fresh profile, and driven by Playwright over the DevTools protocol
(connect_over_cdp).  Skipped, saying why, without chromium or the playwright package (CI
installs both: .ci/run, setup.cfg's test extra).

Every wait has a deadline; every process started here is ended by its pid (the dashboard
with SIGTERM; Chromium, started in a process group of its own, by that group's id), and the
session's processes are checked by the `session` fixture.  PILOT_SCREENSHOT=FILE keeps the
screenshot of the page (docs/dashboard.png was made so).

The server's own failures (a poll that fails, a look that cannot be sent, a control socket
that fails, a page that stops reading) are driven through `Served`: dashboard.serve in a
thread of this process, over `Looks`, a stand-in for dashboard_data.Watch whose polls the
test writes, asked over real HTTP sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

import pilot as rp
from tests.conftest import ROOT, active_pilot

DEADLINE = 30.0  # s for a process to come up
SHOWN_WITHIN = 2.0  # s: a change made from a shell is on the page by then (the bound)
CPD, CUD = rp.ComputePartitionDescription, rp.ComputeUnitDescription

pytest.importorskip("tornado")
from pilot.pmgr.observe import dashboard  # noqa: E402
from pilot.pmgr.observe.dashboard import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from pilot.pmgr.observe.dashboard_data import Look  # noqa: E402
from tests.test_cli import cli as pilot_cli  # noqa: E402


class Dashboard:
    """`pilot dashboard ARGS` in its own process: its URL, and its end by pid."""

    def __init__(self, *args: str, log_dir, nofile: int | None = None) -> None:
        self.log = open(os.path.join(log_dir, f"dashboard.{nofile}.err"), "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pilot", "dashboard", *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=dict(os.environ, PYTHONPATH=ROOT),
            preexec_fn=(
                None
                if nofile is None  # (its descriptors, soft and hard: it cannot raise them)
                else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            ),
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], DEADLINE)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http://127.0.0.1:"):
            self.stop()
            raise AssertionError(f"no URL within {DEADLINE} s: {line!r} {self.stderr()}")
        self.url = line
        self.base, _, self.token = line.partition("/?token=")

    def stderr(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


def http(url: str, data: bytes | None = None, headers: dict | None = None):
    """(status, body text) of one request; no redirect, no retry."""
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def marked(marker: str) -> list[int]:
    """The pids of the processes whose environment holds PILOT_TEST_BROWSER=marker."""
    needle = f"PILOT_TEST_BROWSER={marker}".encode()
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(d))
            except OSError:
                pass
    return found


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, driven by Playwright over CDP.  Ended by its process group's id
    (its zygote's children are in it); then the group and every process that inherited its
    environment marker (its crash handlers, which leave the group) are waited for, and
    killed if still there."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    profile = tempfile.mkdtemp(prefix="pilot-chromium-")
    marker = os.path.basename(profile)
    log = open(os.path.join(profile, "chromium.log"), "w")
    proc = subprocess.Popen(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,  # (its own process group)
        env=dict(os.environ, PILOT_TEST_BROWSER=marker),
    )
    pw = None
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + DEADLINE
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            assert proc.poll() is None, f"chromium exited {proc.returncode}"
            assert time.monotonic() < deadline, f"chromium not up within {DEADLINE} s"
            time.sleep(0.05)
        port, path = open(port_file).read().split("\n")[:2]
        pw = sync_api.sync_playwright().start()
        yield pw.chromium.connect_over_cdp(f"ws://127.0.0.1:{port}{path}", timeout=DEADLINE * 1000)
    finally:
        if pw is not None:
            pw.stop()  # (its driver process)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        deadline = time.monotonic() + 10
        while (group_alive(proc.pid) or marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        left = marked(marker)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(profile, ignore_errors=True)
        assert not left, f"chromium processes left behind: {left}"


@pytest.fixture
def page(browser):
    """A page in a context of its own (no cookie from another test), closed after; the
    script's errors and the console's (a CSP refusal among them) fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on(  # (an HTTP error status is asserted where one is meant; not a script's error)
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(DEADLINE * 1000)
    yield page
    context.close()
    assert not errors, errors


@pytest.fixture
def running(session, tmp_path):
    """A pilot on local.simulated (3 nodes of 4 cores, 2 GPUs): partitions of 4 cores and 2
    GPUs, and of 2 cores; two sleep units hold cores, one unit FAILED; its dashboard."""
    pilot, umgr = active_pilot(
        session, parts=(CPD(cores=4, gpus=2), CPD(cores=2)), resource="local.simulated", nodes=3
    )
    p0, p1 = (p.uid for p in pilot.partitions)
    bad = umgr.submit_units([CUD(executable="/bin/false", partition=p1)])
    umgr.wait_units([u.uid for u in bad], timeout=30)
    sleeps = umgr.submit_units(
        [CUD(executable="/bin/sleep", arguments=["120"], partition=p, gpus=1) for p in (p0,)]
        + [CUD(executable="/bin/sleep", arguments=["120"], partition=p1)]
    )
    umgr.wait_units([u.uid for u in sleeps], state=rp.EXECUTING, timeout=30)
    session.writer.flush(timeout=30)
    dash = Dashboard(session.uid, "--port", "0", "--interval", "0.5", log_dir=tmp_path)
    try:
        yield pilot, dash
    finally:
        assert dash.stop() == 0, dash.stderr()


def row(page, uid: str):
    return page.locator(f'tr[data-uid="{uid}"]')


def test_the_page_shows_a_running_pilot_and_a_reconfig_from_a_shell(running, page):
    from playwright.sync_api import expect

    pilot, dash = running
    p0, p1 = (p.uid for p in pilot.partitions)
    page.goto(dash.url)
    expect(page.locator("#status")).to_contain_text("live")
    expect(row(page, p0).locator(".state")).to_have_text("ACTIVE")
    expect(row(page, p1).locator(".state")).to_have_text("ACTIVE")
    expect(row(page, p0).locator(".cores")).to_have_text("1/4")  # the sleep unit's core
    expect(row(page, p0).locator(".gpus")).to_have_text("1/2")
    expect(row(page, p1).locator(".units-FAILED")).to_have_text("1")
    expect(page.locator("#failed tbody tr")).to_have_count(1)
    expect(page.locator("#failed tbody")).to_contain_text("exit code 1")
    # the node view: the sleep units' cores and GPU are filled, by the units holding them
    expect(page.locator(".cell.busy")).to_have_count(3)
    expect(page.locator(f'.cell.gpu.busy[data-part="{p0}"]')).to_have_count(1)
    # the series: the cores chart has its partitions, and grows
    expect(page.locator("#chart-cores .u-legend")).to_contain_text("part.0000")

    done = pilot_cli("reconfig", pilot.uid, "--start", "cores=2")
    assert done.returncode == 0, done.stderr
    started = [ln.split()[1] for ln in done.stdout.splitlines() if ln.startswith("started:")]
    assert len(started) == 1, done.stdout
    t0 = time.monotonic()
    expect(row(page, started[0]).locator(".state")).to_have_text(
        "ACTIVE", timeout=SHOWN_WITHIN * 1000
    )
    assert time.monotonic() - t0 <= SHOWN_WITHIN
    expect(row(page, started[0]).locator(".asked")).to_have_text("cores=2")

    done = pilot_cli("reconfig", pilot.uid, "--stop", started[0])
    assert done.returncode == 0, done.stderr
    expect(row(page, started[0]).locator(".state")).to_have_text(
        "CANCELED", timeout=SHOWN_WITHIN * 1000
    )
    # the reconfigs, as the store has them, are the charts' markers (one, or one each)
    name = started[0][len(pilot.uid) + 1 :]
    deadline = time.monotonic() + DEADLINE
    while True:
        state = json.loads(http(f"{dash.base}/api/state?token={dash.token}")[1])
        labels = " ".join(r["label"] for r in state["reconfigs"])
        if f"-{name}" in labels or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert f"+{name}" in labels and f"-{name}" in labels, labels
    page.wait_for_timeout(600)  # (a push after the last change: the markers drawn)
    shot = os.environ.get("PILOT_SCREENSHOT") or os.path.join(dash.log.name + ".png")
    page.screenshot(path=shot, full_page=True)
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_reconfig_from_the_page_takes_effect(running, page):
    from playwright.sync_api import expect

    pilot, dash = running
    p0, p1 = (p.uid for p in pilot.partitions)
    page.goto(dash.url)
    form = page.locator(f'.reconfig:has(button[data-pilot="{pilot.uid}"])')
    # a size the CLI would refuse is refused here, naming the field
    form.locator("input.start").fill("cores=two")
    form.locator("button").click()
    expect(form.locator(".result")).to_contain_text("start[0]")
    expect(form.locator(".result")).to_contain_text("must be a whole number")
    assert [p.uid for p in pilot.partitions] == [p0, p1]

    # stop p1, start 2 cores: as `pilot reconfig --stop p1 --start cores=2`
    row(page, p1).locator("input[type=checkbox]").check()
    form.locator("input.start").fill("cores=2")
    form.locator("button").click()
    expect(form.locator(".result")).to_contain_text("started: ")
    result = form.locator(".result").inner_text()
    assert f"stopped: {p1}" in result, result
    new = result.split("started: ")[1].split()[0]
    # it took effect: the pilot says so over its control socket, and the client knows
    listing = json.loads(pilot_cli("partitions", pilot.uid, "--json").stdout)
    states = {p["uid"]: p["state"] for p in listing["partitions"]}
    assert states[p1] in ("CANCELED", "ACTIVE"), states  # (ACTIVE: still draining)
    assert states[new] in ("PENDING", "STARTING", "ACTIVE"), states
    deadline = time.monotonic() + DEADLINE
    while pilot.partitions[1].state != rp.CANCELED or new not in {p.uid for p in pilot.partitions}:
        assert time.monotonic() < deadline, [(p.uid, p.state) for p in pilot.partitions]
        time.sleep(0.05)
    assert pilot.partition(new).wait(rp.ACTIVE, timeout=DEADLINE) == rp.ACTIVE
    expect(row(page, new).locator(".state")).to_have_text("ACTIVE")
    expect(row(page, p1).locator(".state")).to_have_text("CANCELED")
    expect(row(page, p1).locator("input[type=checkbox]")).to_be_disabled()


def test_without_the_token_nothing_is_served_and_nothing_is_done(running, page):
    pilot, dash = running
    before = [(p.uid, p.state) for p in pilot.partitions]
    for path in ("/", "/events", "/api/state", "/static/dashboard.js", "/static/uPlot.min.css"):
        status, body = http(dash.base + path)
        assert status == 403, (path, status)
        assert "token" in body and dash.token not in body
        assert http(f"{dash.base}{path}?token=wrong{dash.token}")[0] == 403
    start = json.dumps({"pilot": pilot.uid, "start": ["cores=1"]}).encode()
    cookie = {"Cookie": f"pilot-dashboard-{dash.base.rsplit(':', 1)[1]}={dash.token}"}
    for headers in ({}, {"X-Pilot-Token": "wrong"}, cookie):  # (a cookie alone commands nothing)
        assert http(f"{dash.base}/api/reconfig", start, headers)[0] == 403
    assert http(f"{dash.base}/api/reconfig?token={dash.token}", start)[0] == 403
    # another name for this host is refused even with the token (DNS rebinding)
    host = {"Host": "attacker.example", "X-Pilot-Token": dash.token}
    assert http(f"{dash.base}/api/reconfig", start, host)[0] == 403
    # the browser: the page without the token is the refusal, and no script runs
    response = page.goto(dash.base + "/")
    assert response.status == 403
    assert "needs the token" in page.content()
    time.sleep(1.0)  # (a reconfig would have started a partition by now)
    assert [(p.uid, p.state) for p in pilot.partitions] == before
    listing = json.loads(pilot_cli("partitions", pilot.uid, "--json").stdout)
    assert [p["uid"] for p in listing["partitions"]] == [u for u, _ in before]
    assert "refused POST /api/reconfig" in dash.stderr()
    assert dash.token not in dash.stderr()


def test_a_flood_of_idle_local_connections_neither_spins_nor_starves_the_page(running, tmp_path):
    """200 sockets without a token, opened and left idle, against a dashboard that may open
    128 descriptors: before, tornado's accept hit EMFILE, spun at 100 % CPU and logged ~1M
    traceback lines in 5 s (70 MB), and recovered only when the sockets closed.  Now what is
    beyond its cap (half its descriptors) is answered 503 and closed, the process idles, and
    the page is answered as soon as the flood lets go."""
    pilot, _ = running
    dash = Dashboard(pilot.session.uid, "--port", "0", log_dir=tmp_path, nofile=128)
    host, port = dash.base.removeprefix("http://").split(":")
    flood = []
    try:
        for _ in range(200):
            flood.append(socket.create_connection((host, int(port)), timeout=5))
        status, text = http(f"{dash.base}/api/state?token={dash.token}")
        assert status == 503 and "too many connections" in text, (status, text[:200])
        with open(f"/proc/{dash.proc.pid}/stat") as f:
            before = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        time.sleep(2.0)
        with open(f"/proc/{dash.proc.pid}/stat") as f:
            after = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        assert (after - before) / os.sysconf("SC_CLK_TCK") < 1.0, "it spins"
        assert len(dash.stderr()) < 64 * 1024, dash.stderr()[-2000:]
        for c in flood:
            c.close()
        flood.clear()
        deadline = time.monotonic() + 10
        while (got := http(f"{dash.base}/api/state?token={dash.token}"))[0] != 200:
            assert time.monotonic() < deadline, got
            time.sleep(0.2)
        assert pilot.uid in got[1]
    finally:
        for c in flood:
            c.close()
        assert dash.stop() == 0, dash.stderr()[-2000:]


def test_bad_reconfig_requests_name_the_field(running):
    pilot, dash = running
    p0, _ = (p.uid for p in pilot.partitions)
    auth = {"X-Pilot-Token": dash.token, "Content-Type": "application/json"}

    def post(body) -> tuple[int, str]:
        status, text = http(f"{dash.base}/api/reconfig", json.dumps(body).encode(), auth)
        return status, json.loads(text)["error"]

    http(f"{dash.base}/api/state?token={dash.token}")  # (a first look: the partitions known)
    for deep in (b"[" * 30_000 + b"]" * 30_000, b'{"pilot": "x", "stop": ' + b"[" * 5_000):
        status, text = http(f"{dash.base}/api/reconfig", deep, auth)  # (was a 500)
        assert status == 400 and json.loads(text)["error"].startswith("body: "), (status, text)
    assert post({"pilot": "pilot.9999", "stop": [p0]}) == (
        400,
        f"pilot: 'pilot.9999' is not a running pilot of session {pilot.session.uid}; "
        f"running: ['{pilot.uid}']",
    )
    status, error = post({"pilot": pilot.uid, "stop": ["pilot.0000.part.0042"]})
    assert status == 400 and error.startswith("stop[0]: 'pilot.0000.part.0042' is not a partition")
    status, error = post({"pilot": pilot.uid, "start": ["fill", "nodes=x"]})
    assert status == 400 and error.startswith("start[1] 'nodes=x': nodes='x' must be a whole")
    assert post({"pilot": pilot.uid}) == (
        400,
        "stop, start: give a partition to stop and/or a size to start",
    )
    status, error = post({"pilot": pilot.uid, "start": ["50%", "fill", "cores=0"]})
    assert status == 400 and error == (
        "start[2] 'cores=0': ComputePartitionDescription: cores=0, gpus=0 is an empty partition"
    )
    sizes = "a size (50%, fill, cores=N,gpus=N|all, nodes=N or config=NAME)"
    assert post({"pilot": pilot.uid, "start": "50%"}) == (
        400,
        f"start: '50%' must be a list, each {sizes}",
    )
    for wrong in (0, "", {}, False):  # (not empty lists: refused, naming the field)
        assert post({"pilot": pilot.uid, "stop": wrong, "start": ["cores=1"]}) == (
            400,
            f"stop: {wrong!r} must be a list, each a partition uid of the pilot or 'all'",
        )
        assert post({"pilot": pilot.uid, "stop": [p0], "start": wrong}) == (
            400,
            f"start: {wrong!r} must be a list, each {sizes}",
        )
    assert post({"pilot": pilot.uid, "stop": [p0, 3]}) == (
        400,
        "stop[1]: 3 must be a string, a partition uid of the pilot or 'all'",
    )
    assert post({"pilot": pilot.uid, "start": ["fill", None]}) == (
        400,
        f"start[1]: None must be a string, {sizes}",
    )
    assert post({"pilot": pilot.uid, "colour": 1})[1].startswith("['colour']: unknown field")
    assert post({"pilot": pilot.uid, "stop": [p0], "id": "no spaces"})[1].startswith("id: ")
    assert [p.uid for p in pilot.partitions] == [p0, pilot.partitions[1].uid]  # (nothing done)


def test_a_session_that_ended_is_shown_from_its_store(make_session, tmp_path):
    with make_session() as session:
        pilot, umgr = active_pilot(session, parts=((1,),))
        umgr.submit_units([CUD(executable="/bin/true")] * 3)
        umgr.wait_units(timeout=30)
        uid, pilot_uid = session.uid, pilot.uid
    dash = Dashboard(uid, log_dir=tmp_path)
    try:
        state = json.loads(http(f"{dash.base}/api/state?token={dash.token}")[1])
    finally:
        assert dash.stop() == 0, dash.stderr()
    (shown,) = state["pilots"]
    assert shown["uid"] == pilot_uid and not shown["live"] and shown["note"] == "not running"
    assert state["units"] == {"DONE": 3}


def test_no_running_pilot_and_no_such_session_exit_2(tmp_path):
    out = pilot_cli("dashboard")
    assert out.returncode == 2 and "no running pilot" in out.stderr, out.stderr
    out = pilot_cli("dashboard", "session.nope")
    assert out.returncode == 2 and "session.nope" in out.stderr, out.stderr
    out = pilot_cli("dashboard", "--port", "70000", "x", "--database-url", "sqlite:///nope.db")
    assert out.returncode == 2, out.stderr


def test_the_series_are_the_plots_means_however_they_are_read(tmp_path, monkeypatch):
    """The dashboard's series, read a few seconds at a time as a live session's polls read
    them, with pairs of points merged past MAX_POINTS, are what a client rebuilds from the
    changes, and are the means `pilot plot` computes from the same store (bins.from_flow)."""
    np = pytest.importorskip("numpy")
    from bench.views import SESSION, build
    from pilot.pmgr.observe import bins, dashboard_data, timeline
    from pilot.pmgr.store import open_store

    monkeypatch.setattr(dashboard_data, "MAX_POINTS", 8)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = open_store(url)
    try:
        build(store, 30_000)  # (30 s of 1,000 units/s, two partitions of 64 cores)
        tl = timeline.load(store, SESSION, max_units=0)
        rows = store.unit_flow(SESSION)
    finally:
        store.close()
    watch = dashboard_data.Watch(SESSION, url)
    try:
        created, lo, hi = watch.reader.span(SESSION)
        g0, end = int(min(created, lo)), int(hi)
        parts = ["pilot.0000.part.0000", "pilot.0000.part.0001"]
        t, cols = [], {}
        for settled in range(g0, end + 2, 3):  # (3 s a poll)
            change = watch.flow.update(parts, g0, end, settled)
            if change["reset"]:
                t, cols = [], {}
            k = change["from"]
            t = t[:k] + change["t"]
            cols = {n: cols.get(n, [])[:k] + v for n, v in change["cols"].items()}
            assert len(t) <= dashboard_data.MAX_POINTS + 1
        whole = watch.flow.full()
    finally:
        watch.close()
    assert (whole["t"], whole["cols"]) == (t, cols)
    width = int(whole["width"])
    assert width > 1  # (pairs were merged)
    per_second = bins.from_flow(rows, tl, 10**6)  # (a bin a second)
    for name, (cores, _) in per_second.busy.items():
        means = np.asarray(cores.values[:-1])
        expected = [means[i * width : (i + 1) * width].mean() for i in range(len(t))]
        assert np.allclose(cols[f"cores:{name}"], expected, atol=1e-3), name
    done = np.asarray(per_second.states["DONE"].values[:-1])
    assert cols["state:DONE"][-1] == pytest.approx(done[(len(t) - 1) * width :].mean(), abs=1e-3)
    # units/s: what reached a final state in each point, a second (the last point is open:
    # the mean over its seconds so far)
    last = (end - g0 + 1) - (len(t) - 1) * width
    finished = sum(r * width for r in cols["rate"][:-1]) + cols["rate"][-1] * last
    assert finished == pytest.approx(30_000, abs=0.1)


def test_a_session_on_mongodb_is_sampled(make_session, mongo_url, tmp_path):
    """MongoDB keeps no per-second series: the dashboard samples its own, from the counts
    and the running units, and says so; the rest is as on sqlite."""
    session = make_session(database_url=mongo_url)
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    p0 = pilot.partitions[0].uid
    sleeps = umgr.submit_units([CUD(executable="/bin/sleep", arguments=["60"], partition=p0)])
    umgr.wait_units([u.uid for u in sleeps], state=rp.EXECUTING, timeout=30)
    session.writer.flush(timeout=30)
    dash = Dashboard(
        session.uid, "--database-url", mongo_url, "--interval", "0.3", log_dir=tmp_path
    )
    try:
        for _ in range(2):
            state = json.loads(http(f"{dash.base}/api/state?token={dash.token}")[1])
        with urllib.request.urlopen(f"{dash.base}/events?token={dash.token}", timeout=10) as r:
            lines = [r.readline() for _ in range(8)]
    finally:
        assert dash.stop() == 0, dash.stderr()
    (shown,) = state["pilots"]
    assert shown["live"] and state["units"] == {"EXECUTING": 1}
    assert [p["busy"] for p in shown["partitions"]] == [[1, 0], [0, 0]]
    busy = [c for c in shown["nodes"]["nodes"][0]["cores"] if c[2]]
    assert [c[1:] for c in busy] == [[p0, sleeps[0].uid]]
    series = json.loads(next(ln for ln in lines if ln.startswith(b'data: {"reset"'))[6:])
    assert series["kept"].startswith("sampled by the dashboard")
    assert series["cols"][f"cores:{p0}"][-1] == 1


NO_SERIES = {"reset": True, "from": 0, "width": 1, "t": [], "cols": {}}


class Looks:
    """What dashboard.serve asks of a dashboard_data.Watch (session, controls, control, poll,
    series); poll n (1, 2, ...) returns make(n)'s Look or raises what it raises."""

    session = "session.test"

    def __init__(self, make, controls: dict | None = None) -> None:
        self.make, self.n = make, 0
        self.controls = controls or {}

    def control(self, pilot: str) -> dict | None:
        return self.controls.get(pilot)

    def poll(self) -> Look:
        self.n += 1
        return self.make(self.n)

    def series(self) -> dict:
        return NO_SERIES


def look(n: int, **extra) -> Look:
    return Look({"now": float(n), "n": n, "pilots": [], **extra}, NO_SERIES)


class Served:
    """dashboard.serve over `watch` in a thread of this process (its own asyncio loop, its
    poll thread), on a free port; `close` sets its stop event and joins it (DEADLINE)."""

    def __init__(self, watch, interval: float = 0.05) -> None:
        self.out, self.error = io.StringIO(), None
        self.started = threading.Event()
        self.pool = dashboard.ThreadPoolExecutor(1, "test-poll")
        self.thread = threading.Thread(target=self._run, args=(watch, interval), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + DEADLINE
        while "\n" not in self.out.getvalue():
            assert self.thread.is_alive(), f"serve ended: {self.error!r}"
            assert time.monotonic() < deadline, f"no URL within {DEADLINE} s"
            time.sleep(0.01)
        self.url = self.out.getvalue().strip()
        self.base, _, self.token = self.url.partition("/?token=")

    def _run(self, watch, interval: float) -> None:
        try:
            asyncio.run(self._main(watch, interval))
        except BaseException as exc:  # (raised again by close)
            self.error = exc

    async def _main(self, watch, interval: float) -> None:
        self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
        self.started.set()
        await dashboard.serve(watch, self.pool, 0, interval, self.out, self.stop)

    def close(self) -> None:
        if self.started.is_set() and self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # (its loop closed meanwhile: it ended)
                self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(DEADLINE)
        self.pool.shutdown(wait=False, cancel_futures=True)
        assert not self.thread.is_alive(), f"serve did not end within {DEADLINE} s"
        if self.error is not None:
            raise self.error


def events(response, until, deadline: float = 10.0) -> list[tuple[str, str]]:
    """(event, data) of a Server-Sent Events response, read until until(event, data) is
    true; AssertionError if it is not within `deadline` s (or the stream ends)."""
    seen: list[tuple[str, str]] = []
    end, name = time.monotonic() + deadline, None
    while time.monotonic() < end:
        line = response.readline().decode()
        assert line, f"the stream ended: {seen}"
        if line.startswith("event: "):
            name = line[7:].strip()
        elif line.startswith("data: ") and name:
            seen.append((name, line[6:].strip()))
            if until(name, seen[-1][1]):
                return seen
    raise AssertionError(f"not within {deadline} s: {seen}")


def test_a_poll_or_a_push_that_fails_is_shown_and_polling_goes_on(caplog):
    """Poll 2 fails; poll 3's look holds a value JSON cannot write: each is a "problem" on
    the page and in the log, and polls 4, 5, ... are pushed as before."""

    def make(n: int) -> Look:
        if n == 2:
            raise OSError("the store went away")
        return look(n, odd={"a set"}) if n == 3 else look(n)

    served = Served(Looks(make))
    try:
        url = f"{served.base}/events?token={served.token}"
        with urllib.request.urlopen(url, timeout=5) as r:
            seen = events(r, lambda e, d: e == "state" and json.loads(d)["n"] >= 5)
        status, body = http(f"{served.base}/api/state?token={served.token}")
    finally:
        served.close()
    problems = [json.loads(d)["error"] for e, d in seen if e == "problem"]
    assert problems == [
        "poll: OSError: the store went away",
        "push: TypeError: Object of type set is not JSON serializable",
    ], seen
    assert status == 200 and json.loads(body)["n"] >= 6
    logged = [r.getMessage() for r in caplog.records if r.name == "pilot.dashboard"]
    assert [m for m in logged if m.startswith(("poll:", "push:"))] == [
        f"{p} (the next poll tries again)" for p in problems
    ]
    assert served.token not in caplog.text


def test_a_failed_control_socket_or_no_poll_is_an_answer_and_the_token_is_never_logged(
    tmp_path, caplog, monkeypatch
):
    """A reconfig whose control socket fails is a 502 naming the pilot, the socket and the
    failure; an internal error is logged with its traceback; a state no poll delivers in
    STATE_TIMEOUT is a 504.  Every request carries the token in its URI, as the page's GETs
    do; no log line holds it."""
    from pilot.wire import security

    monkeypatch.setattr(dashboard, "STATE_TIMEOUT", 0.5)
    endpoint = "tcp://no-such-host:"  # (ZeroMQ refuses it: Invalid argument)
    control = {"pilot": "pilot.0000", "endpoint": endpoint, "keys": security.make_keys(tmp_path)}
    hang = threading.Event()

    class NoSeries(Looks):
        def series(self) -> dict:
            raise RuntimeError("no series")

    def make(n: int) -> Look:
        if n > 1:  # (polls after the first hang until the test ends)
            hang.wait(DEADLINE)
        return look(n)

    served = Served(NoSeries(make, {"pilot.0000": control}))
    try:
        auth = {"X-Pilot-Token": served.token, "Content-Type": "application/json"}
        body = json.dumps({"pilot": "pilot.0000", "start": ["cores=1"]}).encode()
        reconfig = http(f"{served.base}/api/reconfig?token={served.token}", body, auth)
        internal = http(f"{served.base}/events?token={served.token}")
        t0 = time.monotonic()
        state = http(f"{served.base}/api/state?token={served.token}")
        waited = time.monotonic() - t0
    finally:
        hang.set()
        served.close()
    assert reconfig[0] == 502, reconfig
    assert json.loads(reconfig[1])["error"] == (
        f"pilot.0000: its control socket {endpoint!r} failed: Invalid argument (addr={endpoint!r})"
    )
    assert internal[0] == 500 and served.token not in internal[1]
    assert state == (504, json.dumps({"error": "no poll ended within 0.5 s"}))
    assert waited < 5
    errors = [r for r in caplog.records if r.name == "pilot.dashboard" and r.exc_info]
    assert [r.getMessage() for r in errors] == ["internal error in GET /events"]
    logged = [r.getMessage() for r in caplog.records if r.name == "pilot.dashboard"]
    assert "502 POST /api/reconfig" in logged and "504 GET /api/state" in logged, logged
    assert served.token not in caplog.text


def tcp_state(local: int, remote: int) -> str | None:
    """The state of this host's TCP socket 127.0.0.1:local -> 127.0.0.1:remote, as
    /proc/net/tcp writes it (01 ESTABLISHED, 04 FIN_WAIT1, ...); None: there is none."""
    ends = (f"0100007F:{local:04X}", f"0100007F:{remote:04X}")
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == ends:
                return fields[3]
    return None


@pytest.mark.parametrize(
    "interval, write_timeout",
    [(0.02, None), (0.3, 0.5)],
    ids=["its-queue-fills", "a-write-waits-too-long"],
)
def test_a_page_that_stops_reading_is_closed(caplog, monkeypatch, interval, write_timeout):
    """A client of /events that reads nothing (a small receive buffer, never read): once
    the sockets' buffers are full, either its queue of pushes fills (MAX_QUEUED, polls every
    0.02 s) or a push waits WRITE_TIMEOUT for its socket (0.5 s, polls every 0.3 s: the
    queue would need 10 s): the server closes its end of the connection, and serves the
    next page as before."""
    if write_timeout is not None:
        monkeypatch.setattr(dashboard, "WRITE_TIMEOUT", write_timeout)
    blob = "x" * 1_000_000  # (a state that changes every poll: every poll pushes 1 MB)
    served = Served(Looks(lambda n: look(n, blob=blob)), interval=interval)
    stalled = socket.socket()
    try:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        port = int(served.base.rsplit(":", 1)[1])
        stalled.connect(("127.0.0.1", port))
        stalled.sendall(
            f"GET /events?token={served.token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        )
        mine = stalled.getsockname()[1]
        deadline = time.monotonic() + 10
        while tcp_state(port, mine) == "01":  # (ESTABLISHED: the server's end still open)
            assert time.monotonic() < deadline, "the stalled page's connection is still open"
            time.sleep(0.05)
        url = f"{served.base}/events?token={served.token}"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert events(r, lambda e, d: e == "state")[0][0] == "state"
    finally:
        stalled.close()
        served.close()
    closed = [r.getMessage() for r in caplog.records if "its connection is closed" in r.message]
    assert len(closed) == (0 if write_timeout is None else 1), closed
    assert served.token not in caplog.text


def test_the_state_asked_for_is_from_a_poll_that_started_after_the_request():
    """A request that comes while poll 2 is under way gets poll 3, not poll 2; a request
    whose poll fails gets 502 and that poll's problem."""
    under_way, finish = threading.Event(), threading.Event()

    def make(n: int) -> Look:
        if n == 2:
            under_way.set()
            finish.wait(DEADLINE)
        if n == 4:
            raise OSError("the store went away")
        return look(n)

    served = Served(Looks(make))
    asked = dashboard.ThreadPoolExecutor(2, "test-ask")
    try:
        url = f"{served.base}/api/state?token={served.token}"
        first = asked.submit(http, url)  # (wakes the poller: poll 2 starts, and waits)
        assert under_way.wait(DEADLINE)
        second = asked.submit(http, url)
        time.sleep(0.3)  # (for its handler to ask for the state while poll 2 is under way)
        finish.set()
        answers = [json.loads(f.result(DEADLINE)[1]).get("n") for f in (first, second)]
        failed = http(url)
        after = http(url)
    finally:
        finish.set()
        asked.shutdown(wait=False, cancel_futures=True)
        served.close()
    assert answers == [2, 3]
    assert failed == (502, json.dumps({"error": "poll: OSError: the store went away"}))
    assert after[0] == 200 and json.loads(after[1])["n"] == 5
