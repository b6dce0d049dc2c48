"""`pilot dashboard [SESSION] [--port N]`: a session, live in a browser, served by this process.

Serving: tornado (one process, one asyncio loop, HTTP/1.1 with no other dependency) on
127.0.0.1 only, port N (0: a free one).  The first line printed is the page's URL with a
random token, `http://127.0.0.1:N/?token=T` (secrets.token_urlsafe, new at every start, as
Jupyter does); it works through `ssh -L M:127.0.0.1:N`.  Every asset is served from
dashboard_static/ (the README there names each library, its version and licence): the page
never reaches beyond this server.

Connections: at most connection_cap() at once (half the descriptors the process may open, at
most MAX_CONNECTIONS); one beyond is answered 503 and closed, and one that sends no request
within IDLE_S is closed, so a flood of local sockets neither runs the server out of
descriptors nor holds it for long.

Who may do what: every request must carry the token, or it is answered 403 and nothing else is
done (logged on stderr, the token never: every log line of a request, tornado's own included,
gives its method and path, never its query, headers or cookies).  A GET may carry it as
`?token=`, which also sets a cookie (`pilot-dashboard-N`: HttpOnly, SameSite=Strict) for the
page's own later GETs; a POST must carry it in the X-Pilot-Token header (the page's script
sends it; a form of another site cannot, so the cookie alone commands nothing).  Requests
whose Host is not a loopback name are refused too (DNS rebinding).  A reconfig is sent to the
pilot exactly as `pilot reconfig` sends it (pilot/control_client.py: the control socket with
the session's CURVE keys, read here on the server; the browser never sees them).

    GET  /               the page (index.html; the token in a meta tag for its POSTs)
    GET  /static/NAME    its script, style sheet and uPlot (a fixed list of names)
    GET  /events         Server-Sent Events, pushed after each poll:
                           event: state    the whole picture (dashboard_data.Look.state), when
                                           it changed since the last one sent
                           event: series   the series' change ({reset, from, width, t, cols}:
                                           points from index `from` on replace the client's)
                           event: problem  a poll failed, or the push of its look:
                                           {error: "poll: ..." | "push: ..."} (logged
                                           too; the next poll tries again)
                         a new client gets the last state and the whole series first
    GET  /api/state      the state as JSON, from a poll that started after the request | 502
                         {error: that poll failed, the problem it was} | 504 {error: no poll
                         ended within STATE_TIMEOUT}
    POST /api/reconfig   {"pilot": uid, "stop": [partition uid | "all"], "start": [size],
                          "id": optional command id}; sizes as `pilot reconfig --start` takes
                          them (50%, fill, cores=2,gpus=1 ...).  200 {ok, result: {stopped,
                          started}} | 400 {error naming the field, the value and what is
                          accepted} | 409 {error: the pilot refused, its reason} | 502 {error:
                          the control socket failed, the keys could not be read or the answer
                          could not be read, naming which} | 504 {error: no answer within
                          pilot/control_client.REPLY_TIMEOUT}

Polling: dashboard_data.Watch, in one worker thread (its sqlite connection is that thread's),
every `interval` s while at least one page listens (none: no poll, no cost to the pilot), and
at once after a reconfig; each poll has a number (Hub.started), so /api/state waits for one
that started after its request, not one already under way.  A page whose queue of pushes is
full (MAX_QUEUED), or whose socket took nothing of a push for WRITE_TIMEOUT s, is stalled: it
is dropped and its connection closed (a handler stuck writing to it ends, its socket too); its
EventSource reconnects and gets the whole picture again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import re
import secrets
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zmq

from pilot.control_client import COMMAND_ID, UsageError, command, reconfig_args
from pilot.pmgr.core import sessions_dir
from pilot.pmgr.observe.dashboard_data import Look, Watch
from pilot.pmgr.observe.extras import require
from pilot.pmgr.observe.top_target import resolve
from pilot.wire.protocol import ProtocolError

log = logging.getLogger("pilot.dashboard")

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard_static")
ASSETS = {  # name -> content type: nothing else is served
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
}
LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "::1")
MAX_BODY = 64 * 1024  # bytes of a request body
MAX_CONNECTIONS = 1024  # served at once (connection_cap: fewer where descriptors are few)
IDLE_S = 20.0  # s a connection may wait for its request (tornado's default: an hour)
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 38\r\n"
    b"Connection: close\r\n\r\ntoo many connections: try again later\n"
)
MAX_QUEUED = 32  # pushes waiting for a slow client before it is dropped
STATE_TIMEOUT = 30.0  # s /api/state waits for a poll to end
WRITE_TIMEOUT = 10.0  # s a push to a page may wait for its socket before the page is dropped
START_MAX = 64  # sizes one reconfig may start (partition/control.py's START_MAX)
EACH = {  # what each item of a reconfig's lists is (their errors say it)
    "stop": "a partition uid of the pilot or 'all'",
    "start": "a size (50%, fill, cores=N,gpus=N|all, nodes=N or config=NAME)",
}
# The system's Chromium opening the page headless on a machine with no internet (the tests,
# bench/dashboard.py and examples/dashboard_demo.py): without the background-networking flags
# it keeps calling out, refused; a fresh --user-data-dir is given beside these.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class Hub:
    """The poller and the pages it pushes to (module docstring)."""

    def __init__(self, watch: Watch, pool: ThreadPoolExecutor, interval: float) -> None:
        self.watch, self.pool, self.interval = watch, pool, interval
        self.commands = ThreadPoolExecutor(1, "dashboard-command")  # reconfigs, one at a time
        self.clients: dict[asyncio.Queue, Callable[[], None]] = {}  # -> closes its connection
        self.state: dict | None = None
        self.state_text: str | None = None
        self.wake = asyncio.Event()
        self.started = self.ended = 0  # polls started, ended (the generation of each)
        self.outcome: tuple[dict | None, str | None] = (None, None)  # last ended: state, problem
        self.polled = asyncio.Condition()  # (notified as each poll ends)

    async def run(self) -> None:
        """Poll while a page listens (or a state is asked for), push what changed.  A poll,
        or the push of its look, that fails is a "problem" (logged, sent to the pages); the
        next poll tries again: only a cancel ends this loop."""
        loop = asyncio.get_running_loop()
        while True:
            if not self.clients and self.ended:  # (the first poll is made at once)
                await self.wake.wait()
            self.wake.clear()  # (a wake during the poll below makes another one at once)
            self.started += 1
            step, failed = "poll", None
            try:
                look = await loop.run_in_executor(self.pool, self.watch.poll)
                step = "push"
                self.publish(look)
            except Exception as exc:  # noqa: BLE001 (shown to the pages; the next poll tries)
                failed = self.problem(step, exc)
            async with self.polled:
                self.ended, self.outcome = self.started, (self.state, failed)
                self.polled.notify_all()
            try:
                await asyncio.wait_for(self.wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    def publish(self, look: Look) -> None:
        """Push a poll's look: both texts are made before anything is kept or sent."""
        text = json.dumps(look.state, separators=(",", ":"))
        series = json.dumps(look.series, separators=(",", ":"))
        self.state = look.state
        # (the state's own clock changes every poll: compared without it)
        same = self.state_text is not None and _without_now(text) == _without_now(self.state_text)
        self.state_text = text
        if not same:
            self.push("state", text)
        self.push("series", series)

    def problem(self, step: str, exc: Exception) -> str:
        """A poll (step "poll") or the push of its look ("push") failed: logged with its
        traceback (the hub never holds the token) and sent to the pages; returns what is
        said of it."""
        error = f"{step}: {type(exc).__name__}: {exc}"
        log.error("%s (the next poll tries again)", error, exc_info=exc)
        self.push("problem", json.dumps({"error": error}))
        return error

    def push(self, event: str, data: str) -> None:
        message = f"event: {event}\ndata: {data}\n\n"
        for q in list(self.clients):
            if q.qsize() < MAX_QUEUED:
                q.put_nowait(message)
            else:  # a stalled page: dropped (its stream ends; its EventSource reconnects)
                self.drop(q)

    def drop(self, q: asyncio.Queue) -> None:
        """End a page's stream: what waits for it is thrown away, then None, and its
        connection is closed (a page that stopped reading leaves its handler waiting in a
        write: the close ends that write, and the socket)."""
        close = self.clients.pop(q, None)
        while not q.empty():
            q.get_nowait()
        q.put_nowait(None)
        if close is not None:
            close()

    def leave(self, q: asyncio.Queue) -> None:
        """A page's stream ended by its handler: no more pushes to it."""
        self.clients.pop(q, None)

    async def subscribe(self, close: Callable[[], None]) -> asyncio.Queue:
        """A new page's queue, primed with the last state and the whole series; `close`
        closes its connection (drop)."""
        q: asyncio.Queue = asyncio.Queue()  # (bounded by push: MAX_QUEUED)
        if self.state is None:
            self.clients[q] = close  # (its first pushes are the first poll's)
            self.wake.set()
            return q
        loop = asyncio.get_running_loop()
        series = await loop.run_in_executor(self.pool, self.watch.series)
        q.put_nowait(f"event: state\ndata: {self.state_text}\n\n")
        q.put_nowait(f"event: series\ndata: {json.dumps(series, separators=(',', ':'))}\n\n")
        self.clients[q] = close
        self.wake.set()
        return q

    async def current(self) -> dict:
        """The state of a poll that started after this call (the one under way, if any,
        started before: the next one); asyncio.TimeoutError if none ended within
        STATE_TIMEOUT s, LookFailed if the one that did failed."""
        wanted = self.started + 1
        self.wake.set()
        async with self.polled:
            ended = self.polled.wait_for(lambda: self.ended >= wanted)
            await asyncio.wait_for(ended, STATE_TIMEOUT)
            state, failed = self.outcome  # (of poll `wanted` or a later one)
        if failed is not None:
            raise LookFailed(failed)
        return state or {}


