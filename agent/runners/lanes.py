"""Launcher lanes: single-core units started by a thread, each one's successors queued ahead.

Why: when a unit exits, the agent's loop has to wake up, reap it and start the next unit on the
core it freed; half the time the kernel wakes the agent on the other core, and the freed core
idles through that work (bench/sched_trace.py).  agent/_spawn.c's Launcher is a thread per core,
without the interpreter, bound to that core: it waits for the exit of each unit it started there
(its pidfd), reaps it, appends the uid of the next unit queued in that slot to the start
journal, makes its pipes and starts it, and then tells the agent (an eventfd).  The agent only
keeps each slot's queue filled.  (One thread for all cores was woken where it last ran, often
behind a busy thread on the other core while the freed one idled: a thread per core gave 8 %
more units a second, 6 alternating pairs of 5,000 units on 2 cores.)

A slot is a logical core.  A unit goes into a lane when it is one rank holding one logical core
(whole or a share) that no other lane unit runs on; its successors (Agent.follow_up) are queued
units asking for exactly the same and nothing else (no placement policy, resources, staging,
named sandbox, function or MPI): they take over its allocation as it is, so they see the same
ids.  The queue's order holds: nothing overtakes a head that cannot follow.

Protocol (agent's main thread):
    launch(slot, run, ...)    start a unit in a free slot now (it is journaled by the agent);
                              its pid is its handle's, its output pipes are adopted
    wanting(depth)            (slot, running Run, missing) for slots with fewer than `depth`
                              successors queued
    follow(slot, run, ...)    queue a prepared successor (its sandbox taken, env encoded);
                              False when the slot has run dry (nothing is kept)
    withdraw(uids)            take back queued successors that have not started (all of a slot
                              holding one of `uids`; None: all), in order: their units
    news()                    what the thread did: exits [(pid, code)] in order, and the Runs it
                              started (or could not: Run.start_errno), their pipes adopted;
                              Run.started_at / ended_at say when (the thread's clock: a
                              successor's start comes after its predecessor's end), and
                              Run.lingering whether its process group outlived it
PILOT_AGENT_LANES=0 in the agent's environment turns lanes off (every unit is started by the
agent's loop, as on machines where agent/_spawn.c has no Launcher): for comparisons.
Exactly once: the thread journals a successor before its clone, as the agent does for what it
starts; a successor not yet journaled when the agent dies never ran (handed back).  The units a
lane started are the thread's own children: the agent's waitpid(-1) passes __WNOTHREAD.
"""

from __future__ import annotations

import time
from collections import deque

from agent.runners.base import Run
from agent.runners.streams import StreamSet

try:
    from agent._spawn import LANE_DEPTH, Launcher
except ImportError:  # agent/_spawn.c not built, or not x86-64 Linux: no lanes
    Launcher = None
    LANE_DEPTH = 0


def available() -> bool:
    return Launcher is not None


class Lanes:
    def __init__(self, journal: int, slots: int, streams: StreamSet, quiet: bool, cpus=None):
        # quiet: see LocalRunner.use_lanes; cpus: each slot's real core (a thread per core)
        self.launcher = Launcher(journal, slots, quiet, cpus)
        self.slots = slots
        self.streams = streams
        self.run_in: dict[int, Run] = {}  # slot -> the unit running there
        self.queued: dict[int, deque] = {}  # slot -> its successors (Run, handle), in order
        self.exited: dict[int, Run] = {}  # slot -> the unit whose exit came last
        self.started = self.follows = 0  # (counts, for the log)

    def summary(self) -> str:
        return f"{self.started} started in launcher lanes, {self.follows} queued ahead there"

    @property
    def fd(self) -> int:
        return self.launcher.fd

    def close(self) -> None:
        self.launcher.close()

    def slot_for(self, alloc) -> int | None:
        """The slot a unit with `alloc` runs in, or None (not one rank on one free core)."""
        if len(alloc.ranks) != 1:
            return None
        cpus = {c for c, _ in alloc.ranks[0][1].get("cpus", ())}
        if len(cpus) != 1:
            return None
        c = next(iter(cpus))
        return c if c < self.slots and c not in self.run_in else None

    def launch(self, slot: int, run: Run, handle, sandbox: str, names) -> None:
        run.started_at = time.time()  # its EXECUTING: never after the end the thread reports
        _, out, err = self.launcher.launch(slot, handle)  # (the pid: handle.pid)
        run.streams = self.streams.adopt(sandbox, names, (out, err))
        self.run_in[slot] = run
        self.started += 1

    def wanting(self, depth: int) -> list[tuple[int, Run, int]]:
        depth = min(depth, LANE_DEPTH)
        out = []
        for slot, r in self.run_in.items():
            have = len(self.queued.get(slot, ()))
            if have < depth:
                out.append((slot, r, depth - have))
        return out

    def follow(self, slot: int, run: Run, handle, line: bytes) -> bool:
        if not self.launcher.follow(slot, 0, handle, line):
            return False
        self.queued.setdefault(slot, deque()).append((run, handle))
        self.follows += 1
        return True

    def withdraw(self, uids=None) -> list[dict]:
        back = []
        for slot, chain in self.queued.items():
            if not chain or (uids is not None and not any(r.unit["uid"] in uids for r, _ in chain)):
                continue
            n = self.launcher.withdraw(slot)
            for r, _ in [chain.pop() for _ in range(n)][::-1]:
                r.unit["_sandbox"] = r.sandbox  # taken already (SandboxStager.take gives it)
                back.append(r.unit)
        return back

    def news(self, running: dict, starting: dict) -> tuple[list, list]:
        """(exits, started), in the order they happened; each unit started is entered into
        `running` (pid -> Run) at once, and into `starting` (pid -> handle) until it is known
        to have exec'd, as LocalRunner keeps them (its exit may be in the same news)."""
        exits, started = [], []
        for kind, slot, pid, value, out, err, at in self.launcher.take():
            if kind == "exit":
                exits.append((pid, value))
                run = running.get(pid)
                if run is not None:
                    self.exited[slot] = run
                    run.ended_at = at
                    run.lingering = out == 1  # (its process group, as the thread reaped it)
                    if self.run_in.get(slot) is run:
                        del self.run_in[slot]
                continue
            nxt, handle = self.queued[slot].popleft()
            prev = self.exited.pop(slot, None)
            if pid == 0:  # it never ran: the allocation waits for the next one in the slot
                nxt.start_errno = value
                if prev is not None:
                    self.exited[slot] = prev
            else:
                if prev is not None:
                    prev.handed_on = True  # its allocation is this one's now
                nxt.streams = self.streams.adopt(nxt.sandbox, nxt.names, (out, err))
                nxt.pids.append(pid)
                nxt.started_at = at
                running[pid] = nxt
                if not handle.settled() or handle.error() is not None:
                    starting[pid] = handle
                self.run_in[slot] = nxt
                self.started += 1
            started.append(nxt)
        return exits, started
