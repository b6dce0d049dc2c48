"""A client of a chaos seed: a process of its own, so that it can be killed (SIGKILL) or stopped.

    python -m tests.chaos.client PLAN.json WORK                       # the first client
    python -m tests.chaos.client PLAN.json WORK --attach SESSION --t0 T [--take-over]

The store is PILOT_DATABASE_URL's, the session directory under PILOT_SESSIONS_DIR; the working
directory is WORK (the file it stages in, the files staged back).  The first client makes the
session and submits the plan's pilot; an attaching one (`rp.Session(uid=SESSION)`, with
`take_over=True` when asked) gets the session's pilots back and adopts their units.  Either
then submits each wave of the plan as the named stream `wave-K` once its time has come (T0 +
the wave's `at`; an attached client submits every wave whose time has come from its first
item: the items the store knows are skipped).  A pilot that ended (its bootstrap killed)
while waves are left is replaced by a new one, as a user would.

Said on stdout, one JSON line each ({"ev": ...}):
    ready     {session, t0, pid}          the pilot's partitions up (or the session attached)
    status    {pilots: [...]}             every 0.5 s: each pilot's state, sandbox, job, jobs,
                                          partitions [uid, state, nodes, cores]
    wave      {k, made, exhausted, error} wave k's stream pulled (to its end, or not: why)
    storm     {done: [...]}               a reconfig storm's commands and what they gave
    grown     {job, id, part, state, reason}   a grow's job joined (or why not)
    released  {why}                       taken over by another client: it exits
    finished  {counts, open, flushed}     every unit final (or the deadline: `open` names the
                                          units that are not), the store written (flushed);
                                          WORK/client_view.json: each unit's state and number
                                          of history rows as this client has them; then the
                                          session closed
    error     {what}                      an exception (the traceback on stderr)
Obeyed on stdin, one JSON line each ({"cmd": ...}):
    storm {n, seed}   n reconfigs in a burst: stop a live partition, start new ones, some
                      over-committing (more nodes than are free, or beyond max_nodes)
    grow              start a partition beyond the free nodes (the pilot grows by a job)
    finish {timeout}  submit the waves left, wait for every unit, mending the partitions
                      when none takes the widest unit waiting (a storm, a lost node), close
Also said: mend {pilot, need, stop, small} (what `finish` did to make room).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import threading
import time
import traceback

import pilot as rp
from tests.chaos import workload
from tests.chaos.schedule import Schedule

CPD = rp.ComputePartitionDescription
OUT_LOCK = threading.Lock()
MAX_PILOTS = 4  # pilots submitted in all by one client (a pilot replaced when it ended)


def say(ev: str, **body) -> None:
    with OUT_LOCK:
        print(json.dumps({"ev": ev, **body}, default=str), flush=True)


def resource_name(plan: Schedule, work: str) -> str:
    """local.nodes4, or the seed's copy of slurm.localhost (SeedRun.prepare)."""
    return "local.nodes4" if plan.resource == "local.nodes4" else os.path.join(work, "slurm.yaml")


def cores_of(part) -> int:
    return int((part.resources or {}).get("cores") or 0)


