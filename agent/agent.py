"""The agent's event loop: one process, one zmq poller, no threads.

Bring-up: read the config file given on the command line, connect a DEALER (identity = partition
uid) to the bootstrap's agent endpoint, send `ready`.  Then loop:
    units   -> check each unit can ever fit (FAILED at once if not), queue it (QUEUED), start what
               fits (EXECUTING)
    cancel  -> queued units CANCELED at once; running ones get SIGTERM, SIGKILL after kill_grace
    stop    -> like cancel for everything (or hand queued units back), then `bye` and exit
               (agent/stopping.py)
    exits   -> (a child's pidfd, a lane thread's news, SIGCHLD where there are no pidfds) reap
               them (DONE, or FAILED with the exit code / signal), start what now fits
Units are run by the partition's runner (agent/runners/): the agent itself on one node, or,
for multi-node partitions (node dicts carry a daemon `endpoint`), the node daemons, whose exits
arrive as `events` and whose output is forwarded to the client as `output` [[uid, node, rank,
stream, text], ...]; `node_lost` {index, reason} ends the units on that node FAILED with it.
Placement is work-conserving: the scheduler (agent/scheduler.py) starts every queued unit that
fits, oldest first; a runner may hold units from the head of the queue ahead, to start them
itself on the first freed slot that fits (the local runner's lanes), and gives them
back whenever an allocation is freed that it will not use, or on a cancel or a stop.
Every unit state this agent reports is a move the unit state machine allows (pilot/states.py
UNIT_MACHINE; units arrive SCHEDULING): an illegal one raises.
Start journal: before a unit is started, its uid is appended to PILOT_SANDBOX/<partition>.started
(one write for a few units, not buffered; synced first on a shared file system:
pilot/wire/journal.py).  If this agent dies, the bootstrap reads it: a unit in the journal may
have run and is never started again; one not in it never ran and goes elsewhere.
Function units (a `function` instead of an executable) are placed the same way and called by
the runner's persistent workers (agent/runners/functions.py); their final state carries the
return value.
State updates are collected and sent in batches: at most every FLUSH_EVERY seconds, or at once
when FLUSH_SIZE updates are waiting or the partition has gone idle (nothing queued or running:
nothing else is coming that they could wait for): agent/reports.py.  Every wait is bounded: the
loop wakes at least once a second and tears down when its parent bootstrap is gone.
The Agent holds its parts, each given the collaborators it uses: `reports` (agent/reports.py:
what it says about its units) and `stops` (agent/stopping.py: cancel, stop, its last words);
this module has bring-up, units in, started and ended, and the loop.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time

import zmq

from pilot import validate
from pilot.agent import runners
from pilot.agent.rank_env import check_environment
from pilot.agent.reports import FLUSH_EVERY, Reports
from pilot.agent.scheduler import Scheduler
from pilot.agent.stopping import Stops
from pilot.states import CANCELED, EXECUTING, FAILED, QUEUED
from pilot.unit_record import Calls, UnitRecord
from pilot.wire import checks, links, security
from pilot.wire.journal import StartJournal
from pilot.wire.protocol import ProtocolError, drain, msg, wait_ms

SERVE_EVERY = 8  # units of an arriving batch between looks at the running ones
# units placed, journaled in one write, then started: a write a unit cost the agent a quarter
# of its time with zero-launch units (one syscall each); more at once would hold the first
# start back behind the others' placement
JOURNAL_BATCH = 32
log = logging.getLogger("agent")


class Agent:
    """One partition's agent (the module's header)."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.uid = cfg["uid"]
        self.sched = Scheduler(cfg["nodes"], agent_node=cfg.get("agent_node", 0))
        self.ctx: zmq.Context = zmq.Context.instance()
        slots = sum(len(n.get("cores") or ()) for n in cfg["nodes"])
        _enough_fds(slots)
        self.journal = StartJournal(
            cfg["pilot_sandbox"], self.uid, cfg.get("journal_sync") or "auto"
        )
        # (a journal that must be synced is written by this loop alone: no lanes, which
        # write it on their own, unsynced)
        lanes_journal = -1 if self.journal.sync else self.journal.fd
        self.runner, self.stager = runners.for_partition(cfg, self.ctx, lanes_journal)
        self.bad_messages = checks.BadMessages(log)
        self.internal = checks.InternalErrors(log)
        self.boot_seen = 0.0  # when the bootstrap was last seen alive (start_ready)
        self.nodes_lost: set[int] = set()  # node indices lost: nothing more is placed there
        self.ppid = os.getppid()
        self.last_load: list = []  # (every_second: its nodes' load as last said)
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, self.uid.encode())
        self.sock.setsockopt(zmq.LINGER, 2000)
        keys = security.load(cfg.get("curve"))
        if keys is not None:  # the bootstrap's agent channel listens beyond loopback
            keys.client(self.sock)
        self.sock.connect(cfg["endpoint"])
        # its parts, each given what it uses: what it says of its units, how it ends them
        self.reports = Reports(self.uid, self.sock, self.runner, self.stager, cfg["pilot_sandbox"])
        self.stops = Stops(
            self.uid,
            self.sock,
            self.sched,
            self.runner,
            self.stager,
            self.reports,
            self.take_back,
            float(cfg.get("kill_grace", 2.0)),
        )
        self.poller: zmq.Poller | None = None  # (run's)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        # a child's exit wakes the loop through its pidfd (agent/runners/local.py), so SIGCHLD
        # is left at its default (ignored; nothing is reaped by it): a handler made every unit
        # a lane thread started wake this thread as it exited (measured: 0.6 signals a
        # unit, each an interrupted poll, a handler and a wake-up byte: 6-14 us a unit)
        chld = self.runner.sigchld
        signal.signal(signal.SIGCHLD, (lambda *_: None) if chld else signal.SIG_DFL)
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_term)

    def _on_term(self, signum, _frame) -> None:
        self.stops.stop(f"agent received {signal.Signals(signum).name}", hand_back=False)

    def idle(self) -> bool:
        """Nothing is queued or running here (the last updates need not wait for others)."""
        return not self.sched.queue and not self.runner.runs()

    # -- units --------------------------------------------------------------------------------
    def on_units(self, units: list) -> None:
        """A `units` message: records, or bulks of units that share their fields (checked and
        judged once a bulk: pilot/unit_record.py); each unit QUEUED, or FAILED at once with
        the reason it can never run here; then what fits starts."""
        found: dict = {}  # (program, PATH) -> where it is: looked up once per batch
        n = 0
        for data in validate.items("units", units):
            bulk = isinstance(data, dict) and "uids" in data
            each = None  # (a bulk's units' own arguments or calls, aligned with its uids)
            if bulk:
                first, uids, malformed, each = UnitRecord.arrived_bulk(data)
            else:
                first, malformed = UnitRecord.arrived(data)
                uids = [first["uid"]] if first is not None else []
            if not uids:
                log.error("%s: %s dropped", self.uid, malformed)
                continue
            if first is None:  # (a bulk whose template is not even a mapping)
                for uid in uids:
                    self.reports.update(uid, FAILED, {"reason": f"malformed unit: {malformed}"})
                continue
            reason = malformed and f"malformed unit: {malformed}"
            if reason is None:
                reason = self._never_runs(first, found)
            for i, uid in enumerate(uids):
                n += 1
                if n % SERVE_EVERY == 0:
                    try:  # a large batch must not leave cores idle meanwhile
                        self.serve_running()
                    except Exception:  # (nothing of the running units may cost this batch)
                        log.exception("%s: serving running units failed", self.uid)
                if i == 0 and each is None:
                    self._arrived(first, reason)
                    continue
                if type(each) is Calls:  # (each unit's own call)
                    rec, bad = first.with_call(uid, each[i])
                else:
                    rec, bad = first.copy_for(uid, False if each is None else each[i])
                self._arrived(rec, reason or (bad and f"malformed unit: {bad}"))
        if self.sched.unsorted:  # a higher priority came: what lanes hold ahead goes back first
            self.take_back()
            self.sched.reorder()
        if self.stops.stopping:
            self.stops.release_late()
        self.start_ready()

    def _never_runs(self, u: UnitRecord, found: dict) -> str | None:
        """Why a (well-formed) unit can never run in this partition, or None (then `u` may
        be marked not_found: its shell says so).  The same for every unit of a bulk."""
        try:
            reason = self.sched.check(u)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            reason = f"malformed unit: {exc}"
        if u.get("function"):
            if reason is None and not self.runner.runs_functions:
                reason = (
                    "function units run on single-node partitions; this one spans "
                    f"{len(self.cfg['nodes'])} nodes"
                )
        elif reason is None and self._which(found, u["executable"], u.path) is None:
            if u.get("shell") is False:
                reason = f"executable={u['executable']!r} not found on PATH"
            else:  # as under RP: the shell says so on its stderr and exits 127
                u.not_found = True
        if reason is None:
            reason = check_environment(u.get("environment"), self.sched.pool.types)
        return reason

    def _arrived(self, u: UnitRecord, reason: str | None) -> None:
        """One unit of a `units` message, its fate judged (`reason`: why it can never run)."""
        uid = u["uid"]
        if uid in self.reports.known:  # sent again: it is here already, or has run: never twice
            log.warning("%s: unit %s arrived again; its updates said again", self.uid, uid)
            self.reports.say_again(uid)
            return
        if uid in self.reports.ended:
            log.warning("%s: unit %s arrived again after its end: not run twice", self.uid, uid)
            return
        if reason is not None and reason.startswith("malformed unit"):
            self.reports.update(uid, FAILED, {"reason": reason})
            return
        if self.stops.canceled_early:
            early = self.stops.canceled_early.pop(uid, None)
            if early is not None:
                self.reports.update(uid, CANCELED, {"reason": early})
                return
        if self.stops.stopping:
            self.stops.late.append(u)
            return
        if reason is not None:
            self.reports.update(uid, FAILED, {"reason": reason})
            return
        self.reports.update(uid, QUEUED)
        self.sched.enqueue(u)
        if not u.get("function"):  # a call runs in a worker's directory
            self.stager.submit(u)

    def _which(self, found: dict, executable: str, search: str | None) -> str | None:
        key = (executable, search)
        where = found.get(key, found)
        if where is found:
            where = found[key] = self.runner.which(executable, search)
        return where

    def serve_running(self) -> None:
        """What running units said (output, a function's reply) and which ended, without
        waiting; their cores go to queued units."""
        if self.poller is None:
            return
        for key, _ in self.poller.poll(0):
            if key is not self.sock and key is not self.wake_r and key != self.wake_r.fileno():
                try:
                    self.runner.on_readable(key)
                except ProtocolError as exc:
                    log.error("%s: %s", self.uid, exc)
        self.on_exits()

    def start_ready(self) -> None:
        if self.stops.stopping:
            return
        now = time.monotonic()  # (asked at most every 50 ms: a stop or a freeze of this agent
        if now - self.boot_seen > 0.05:  # counts in the monotonic clock, so a woken agent asks)
            if self.bootstrap_gone():
                return
            self.boot_seen = now
        ready = self.sched.ready()
        while True:  # a few at a time: journaled in one write, then started
            batch = list(itertools.islice(ready, JOURNAL_BATCH))
            if not batch:
                self.runner.flush()  # (the daemon runner's: one exec per node)
                return
            try:
                # journaled before they can start (a failure after this only errs on the
                # safe side: a unit in the journal is never started again)
                self.journal.append([u["uid"] for u, _ in batch])
                journaled = None
            except OSError as exc:
                journaled = exc
            for unit, alloc in batch:
                self._start(unit, alloc, journaled)

    def _start(self, unit, alloc, journaled: OSError | None) -> None:
        """(start_ready) One unit placed and journaled (unless `journaled` says why not)."""
        try:
            if journaled is not None:
                raise journaled
            # (a call runs in its worker's directory: the runner's)
            sandbox = None if unit.get("function") else self.stager.take(unit)
            run = self.runner.spawn(unit, sandbox, alloc)
        except (OSError, ValueError) as exc:  # ValueError: what posix_spawn cannot pass
            self.sched.release(alloc)
            self.reports.update(unit["uid"], FAILED, {"reason": f"cannot start: {exc}"})
            return
        slots = [{t: [i for i, _ in got] for t, got in grant.items()} for _, grant in alloc.ranks]
        nodes = run.nodes
        self.reports.update(
            unit["uid"],
            EXECUTING,
            {
                "node": nodes[0] if len(nodes) == 1 else nodes,
                "slots": slots[0] if len(slots) == 1 else slots,
            },
            run.started_at,  # (a lane's: before the thread can have reaped it)
        )

    def on_exits(self) -> None:
        ended = []
        freed = []
        for r, code in self.runner.reap():
            if not r.handed_on:  # (else the next unit in its lane holds it now)
                self.sched.release(r.alloc)
                freed.append(r)
            ended.append((r, code))
        self.runner_started()
        # what the runner holds ahead comes first for what was freed
        back = self.take_back(freed) if freed else ()
        if not ended:
            self.start_ready()
            self.settle(back)
            self.hold_ahead()
            return
        ended_at = time.time()  # (before anything starts on their cores)
        try:
            self.start_ready()  # their cores first (idle until then); their reports can wait
        finally:  # (reaped: nothing else would ever report them)
            for r, code in ended:
                self.reports.report_end(r, code, r.ended_at or ended_at)
        self.settle(back)
        self.hold_ahead()

    def take_back(self, freed: list | None = None) -> list:
        """Units the runner holds ahead go back to the head of the queue, in order: all of
        them, or those the allocations of the Runs `freed` may be for (UnitRunner)."""
        back = self.runner.give_back(freed)
        if back:
            self.sched.queue.extendleft(reversed(back))
        return back

    def settle(self, back) -> None:
        """A unit taken back for a freed allocation that did not start waits at the head of
        the queue: what the runner still holds comes back behind it (the order holds)."""
        q = self.sched.queue
        if not (back and q and any(q[0] is u for u in back)):
            return
        rest = self.runner.give_back()
        lead = []
        while q and any(q[0] is u for u in back):
            lead.append(q.popleft())
        q.extendleft(reversed(lead + rest))

    def runner_started(self) -> None:
        """Units the runner started on its own since (or could not): EXECUTING at its time;
        one that started while a cancel or stop took the others back goes the way they went."""
        for r in self.runner.started():
            uid = r.unit["uid"]
            if r.start_errno:
                why = f"cannot start: {os.strerror(r.start_errno)}"
                self.reports.update(uid, FAILED, {"reason": why})
                continue
            node, grant = r.alloc.ranks[0]
            slots = {t: [i for i, _ in got] for t, got in grant.items()}
            self.reports.update(uid, EXECUTING, {"node": node.name, "slots": slots}, r.started_at)
            reason = self.stops.canceled_early.pop(uid, None)
            if reason is None and self.stops.stopping:
                reason = self.stops.stopping["reason"]
            if reason is not None:
                self.stops.terminate(r, reason)

    def hold_ahead(self) -> None:
        """Let the runner hold units from the head of the queue ahead (lanes)."""
        if not self.sched.queue or self.stops.stopping:
            return
        for unit, reason in self.runner.hold_ahead(self.sched.queue, self.stager.take):
            self.reports.update(unit["uid"], FAILED, {"reason": reason})

    # -- loop ---------------------------------------------------------------------------------
    def handle(self, frames: list[bytes]) -> None:
        """A message from the bootstrap, to its handler by pilot/wire/links.py's table
        (FROM_BOOTSTRAP); its body's shape is checked first: a bad message is reported and
        dropped, a handler's exception is our own bug (reported with its traceback), and the agent
        goes on."""
        kind = frames[0]
        try:  # (the body's shape is checked before anything acts on it: pilot/wire/messages.py)
            handler, _, body = FROM_BOOTSTRAP.read(
                kind,
                frames[1] if len(frames) > 1 else None,
                frames[2:] if kind == b"units" else (),  # (a call's large arguments)
            )
        except validate.Invalid as exc:
            self.bad_messages.report(f"bad message {kind[:16]!r}: {exc}")
            return
        try:
            handler(self, body)
        except validate.Invalid as exc:  # (a unit's own check, deeper down)
            self.bad_messages.report(f"bad message {kind[:16]!r}: {exc}")
        except Exception as exc:  # our own bug: said as such, and the agent goes on
            self.internal.report(f"agent {kind[:16]!r} handler", exc)

    def on_cancel(self, body: dict) -> None:
        self.stops.cancel(body["uids"], body.get("reason") or "canceled")

    def on_sync(self, body: dict) -> None:
        self.reports.sync(body.get("cid"), body["uids"])

    def on_node_lost(self, body: dict) -> None:
        """A node of this partition is lost: its units end FAILED with the reason, nothing
        more is placed there, and the partition goes on with the rest of its nodes (the
        bootstrap stops it instead when it was the agent's node or the last one); a queued
        unit that no longer fits any node left ends FAILED, naming what is left.  With no
        node left, queued units wait for the stop that follows: it hands them back, to go to
        other partitions (they failed here: "every node of this partition is lost")."""
        index = int(body["index"])
        reason = body.get("reason") or "node lost"
        self.nodes_lost.add(index)
        self.sched.pool.remove_node(index, reason)
        self.runner.node_lost(index, reason)
        self.on_exits()
        if not self.sched.pool.live_nodes():  # (the bootstrap stops it now, handing back)
            return
        q = self.sched.queue
        misfits = [(u, why) for u in q if (why := self.sched.check(u)) is not None]
        if misfits:
            gone = {id(u) for u, _ in misfits}
            kept = [u for u in q if id(u) not in gone]
            q.clear()
            q.extend(kept)
            for u, why in misfits:
                self.reports.update(u["uid"], FAILED, {"reason": f"{reason}; now {why}"})
        self.start_ready()

    def on_data(self, body: dict) -> None:
        """The owning client's data directory changed (a new client attached): the runner's
        function workers write large values there if this agent sees it, else send bytes."""
        self.runner.set_data(body.get("data"))

    def on_give_back(self, body: dict) -> None:
        self.stops.give_back(body["uids"])

    def on_stop(self, body: dict) -> None:
        self.stops.stop(body.get("reason") or "partition stopped", body.get("units") == "back")

    def bring_up(self) -> zmq.Poller:
        """Say `ready`; the poller of the loop: the bootstrap's socket, the wake-up socket and
        what the runner must hear."""
        self.sock.send_multipart(
            msg(
                b"ready",
                {
                    "pid": os.getpid(),
                    "runner": self.runner.describe(),
                    "data": self.runner.shares_data,
                },
            )
        )
        self.poller = poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.wake_r, zmq.POLLIN)
        self.runner.watch(poller)  # node daemons' sockets, units' output pipes, lanes
        return poller

    def run(self) -> int:
        poller = self.bring_up()
        wake = self.wake_r.fileno()
        next_ppid_check = time.monotonic() + 1.0
        while True:
            now = time.monotonic()
            timeout = next_ppid_check - now
            if self.stops.timers:
                timeout = min(timeout, self.stops.timers[0][0] - now)
            if self.reports.updates:
                timeout = min(timeout, self.reports.first_pending + FLUSH_EVERY - now)
            sweep_at = self.runner.due()
            if sweep_at is not None:
                timeout = min(timeout, sweep_at - now)
            events = poller.poll(wait_ms(timeout))
            for key, _ in events:
                if key is self.sock:
                    continue
                if key is self.wake_r or key == wake:
                    try:
                        self.wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                    continue
                try:
                    self.runner.on_readable(key)
                except ProtocolError as exc:
                    log.error("%s: %s", self.uid, exc)
            if any(key is self.sock for key, _ in events):  # the bootstrap's word first: a
                for frames in drain(self.sock, 100):  # stop or a node lost that came while
                    self.handle(frames)  # this agent was away goes before any start
            self.on_exits()
            now = time.monotonic()
            if sweep_at is not None and now >= sweep_at:
                self.runner.sweep(now)  # (output of lane units: read, not polled)
            if self.stops.timers and self.stops.timers[0][0] <= now:
                self.stops.kill_late(now)
            if now >= next_ppid_check:
                next_ppid_check = now + 1.0
                self.every_second(now)
            if self.stops.stopping and (not self.runner.runs() or self.stops.stop_overdue(now)):
                return self.stops.finish()
            self.reports.flush(force=bool(self.reports.updates) and self.idle())

    def every_second(self, now: float) -> None:
        """The stager's tick; its nodes' load said when it changed (`load`); a stop when the
        bootstrap that started this agent is gone."""
        self.stager.tick(now)
        load = self.sched.pool.load()
        if load != self.last_load:
            self.last_load = load
            try:
                self.sock.send_multipart(msg(b"load", {"nodes": load}), zmq.NOBLOCK)
            except zmq.Again:
                pass  # (the bootstrap is not reading: the next second says it again)
        self.bootstrap_gone()

    def bootstrap_gone(self) -> bool:
        """Whether the bootstrap that started this agent is gone (then the agent stops: it
        starts nothing more).  Asked every second and before units start: a unit must not
        start once the client may have recorded the pilot lost (the fault campaign, seed 200:
        an agent whose zygote outlived a killed bootstrap started a unit 9 s later).  The
        bootstrap's own pid where the agent runs on its host (`adopted_by`: a process gone,
        or a zombie, is gone), else a change of parent."""
        boot = self.cfg.get("adopted_by")
        if os.getppid() == boot:  # its zygote died, not the
            self.ppid = os.getppid()  # bootstrap: that adopted it, and it goes on
        if os.getppid() != self.ppid or (boot is not None and not _alive(int(boot))):
            self.stops.stop("the pilot's bootstrap is gone", hand_back=False)
            return True
        return False


