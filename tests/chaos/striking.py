"""The faults of a seed's plan, each made at its time (SeedRun's part: tests/chaos/seed.py).

`inject(fault)` finds the victim (tests/chaos/inject.py) and hits it: kill -9 (the client's
followed at once by a new client that attaches), SIGSTOP, a link cut, a disk filled, a client
taking over, a storm or a grow asked of the current client.  What it undoes later (SIGCONT, a
link mended, a disk freed, the grown job ended) is a `hold`, due `fault.hold` s later and undone
in any case at the seed's end.  A fault that needs the client waits (60 s at most) while one
attaches; one whose victim is not there is not injected, and the result says why.
Uses of SeedRun: work, session, status, clients, current, start_client, at, log, cluster,
disks, injected, skipped, notes, undo, seq, finishing, grow_fault, grow_asked, cut_links.
"""

from __future__ import annotations

import signal
import time
import traceback

from pilot import processes
from tests.chaos import inject
from tests.chaos.schedule import Fault

NEEDS_CLIENT = ("kill_client", "stop_client", "take_over", "reconfig_storm", "grow_end")
DEPOSED_WAIT = 60.0  # s for a client taken over to say it was released and exit


class Striking:
    def pilot_now(self) -> dict | None:
        pilots = self.status.get("pilots") or []
        live = [p for p in pilots if p["state"] not in ("DONE", "FAILED", "CANCELED")]
        return (live or pilots or [None])[-1]

    def victims(self, target: str) -> list[int]:
        if target == "client":
            c = self.current
            return [c.pid] if c else []
        pilot = self.pilot_now()
        if pilot is None or self.session is None:
            return []
        return inject.Targets(self.session, pilot["sandbox"]).of(target)

    def hold(self, f: Fault, what: str, undo) -> None:
        key = next(self.seq)
        self.undo[key] = (what, undo)

        def done() -> None:
            if key in self.undo:
                self.log(f"undo: {what}")
                self.undo.pop(key)[1]()

        self.at(time.monotonic() + f.hold, f"undo {what}", done)

    def inject(self, f: Fault, tries: int = 0) -> None:
        if self.finishing:
            self.skipped.append(f"{f.kind}: the seed was finishing")
            return
        if f.kind in NEEDS_CLIENT and (self.current is None or not self.current.ready):
            if tries < 120:  # a client attaching: wait for it (60 s at most)
                self.at(time.monotonic() + 0.5, f.kind, lambda: self.inject(f, tries + 1))
            else:
                self.skipped.append(f"{f.kind}: no client ready for 60 s")
            return
        try:
            done = self._inject(f)
        except Exception as exc:
            done = f"failed: {exc!r}"
            self.notes.append(f"{f.kind} at {f.at}: {traceback.format_exc(limit=3)}")
        if done is True:
            self.injected[f.kind] += 1
        else:
            self.skipped.append(f"{f.kind} at {f.at} s: {done}")
            self.log(f"not injected: {f.kind}: {done}")

    def _inject(self, f: Fault):
        how, _, target = f.kind.partition("_")
        if how in ("kill", "stop"):
            pids = self.victims(target)
            if not pids:
                return f"no {target} alive"
            pid = pids[f.pick % len(pids)]
            self.log(f"{f.kind}: {inject.describe(pid)}")
            if how == "kill" and target == "client":
                self.current.kill()  # (marked killed before it dies: its end is no finding)
                self.start_client("attach")
                return True
            if how == "kill":
                inject.signal_pid(pid, signal.SIGKILL)
                return True
            inject.stop(pid)
            self.hold(f, f"SIGCONT {target} {pid}", lambda: inject.cont(pid))
            return True
        if f.kind == "take_over":
            old = self.current
            old.deposed_at = time.monotonic() + DEPOSED_WAIT
            self.start_client("take-over", take_over=True)
            self.log(f"take_over: client #{old.n} is to be deposed")
            return True
        if f.kind == "reconfig_storm":
            return self.current.send({"cmd": "storm", "n": f.n, "seed": f.pick}) or "stdin closed"
        if f.kind == "grow_end":
            self.grow_fault, self.grow_asked = f, time.monotonic()
            return self.current.send({"cmd": "grow"}) or "stdin closed"
        if f.kind.startswith("full_"):
            disk = self.disks[f.kind]
            n = disk.fill()
            self.log(f"{f.kind}: {disk.path} filled ({n} bytes)")
            self.hold(f, f"free {disk.path}", disk.free)
            return True
        if f.kind.startswith("cut_"):
            return self.cut(f)
        return f"unknown kind {f.kind}"

    def cut(self, f: Fault):
        if self.cluster is None:
            return "no namespace cluster"
        if f.kind == "cut_client_link":
            boot = self.victims("bootstrap")
            k = self.cluster.node_of(boot[0]) if boot else None
            if k is None:
                return "the bootstrap's node not found"
            if k in self.cut_links:
                return f"node{k}'s link is cut already"
            self.cluster.cut_client(k)
        else:
            k = 1 + f.pick % 4
            if k in self.cut_links:
                return f"node{k}'s link is cut already"
            self.cluster.cut_node(k)
        self.cut_links.add(k)
        self.log(f"{f.kind}: node{k}'s link")

        def mend() -> None:
            self.cut_links.discard(k)
            self.cluster.mend(k)

        self.hold(f, f"mend node{k}'s link", mend)
        return True

    def on_grown(self, ev: dict) -> None:
        f, self.grow_asked = self.grow_fault, None
        if f is None:
            return
        if ev.get("state") != "ACTIVE" or not ev.get("id"):
            self.skipped.append(f"grow_end at {f.at} s: the pilot did not grow: {ev}")
            self.injected["grow_end"] -= 1
            return

        def end_job() -> None:
            job = ev["id"]
            if self.cluster is not None:
                said = self.cluster.scancel(job)
            else:
                said = processes.signal_group(int(job), signal.SIGTERM)
            self.log(f"grow_end: job {ev.get('job')} ({job}) ended by the batch system: {said}")

        self.at(time.monotonic() + f.hold, "end the grown job", end_job)