class Client:
    def __init__(self, plan: Schedule, work: str, args) -> None:
        self.plan, self.work, self.args = plan, work, args
        self.truth = os.path.join(work, "truth.log")
        self.sandboxes = os.path.join(work, "sandboxes")
        self.streams: dict[int, object] = {}
        self.hurry = threading.Event()  # finish: the waves left go at once
        self.submitted = 0  # pilots this client submitted
        self.filled: set[str] = set()  # partitions `mend` started
        self.lock = threading.Lock()
        if args.attach:
            self.session = rp.Session(uid=args.attach, take_over=args.take_over)
            self.pmgr = rp.PilotManager(self.session)
            self.umgr = rp.UnitManager(self.session)
            live = [p for p in self.pmgr.get_pilots() if not p.final]
            if live:
                self.umgr.add_pilots(live)
            self.t0 = args.t0
        else:
            self.session = rp.Session()
            self.pmgr = rp.PilotManager(self.session)
            self.umgr = rp.UnitManager(self.session)
            self.new_pilot()
            self.t0 = time.time()
        self.ensure_pilot()

    # -- the pilot ------------------------------------------------------------------------
    def description(self) -> rp.ComputePilotDescription:
        p = self.plan
        kw = {"max_nodes": p.max_nodes} if p.max_nodes else {}
        return rp.ComputePilotDescription(
            resource=resource_name(p, self.work), nodes=p.nodes, runtime=15,
            parts=[CPD(nodes=n) for n in p.parts], **kw,
        )  # fmt: skip

    def new_pilot(self):
        self.submitted += 1
        pilot = self.pmgr.submit_pilots(self.description())
        self.umgr.add_pilots(pilot)
        for part in pilot.partitions:
            try:  # (a batch system may queue it: the waves go on meanwhile)
                part.wait([rp.ACTIVE, rp.FAILED, rp.CANCELED, rp.DONE], timeout=120)
            except TimeoutError as exc:
                say("error", what=f"new pilot: {exc}")
                break
        return pilot

    def live_pilots(self) -> list:
        return [p for p in self.pmgr.get_pilots() if not p.final and not p.released]

    def released(self) -> str | None:
        """Why this client acts on the session no more: a pilot taken over, or the session
        (the store refused this client's writes: a newer owner holds it)."""
        if self.session.deposed is not None:
            return str(self.session.deposed)
        return next((p.released for p in self.pmgr.get_pilots() if p.released), None)

    def ensure_pilot(self):
        """The live pilot; a new one when every pilot ended (its bootstrap killed)."""
        with self.lock:
            live = self.live_pilots()
            if live:
                return live[-1]
            if self.released() or self.submitted >= MAX_PILOTS:
                return None
            return self.new_pilot()

    # -- what it says -----------------------------------------------------------------------
    def status(self) -> None:
        pilots = []
        for p in self.pmgr.get_pilots():
            parts = [
                [q.uid, q.state, len((q.resources or {}).get("nodes") or []), cores_of(q)]
                for q in p.partitions
            ]
            job = getattr(p.job, "pid", None) if p.job is not None else None
            pilots.append(
                {"uid": p.uid, "state": p.state, "sandbox": p.sandbox, "job": job,
                 "jobs": p.jobs, "parts": parts, "released": p.released}
            )  # fmt: skip
        say("status", pilots=pilots)

    def watch(self) -> None:
        """Every 0.5 s: the status line; deposed (taken over): say so and exit."""
        while True:
            try:
                why = self.released()
                if why:
                    say("released", why=why)
                    os._exit(0)  # (a user's script that lost its pilot ends)
                self.status()
                if not self.hurry.is_set() or self.live_pilots():
                    self.ensure_pilot()
            except Exception as exc:  # (reported, the watch goes on)
                say("error", what=f"watch: {exc!r}")
                traceback.print_exc()
            time.sleep(0.5)

    # -- the waves ---------------------------------------------------------------------------
    def waves(self) -> None:
        for k, wave in enumerate(self.plan.waves):
            while not self.hurry.is_set() and time.time() < self.t0 + wave.at:
                self.hurry.wait(min(0.1, max(0.0, self.t0 + wave.at - time.time())))
            gen = workload.wave(self.plan, k, self.truth, self.sandboxes)
            stream = self.umgr.submit_units(gen, lazy=True, name=f"wave-{k}")
            self.streams[k] = stream
            stream.thread.join(60)
            error = repr(stream.error) if stream.error is not None else None
            say("wave", k=k, made=len(stream), exhausted=stream.exhausted, error=error)

    # -- commands ------------------------------------------------------------------------------
    def storm(self, n: int, seed: int) -> None:
        rng = random.Random(seed)
        done = []
        for _ in range(n):
            pilot = self.ensure_pilot()
            if pilot is None:
                break
            live = [q for q in pilot.partitions if not q.final]
            stop = [rng.choice(live).uid] if live and rng.random() < 0.7 else []
            start = []
            for _ in range(rng.choice((0, 1, 1, 2))):
                start.append(rng.choice(("nodes=1", "nodes=1", "cores=1", "nodes=3", "nodes=5")))
            descs = [CPD(**{s.split("=")[0]: int(s.split("=")[1])}) for s in start]
            try:
                new = pilot.reconfig(stop=stop or None, start=descs, reason="chaos storm")
                done.append({"stop": stop, "start": start, "new": [q.uid for q in new]})
            except Exception as exc:
                done.append({"stop": stop, "start": start, "error": repr(exc)})
            time.sleep(rng.uniform(0.0, 0.3))
        say("storm", done=done)

    def grow(self) -> None:
        pilot = self.ensure_pilot()
        if pilot is None:
            say("grown", state=None, reason="no live pilot")
            return
        free = (pilot.free or {}).get("nodes", 0)
        before = {j["job"] for j in pilot.jobs}
        try:
            [new] = pilot.reconfig(start=CPD(nodes=free + 1), reason="chaos grow")
        except Exception as exc:
            say("grown", state=None, reason=repr(exc))
            return
        state = new.wait([rp.ACTIVE, rp.FAILED, rp.CANCELED, rp.DONE], timeout=90)
        job = next((j for j in pilot.jobs if j["job"] not in before), {})
        say(
            "grown", pilot=pilot.uid, part=new.uid, state=state, reason=new.reason,
            job=job.get("job"), id=job.get("id"), job_state=job.get("state"),
        )  # fmt: skip

    def widest(self) -> int:
        """The most ranks a unit not final yet asks for."""
        units = self.umgr.get_units()
        return max([getattr(u.description, "ranks", 1) or 1 for u in units if not u.final] + [1])

    def mend(self) -> None:
        """Room for the widest unit waiting, as a user would make it: nothing while a live
        partition takes it or one is coming up; else every live partition stopped and one
        started over all the free nodes (rp.FILL); when such a one came up too small (the
        pilot lost nodes: they never come back), the pilot canceled and a new one submitted."""
        pilot = self.ensure_pilot()
        if pilot is None:
            return
        need = self.widest()
        live = [q for q in pilot.partitions if not q.final]
        if any(cores_of(q) >= need for q in live if q.state == rp.ACTIVE):
            return
        if any(q.state in (rp.NEW, rp.PENDING, rp.STARTING) for q in live):
            return
        small = [q.uid for q in live if q.uid in self.filled and q.state == rp.ACTIVE]
        say("mend", pilot=pilot.uid, need=need, stop=[q.uid for q in live], small=small)
        if small:
            pilot.cancel(timeout=60)
            with self.lock:
                if self.submitted < MAX_PILOTS:
                    self.new_pilot()
            return
        stop = [q.uid for q in live] or None
        [new] = pilot.reconfig(stop=stop, start=CPD(rp.FILL), reason="mend")
        self.filled.add(new.uid)

    def finish(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.hurry.set()
        self.wave_thread.join(max(1.0, deadline - time.monotonic()))
        for stream in self.streams.values():
            stream.thread.join(max(1.0, deadline - time.monotonic()))
        mended = 0.0
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.umgr.wait_units(timeout=min(5.0, left))
                break
            except TimeoutError:
                pass
            if time.monotonic() > mended + 10.0:  # (a partition just started: its time)
                mended = time.monotonic()
                try:
                    self.mend()
                except Exception as exc:
                    say("error", what=f"mend: {exc!r}")
        counts: dict[str, int] = {}
        open_ = []
        seen = {}
        for u in self.umgr.get_units():
            counts[u.state] = counts.get(u.state, 0) + 1
            seen[u.uid] = [u.state, len(u.history)]
            if not u.final:
                open_.append([u.uid, u.state, u.pilot, u.part])
        flushed = self.session.writer.flush(timeout=max(5.0, deadline - time.monotonic()))
        with open(os.path.join(self.work, "client_view.json"), "w") as f:
            json.dump({"flushed": flushed, "units": seen}, f)
        say("finished", counts=counts, open=open_[:50], n_open=len(open_), flushed=flushed)

    def commands(self) -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            try:
                if cmd["cmd"] == "storm":
                    threading.Thread(target=self.storm, args=(cmd["n"], cmd["seed"])).start()
                elif cmd["cmd"] == "grow":
                    threading.Thread(target=self.grow).start()
                elif cmd["cmd"] == "finish":
                    self.finish(cmd.get("timeout", 120))
                    return
            except Exception as exc:
                say("error", what=f"{cmd['cmd']}: {exc!r}")
                traceback.print_exc()

    def run(self) -> None:
        say("ready", session=self.session.uid, t0=self.t0, pid=os.getpid())
        threading.Thread(target=self.watch, daemon=True).start()
        self.wave_thread = threading.Thread(target=self.waves, daemon=True)
        self.wave_thread.start()
        self.commands()
        self.session.close()


def main() -> int:
    a = argparse.ArgumentParser()
    a.add_argument("plan")
    a.add_argument("work")
    a.add_argument("--attach")
    a.add_argument("--t0", type=float)
    a.add_argument("--take-over", action="store_true")
    args = a.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    with open(args.plan) as f:
        plan = Schedule.from_json(f.read())
    try:
        client = Client(plan, args.work, args)
        client.run()
    except Exception as exc:
        say("error", what=f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
