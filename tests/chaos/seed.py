"""One seed of the campaign, run: its clients, its faults at their times, its checks.

    result = SeedRun(plan, base, mongo_url=..., cluster=...).run()

Steps (each with a deadline; `plan.budget` s in all from the first client's start, beyond
which the seed is a `hang` violation and everything of it is ended):
    prepare   the work directory WORK: truth.log, the file units stage in, out/, sandboxes/
              and store/ (small tmpfs mounts when the plan fills them)
    client    the first client (python -m tests.chaos.client) makes the session and the pilot;
              its `ready` line starts the plan's clock (T0)
    faults    each at T0 + at: a victim found (tests/chaos/inject.py) and hit; holds (a
              stop's SIGCONT, a link mended, a disk freed, a grown job ended) come due later;
              a client killed is followed at once by another that attaches
    finish    after the last fault's hold and the last wave's time: the current client
              submits what is left, mends the partitions, waits for every unit, closes
    check     tests/chaos/checker.py over the store, the journals and the log; then the
              session's processes (none may be left after 30 s) and batch jobs (none)
    cleanup   every hold undone, processes of the session ended by pid, tmpfs unmounted
What happened is logged to WORK/chaos.log, one line per event; the clients' stderr is
WORK/clients.log.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import select
import shutil
import signal
import sys
import time
import traceback
from collections import Counter

from pilot.pmgr.core import reaper
from tests.chaos import checker, inject, workload
from tests.chaos.client_proc import Client
from tests.chaos.schedule import Fault, Schedule
from tests.chaos.striking import DEPOSED_WAIT, Striking

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READY_WAIT = 150.0  # s for a client to get ready (the first: its pilot's partitions up)
LEFT_WAIT = 30.0  # s for the session's processes to end after the last client closed
COMPLETING_WAIT = 120.0  # s more for SLURM to end a job none of whose processes is left


class SeedRun(Striking):
    def __init__(self, plan: Schedule, base: str, mongo_url: str | None = None, cluster=None):
        self.plan = plan
        self.work = os.path.join(base, f"seed-{plan.seed}")
        self.mongo_url, self.cluster = mongo_url, cluster
        self.clients: list[Client] = []
        self.session: str | None = None
        self.t0: float | None = None  # epoch of the plan's clock
        self.mono0: float | None = None
        self.status: dict = {}
        self.actions: list = []  # heap of (monotonic time, seq, what, callable)
        self.seq = itertools.count()
        self.undo: dict[int, tuple[str, object]] = {}  # holds not yet undone
        self.injected: Counter = Counter()
        self.skipped: list[str] = []
        self.notes: list[str] = []
        self.violations: list[checker.Violation] = []
        self.disks: dict[str, inject.SmallDisk] = {}
        self.finishing = False
        self.finish_tries = 0
        self.grow_fault: Fault | None = None
        self.cut_links: set[int] = set()  # compute nodes whose link is cut now
        self.hung = False  # a hang: the pilots are ended as their batch system would
        self.grow_asked: float | None = None

    # -- the log ---------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        t = time.monotonic() - self.mono0 if self.mono0 is not None else -1.0
        with open(os.path.join(self.work, "chaos.log"), "a") as f:
            f.write(f"{t:8.2f} {text}\n")

    def violation(self, what: str, rule: str, evidence: str) -> None:
        self.hung = self.hung or rule == "hang"
        self.violations.append(checker.Violation(what, rule, evidence))
        self.log(f"VIOLATION {what}: {rule}: {evidence}")

    # -- set-up ----------------------------------------------------------------------------------
    def prepare(self) -> None:
        os.makedirs(os.path.join(self.work, workload.OUT), exist_ok=True)
        for name in ("sessions", "store", "sandboxes"):
            os.makedirs(os.path.join(self.work, name), exist_ok=True)
        with open(os.path.join(self.work, "plan.json"), "w") as f:
            f.write(self.plan.to_json())
        with open(os.path.join(self.work, "plan.txt"), "w") as f:
            f.write(str(self.plan) + "\n")
        workload.write_script(self.work)
        with open(os.path.join(self.work, workload.STAGED_IN), "w") as f:
            f.write(f"staged in for seed {self.plan.seed}\n")
        kinds = set(self.plan.kinds)
        for kind, name in (("full_store_disk", "store"), ("full_sandbox_disk", "sandboxes")):
            if kind in kinds:
                disk = inject.SmallDisk(os.path.join(self.work, name))
                disk.mount()
                self.disks[kind] = disk
        if self.plan.store == "mongodb":
            from tests.mongo_server import with_database

            self.url = with_database(self.mongo_url, f"chaos_{self.plan.seed}_{os.getpid()}")
        else:
            self.url = f"sqlite:///{os.path.join(self.work, 'store', 'state.db')}"
        self.env = dict(
            os.environ,
            PYTHONPATH=ROOT,
            PILOT_DATABASE_URL=self.url,
            PILOT_SESSIONS_DIR=os.path.join(self.work, "sessions"),
        )
        if self.cluster is not None:
            self.env = self.cluster.client_env(self.env)
            self.cluster.resource(os.path.join(self.work, "slurm.yaml"))

    def start_client(self, role: str, take_over: bool = False) -> Client:
        argv = [sys.executable, "-m", "tests.chaos.client"]
        argv += [os.path.join(self.work, "plan.json"), self.work]
        if role != "first":
            argv += ["--attach", self.session, "--t0", repr(self.t0)]
            argv += ["--take-over"] if take_over else []
        if self.cluster is not None:
            argv = self.cluster.wrap(argv)
        with open(os.path.join(self.work, "clients.log"), "ab") as errors:
            errors.write(f"--- client #{len(self.clients)} ({role})\n".encode())
            errors.flush()
            c = Client(argv, self.env, self.work, errors, role)
        self.clients.append(c)
        self.log(f"client #{c.n} started ({role}), pid {c.pid}")
        return c

    @property
    def current(self) -> Client | None:
        """The newest client not deposed and alive."""
        for c in reversed(self.clients):
            if c.alive() and not c.released and c.deposed_at is None:
                return c
        return None

    # -- events ---------------------------------------------------------------------------------
    def on_event(self, c: Client, ev: dict) -> None:
        kind = ev.get("ev")
        if kind == "status":
            self.status = ev
            return
        self.log(f"client #{c.n}: {json.dumps(ev, default=str)[:600]}")
        if kind == "ready":
            c.ready = True
            self.session = self.session or ev["session"]
            if self.t0 is None:
                self.t0 = ev["t0"]
                self.mono0 = time.monotonic() - (time.time() - self.t0)
                for f in self.plan.faults:
                    self.at(self.mono0 + f.at, f.kind, lambda f=f: self.inject(f))
        elif kind == "released":
            c.released = True
        elif kind == "finished":
            c.finished = ev
        elif kind == "error":
            c.errors.append(ev.get("what", ""))
        elif kind == "grown":
            self.on_grown(ev)

    def at(self, when: float, what: str, fn) -> None:
        heapq.heappush(self.actions, (when, next(self.seq), what, fn))

    def pump(self, timeout: float) -> None:
        """Read what the clients say for at most `timeout` s; notice clients that ended."""
        live = [c for c in self.clients if c.proc.stdout is not None and not c.proc.stdout.closed]
        fds = {c.proc.stdout.fileno(): c for c in live}
        ready = select.select(list(fds), [], [], max(0.0, timeout))[0] if fds else []
        if not fds:
            time.sleep(max(0.0, timeout))
        for fd in ready:
            c = fds[fd]
            events = c.read()
            for ev in events:
                self.on_event(c, ev)
            if not events and not c.alive():
                self.ended(c)

    def ended(self, c: Client) -> None:
        c.reap()
        self.log(f"client #{c.n} ended, code {c.proc.returncode}")
        if c.killed or c.released or c.finished is not None:
            return
        self.violation(
            f"client #{c.n} ({c.role})", "client-crashed",
            f"exited {c.proc.returncode} on its own: {c.errors[-3:]} (WORK/clients.log)",
        )  # fmt: skip
        if self.session is not None and self.current is None:
            self.start_client("attach")

    # -- faults ---------------------------------------------------------------------------------
    # -- the seed -------------------------------------------------------------------------------
    def finish_at(self) -> float:
        """When the plan is over: every fault's hold ended, every wave's time come."""
        ends = [f.at + (f.hold or 0.0) for f in self.plan.faults]
        ends += [w.at for w in self.plan.waves]
        return self.mono0 + max(ends + [0.0]) + 2.0

    def drive(self, deadline: float) -> None:
        first = self.start_client("first")
        while self.t0 is None:
            if time.monotonic() > deadline or not first.alive() and first.proc.stdout.closed:
                self.violation("client #0", "hang", "no pilot up: no `ready` (WORK/clients.log)")
                return
            self.pump(0.5)
        finish_at = self.finish_at()
        while True:
            now = time.monotonic()
            while self.actions and self.actions[0][0] <= now:
                _, _, what, fn = heapq.heappop(self.actions)
                fn()
            for c in self.clients:
                if c.deposed_at is not None and c.alive() and now > c.deposed_at and not c.killed:
                    if inject.stopped(c.pid):
                        c.deposed_at = now + DEPOSED_WAIT
                        continue
                    self.violation(
                        f"client #{c.n}", "deposed-owner",
                        f"taken over {DEPOSED_WAIT:.0f} s ago, still running, never released",
                    )  # fmt: skip
                    c.kill()
            done = [c for c in self.clients if c.finished is not None]
            deposed = [c for c in self.clients if c.deposed_at and c.alive() and not c.killed]
            if done and not done[-1].alive() and not deposed:
                return
            growing = self.grow_asked is not None and now < self.grow_asked + 90.0
            quiet = not self.undo and not self.actions and not growing
            if now >= finish_at and quiet and not self.finishing_sent():
                self.send_finish(deadline)
            if now > deadline:
                self.violation(
                    self.session or "seed", "hang",
                    f"not finished within the budget ({self.plan.budget:.0f} s); last "
                    f"status {json.dumps(self.status)[:1500]}",
                )  # fmt: skip
                return
            wait = min([0.5] + [max(0.0, self.actions[0][0] - now)] if self.actions else [0.5])
            self.pump(wait)

    def finishing_sent(self) -> bool:
        c = self.current
        return self.finishing and c is not None and c.asked_to_finish

    def send_finish(self, deadline: float) -> None:
        if any(c.finished is not None for c in self.clients):
            return  # (it is closing its session)
        c = self.current
        if c is None:
            if self.finish_tries > 3:
                return
            self.finish_tries += 1
            self.start_client("attach")
            return
        if not c.ready:
            return
        self.finishing = True
        left = max(30.0, deadline - time.monotonic() - 20.0)
        c.asked_to_finish = True
        self.log(f"finish: client #{c.n}, {left:.0f} s")
        c.send({"cmd": "finish", "timeout": left})

    def run(self) -> dict:
        t_start = time.monotonic()
        report = None
        try:
            self.prepare()
            deadline = time.monotonic() + READY_WAIT + self.plan.budget
            self.drive(deadline)
            for c in self.clients:
                if c.finished is not None and c.finished.get("n_open"):
                    self.violation(
                        self.session, "hang",
                        f"{c.finished['n_open']} unit(s) not final at the finish deadline: "
                        f"{c.finished['open'][:10]}",
                    )  # fmt: skip
        except Exception:
            self.notes.append(traceback.format_exc())
            self.violation("seed", "harness", traceback.format_exc(limit=5).strip()[-800:])
        finally:
            self.stop_everything()
        if self.session is not None:
            try:
                report = checker.check(self.url, self.session, self.plan, self.work)
                self.violations += report.violations
            except Exception:
                self.violation("seed", "harness", traceback.format_exc(limit=5).strip()[-800:])
        self.unmount()
        took = time.monotonic() - t_start
        return {
            "seed": self.plan.seed,
            "resource": self.plan.resource,
            "store": self.plan.store,
            "profile": self.plan.profile,
            "session": self.session,
            "work": self.work,
            "planned": self.plan.kinds,
            "injected": dict(self.injected),
            "skipped": self.skipped,
            "units": report.units if report else 0,
            "states": report.states if report else {},
            "violations": [dataclass_dict(v) for v in self.violations],
            "notes": self.notes,
            "clients": len(self.clients),
            "seconds": round(took, 1),
            "plan": str(self.plan),
            "replay": self.plan.replay(),
        }

    def stop_everything(self) -> None:
        """Undo every hold, end the clients, then the session's processes (a violation if
        any is left once the last client closed) and its batch jobs."""
        for what, fn in list(self.undo.values()):
            try:
                fn()
            except Exception as exc:
                self.notes.append(f"undo {what}: {exc!r}")
        self.undo.clear()
        for c in self.clients:
            if c.alive():
                c.kill()
            c.reap()
        if self.session is None:
            return
        if self.hung:  # (no client closed the session: its pilots end as at their walltime)
            self.end_pilots()
        deadline = time.monotonic() + LEFT_WAIT
        while (left := reaper.session_processes(self.session)) and time.monotonic() < deadline:
            time.sleep(0.5)
        if left:
            described = [inject.describe(p) for p in left[:8]]
            self.violation(self.session, "processes-left", f"{len(left)}: {described}")
            for pid in left:  # (stopped ones would never see their SIGTERM)
                inject.cont(pid)
            reaper.kill_session_processes(self.session)
        if self.cluster is not None:
            deadline = time.monotonic() + LEFT_WAIT
            while (jobs := self.cluster.jobs()) and time.monotonic() < deadline:
                time.sleep(1.0)
            # a job left COMPLETING with none of its processes: slurmctld waits for a node's
            # word that the job's end reached it, and after a cut link it asks again only
            # after its own timeouts (seed 810: still COMPLETING 30 s after the last client);
            # given longer, once no process of the session is left anywhere
            deadline = time.monotonic() + COMPLETING_WAIT
            while (
                jobs
                and all(line.endswith(" COMPLETING") for line in jobs)
                and not reaper.session_processes(self.session)
                and time.monotonic() < deadline
            ):
                time.sleep(1.0)
                jobs = self.cluster.jobs()
            if jobs:
                self.violation(self.session, "batch-jobs-left", f"{jobs}")
                for line in jobs:
                    self.cluster.scancel(line.split()[0])

    def end_pilots(self) -> None:
        """The session's pilots ended as their batch system ends a job: scancel (SLURM), or
        SIGTERM to each bootstrap (the local batch system's walltime)."""
        if self.cluster is not None:
            for line in self.cluster.jobs():
                self.log(f"hang: scancel {line}: {self.cluster.scancel(line.split()[0])}")
            return
        for pid in reaper.session_processes(self.session):
            if inject.started_as(inject.cmdline(pid), "pilot.partition.bootstrap"):
                inject.cont(pid)
                inject.signal_pid(pid, signal.SIGTERM)
                self.log(f"hang: SIGTERM {inject.describe(pid)}")

    def unmount(self) -> None:
        """The small disks unmounted, what they held (the store, the sandboxes) kept in their
        directories (python -m tests.chaos.checker WORK reads them again)."""
        for disk in self.disks.values():
            kept = disk.path + ".kept"
            shutil.copytree(disk.path, kept, ignore=shutil.ignore_patterns(".chaos-filler"))
            why = disk.unmount()
            if why:
                self.notes.append(why)
                continue
            for name in os.listdir(kept):
                os.rename(os.path.join(kept, name), os.path.join(disk.path, name))
            os.rmdir(kept)


def dataclass_dict(v) -> dict:
    return {"what": v.what, "rule": v.rule, "evidence": v.evidence}