def _alive(pid: int) -> bool:
    """Whether process `pid` (on this host) runs: not gone, not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        try:  # (no /proc: a zombie passes for alive)
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


# what an agent receives on the agent link (pilot/wire/links.py), by kind: handler(agent, body)
FROM_BOOTSTRAP = links.Dispatch(
    "agent",
    "agent",
    {
        b"units": Agent.on_units,
        b"cancel": Agent.on_cancel,
        b"sync": Agent.on_sync,
        b"node_lost": Agent.on_node_lost,
        b"stop": Agent.on_stop,
        b"give_back": Agent.on_give_back,
        b"data": Agent.on_data,
    },
)


def _enough_fds(slots: int) -> None:
    """Every running unit holds two pipes here: raise the soft open-files limit when a big
    partition needs it (small ones leave the limit their units inherit as it was)."""
    need = 4 * slots + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pilot.agent CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        cfg = json.load(f)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    agent = Agent(cfg)
    log.info(
        "%s: up, pid %d, %d node(s), %s; %s",
        agent.uid,
        os.getpid(),
        len(cfg["nodes"]),
        agent.runner.describe(),
        agent.journal.describe(),
    )
    try:
        return agent.run()
    finally:  # bounded: with the bootstrap gone, term() may wait forever for its peer
        agent.sock.close(linger=500)
        ender = threading.Thread(target=agent.ctx.term, name="agent-term", daemon=True)
        ender.start()
        ender.join(1.5)