class LookFailed(Exception):
    """The poll /api/state waited for failed (Hub.problem says how)."""


def _without_now(text: str) -> str:
    return re.sub(r'"now":[0-9.e+-]+,', "", text, count=1)


def make_app(hub: Hub, token: str, port: int):
    """The tornado Application: the routes of the module docstring."""
    web: Any = require("tornado.web", "dashboard")  # (a module: its classes are bases below)
    iostream = require("tornado.iostream", "dashboard")
    cookie = f"pilot-dashboard-{port}"
    page = open(os.path.join(STATIC, "index.html"), encoding="utf-8").read()
    assets = {}
    for name in ASSETS:
        with open(os.path.join(STATIC, name), "rb") as f:
            assets[name] = f.read()

    class Base(web.RequestHandler):
        def set_default_headers(self) -> None:
            for k, v in HEADERS.items():
                self.set_header(k, v)

        def prepare(self) -> None:
            host = self.request.host_name
            if host not in LOOPBACK:
                return self._refuse(f"Host {host!r} is not a loopback name")
            given = self.request.headers.get("X-Pilot-Token")
            if self.request.method == "GET":
                given = given or self.get_query_argument("token", None) or self.get_cookie(cookie)
            if not given or not hmac.compare_digest(given.encode(), token.encode()):
                return self._refuse("no token" if not given else "a wrong token")
            if self.get_query_argument("token", None):
                self.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")

        def _refuse(self, why: str) -> None:
            log.warning(
                "refused %s %s from %s: %s",
                self.request.method,
                self.request.path,
                self.request.remote_ip,
                why,
            )
            self.set_status(403)
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(
                "403: this dashboard needs the token of the URL that `pilot dashboard` printed\n"
            )

        def log_exception(self, typ, value, tb) -> None:
            """Tornado's own logs the request's URI (the token in its query) and its headers
            (the token in a cookie or X-Pilot-Token); here only the method and the path."""
            method, path = self.request.method, self.request.path
            if isinstance(value, web.HTTPError):
                if value.log_message:
                    log.warning(
                        "%d %s %s: %s", value.status_code, method, path, value.get_message()
                    )
            else:  # (a bug of ours: an internal error, with its traceback)
                log.error("internal error in %s %s", method, path, exc_info=(typ, value, tb))

        def _request_summary(self) -> str:  # (where tornado's other log lines put the URI)
            return f"{self.request.method} {self.request.path} ({self.request.remote_ip})"

        def reply(self, status: int, body: dict) -> None:
            self.set_status(status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(body))

    class Page(Base):
        def get(self) -> None:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(page.replace("{{token}}", token))

    class Asset(Base):
        def get(self, name: str) -> None:
            if name not in assets:
                raise web.HTTPError(404)
            self.set_header("Content-Type", ASSETS[name])
            self.finish(assets[name])

    class Events(Base):
        async def get(self) -> None:
            self.set_header("Content-Type", "text/event-stream")
            self.set_header("X-Accel-Buffering", "no")
            q = self.q = await hub.subscribe(self.request.connection.close)
            try:
                await self.send("retry: 2000\n\n")
                while True:
                    message = await q.get()
                    if message is None:
                        break
                    await self.send(message)
            except iostream.StreamClosedError:
                pass
            finally:
                hub.leave(q)

        async def send(self, text: str) -> None:
            """Write `text` and wait until the socket took it, at most WRITE_TIMEOUT s: a
            page that read nothing for that long is stalled, and its connection closed."""
            self.write(text)
            try:
                await asyncio.wait_for(self.flush(), WRITE_TIMEOUT)
            except asyncio.TimeoutError:
                log.warning(
                    "GET /events from %s: nothing read for %g s, its connection is closed",
                    self.request.remote_ip,
                    WRITE_TIMEOUT,
                )
                self.request.connection.close()
                raise iostream.StreamClosedError() from None

        def on_connection_close(self) -> None:
            q = getattr(self, "q", None)
            if q is not None:
                hub.drop(q)  # (its loop above ends)

    class State(Base):
        async def get(self) -> None:
            try:
                state = await hub.current()
            except asyncio.TimeoutError:
                return self.reply(504, {"error": f"no poll ended within {STATE_TIMEOUT:g} s"})
            except LookFailed as exc:
                return self.reply(502, {"error": str(exc)})
            self.reply(200, state)

    class Reconfig(Base):
        async def post(self) -> None:
            try:
                control, args, cid = self._checked()
            except ValueError as exc:
                return self.reply(400, {"error": str(exc)})
            except RecursionError:  # (a body nested past the interpreter's depth)
                return self.reply(400, {"error": "body: nested too deeply"})
            pilot, loop = control["pilot"], asyncio.get_running_loop()
            try:
                reply = await loop.run_in_executor(
                    hub.commands, command, control, "reconfig", args, cid
                )
            except TimeoutError as exc:  # (NoAnswer: the pilot did not answer in time)
                return self.reply(504, {"error": str(exc)})
            except UsageError as exc:  # (the session's keys could not be read)
                return self.reply(502, {"error": str(exc)})
            except zmq.ZMQError as exc:
                error = f"{pilot}: its control socket {control.get('endpoint')!r} failed: {exc}"
                return self.reply(502, {"error": error})
            except ProtocolError as exc:
                return self.reply(502, {"error": f"{pilot}: its answer could not be read: {exc}"})
            hub.wake.set()
            if not isinstance(reply, dict):
                error = f"{pilot}: its answer, a {type(reply).__name__}, is not a reply {{ok, ...}}"
                return self.reply(502, {"error": error})
            if not reply.get("ok"):
                return self.reply(409, {"error": f"{pilot} refused: {reply.get('error')}"})
            self.reply(200, {"ok": True, "result": reply.get("result")})

        def _checked(self) -> tuple[dict, dict, str]:
            """The pilot's control record, the reconfig op's args and the command id, each
            field checked (a ValueError names the field, the value and what is accepted)."""
            try:
                body = json.loads(self.request.body or b"null")
            except (ValueError, RecursionError):  # (nested past the interpreter's depth too)
                raise ValueError("body: must be a JSON object {pilot, stop, start}") from None
            if not isinstance(body, dict):
                raise ValueError(f"body: {type(body).__name__} must be a JSON object")
            unknown = set(body) - {"pilot", "stop", "start", "id"}
            if unknown:
                raise ValueError(
                    f"{sorted(unknown)}: unknown field(s); accepted: pilot, stop, start, id"
                )
            pilot = body.get("pilot")
            running = sorted(hub.watch.controls)
            control = hub.watch.control(pilot) if isinstance(pilot, str) else None
            if control is None:
                raise ValueError(
                    f"pilot: {pilot!r} is not a running pilot of session "
                    f"{hub.watch.session}; running: {running}"
                )
            stop, start = body.get("stop"), body.get("start")  # (absent or null: none)
            stop, start = [] if stop is None else stop, [] if start is None else start
            for name, value in (("stop", stop), ("start", start)):
                if not isinstance(value, list):
                    raise ValueError(f"{name}: {value!r} must be a list, each {EACH[name]}")
                for i, v in enumerate(value):
                    if not isinstance(v, str):
                        raise ValueError(f"{name}[{i}]: {v!r} must be a string, {EACH[name]}")
            if len(start) > START_MAX:
                raise ValueError(f"start: {len(start)} sizes; at most {START_MAX}")
            known = [
                p["uid"]
                for one in (hub.state or {}).get("pilots", [])
                if one["uid"] == pilot
                for p in one["partitions"]
            ]
            for i, uid in enumerate(stop):
                if uid.lower() != "all" and uid not in known:
                    raise ValueError(
                        f"stop[{i}]: {uid!r} is not a partition of {pilot}; "
                        f"accepted: one of {known} or 'all'"
                    )
            if not stop and not start:
                raise ValueError("stop, start: give a partition to stop and/or a size to start")
            args = reconfig_args(stop, start, field="start")
            cid = body.get("id")
            if cid is not None and (not isinstance(cid, str) or not COMMAND_ID.match(cid)):
                raise ValueError(f"id: {cid!r} must be 1-64 of A-Z a-z 0-9 . _ : -")
            return control, args, cid or f"dashboard.{os.getpid()}.{secrets.token_hex(4)}"

    return web.Application(
        [
            (r"/", Page),
            (r"/static/([A-Za-z0-9._-]+)", Asset),
            (r"/events", Events),
            (r"/api/state", State),
            (r"/api/reconfig", Reconfig),
        ],
        compress_response=False,
        log_function=_log_request,
    )


def _log_request(handler) -> None:
    """Errors only, and never the query (it may hold the token); refusals say why above."""
    status = handler.get_status()
    if status >= 500 or (status >= 400 and status != 403):
        log.warning("%d %s %s", status, handler.request.method, handler.request.path)


def session_of(name: str | None, database_url: str | None = None) -> str:
    """The session `name` points at: a session's name (its directory, or any name with a
    database URL), else the session of the running pilot it names (top_target.resolve:
    PILOT, SESSION/PILOT; none: the newest running pilot)."""
    if name and "/" not in name:
        if database_url or os.environ.get("PILOT_DATABASE_URL"):
            return name
        if os.path.isdir(os.path.join(sessions_dir(), name)):
            return name
    return resolve(name, database_url).session


def run(
    session: str,
    port: int = 0,
    interval: float = 1.0,
    database_url: str | None = None,
    out=None,
) -> int:
    """Serve the dashboard of `session` until SIGINT or SIGTERM; prints the URL first."""
    require("tornado", "dashboard")
    if not interval > 0:
        raise ValueError(f"--interval {interval!r} must be > 0")
    if not 0 <= port <= 65535:
        raise ValueError(f"--port {port!r} must be 0 (any free port) to 65535")
    out = out or sys.stdout
    pool = ThreadPoolExecutor(1, "dashboard-poll")  # (the Watch's thread: its sqlite reader)
    try:
        watch = pool.submit(Watch, session, database_url, interval).result()
    except BaseException:
        pool.shutdown(wait=False)
        raise
    try:
        return asyncio.run(_until_signal(watch, pool, port, interval, out))
    finally:
        try:
            pool.submit(watch.close).result(timeout=30)  # (after a poll under way)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def connection_cap() -> int:
    """Connections served at once: half of what this process may open (its soft limit raised
    to the hard one first), at most MAX_CONNECTIONS, at least 16."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 16), hard))
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(16, min(MAX_CONNECTIONS, soft // 2))


async def _until_signal(watch: Watch, pool, port: int, interval: float, out) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await serve(watch, pool, port, interval, out, stop)


async def serve(
    watch: Watch, pool: ThreadPoolExecutor, port: int, interval: float, out, stop: asyncio.Event
) -> int:
    """Serve `watch` (polled in `pool`, its thread) on 127.0.0.1:`port` until `stop` is set;
    prints the URL on `out` first.  The poller is awaited with it: its loop outlives every
    failed poll, so its end is a bug, raised here with its traceback, never left unseen."""
    netutil = require("tornado.netutil", "dashboard")
    httpserver = require("tornado.httpserver", "dashboard")
    sockets = netutil.bind_sockets(port, address="127.0.0.1")
    port = sockets[0].getsockname()[1]
    token = secrets.token_urlsafe(24)
    hub = Hub(watch, pool, interval)
    cap = connection_cap()

    class Server(httpserver.HTTPServer):  # type: ignore[name-defined]  # (loaded by require)
        def handle_stream(self, stream, address) -> None:
            if len(self._connections) >= cap:  # (answered and closed at once: a flood of
                # local sockets does not run the process out of descriptors, where tornado's
                # accept would spin and log; idle ones go after IDLE_S)
                done = stream.write(BUSY)
                done.add_done_callback(lambda _: stream.close())
                return
            super().handle_stream(stream, address)

    server = Server(
        make_app(hub, token, port), max_body_size=MAX_BODY, idle_connection_timeout=IDLE_S
    )
    server.add_sockets(sockets)
    print(f"http://127.0.0.1:{port}/?token={token}", file=out, flush=True)
    print(
        f"pilot dashboard: session {watch.session}; Ctrl-C stops (over SSH: "
        f"ssh -L {port}:127.0.0.1:{port} HOST, then open the URL here)",
        file=sys.stderr,
        flush=True,
    )
    poller = asyncio.create_task(hub.run(), name="dashboard-poller")
    stopped = asyncio.create_task(stop.wait(), name="dashboard-stop")
    try:
        await asyncio.wait({poller, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.stop()
        for q in list(hub.clients):
            hub.drop(q)
        poller.cancel()
        stopped.cancel()
        hub.commands.shutdown(wait=False, cancel_futures=True)
        await asyncio.sleep(0)
        await server.close_all_connections()
        with contextlib.suppress(asyncio.CancelledError):
            await poller  # (raises what ended it, if not the cancel above)
    return 0
