"""Lanes: single-core units started by a thread per core, the next ones queued ahead.

Why: when a unit exits, the agent's loop has to wake up, reap it and start the next unit on the
core it freed; half the time the kernel wakes the agent on the other core, and the freed core
idles through that work (bench/sched_trace.py).  agent/_spawn-src/lanes.c's LaneThreads are a
thread per core, without the interpreter, bound to that core: it waits for the exit of each unit
it started there (its pidfd), reaps it, takes the head of the queue ahead, appends its uid to
the start journal, makes its pipes and starts it, and then tells the agent (an eventfd).  The
agent only keeps the queue ahead filled.

Work-conserving: the queue ahead is ONE queue, in the agent's order, which every lane takes
from; the first core to free takes its head.  (It was a queue per core: a short unit waited
behind a long one while other cores idled, 1.5 x the greedy makespan for mixed durations.)

A slot is a logical core.  A unit goes into a lane when it is one rank holding one logical core
(whole, with or without a GPU or a share of one) and no placement of its own (no policy,
resources, placeholders in its environment, function or MPI).  A lane's allocation has a shape,
its key (cores, GPUs); a unit queued ahead asks for one shape, and takes over the allocation of
the first freed slot of that shape as it is.  Its start handle is not bound to a slot: the
variables that name what it holds (PILOT_CPU_IDS, the GPU variable, ...) are the slot's, added
by the thread as it starts it, with the slot's core mask (`slot_entries`).  The queue's order
holds: the agent queues a unit ahead only from the head of its own queue, and a freed slot
takes the head only when it asks for that slot's shape; otherwise the slot is left free and the
agent places the head itself (LocalRunner.give_back).

Protocol (agent's main thread, through LocalRunner):
    start(slot, run, key, env, cpus)
                          start a unit in a free slot now (it is journaled by the agent); its
                          pid is its handle's, its output pipes are adopted
    follow(key, run)      queue a prepared unit ahead (Run.handle; its sandbox taken): False
                          when the queue is full (nothing is kept)
    withdraw(most)        take back the units ahead that have not started (at most `most`, from
                          the head; -1: all): their Runs, in order
    news(running, starting)
                          what the threads did: exits [(pid, code)] in order, and the Runs they
                          started (or could not: Run.start_errno), their pipes adopted;
                          Run.started_at / ended_at say when (the thread's clock: a unit's start
                          comes after the end of the one before it in its slot), Run.lingering
                          whether its process group outlived it, Run.handed_on whether its
                          allocation went on to the next unit
PILOT_AGENT_LANES=0 in the agent's environment turns lanes off (every unit is started by the
agent's loop, as on machines where agent/_spawn-src/ has no LaneThreads): for comparisons.
Exactly once: the thread journals a unit before its clone, as the agent does for what it starts;
a unit not yet journaled when the agent dies never ran (handed back).  The units a lane started
are the thread's own children: the agent's waitpid(-1) passes __WNOTHREAD.
"""

from __future__ import annotations

import itertools
import time
from itertools import count
from typing import cast

from pilot.agent import native
from pilot.agent.runners.base import Run
from pilot.agent.runners.streams import StreamSet

# agent/_spawn-src/lanes.c's, or None where it was not built or has no LaneThreads
# (not x86-64 Linux)
LaneThreads = getattr(native.spawn, "LaneThreads", None)
AHEAD_MAX = getattr(native.spawn, "AHEAD_MAX", 0)
SLOT_ENV_MAX = getattr(native.spawn, "SLOT_ENV_MAX", 0)


def available() -> bool:
    return LaneThreads is not None


class Lanes:
    def __init__(self, journal: int, slots: int, streams: StreamSet, quiet: bool, cpus=None):
        # quiet: see LaneFeed.use_lanes (agent/runners/lane_feed.py); cpus: each slot's real core
        # (a thread per core)
        if LaneThreads is None:  # (made only where available() says so)
            raise RuntimeError("lanes: agent/_spawn-src/ was not built with LaneThreads")
        self.threads = LaneThreads(journal, slots, quiet, cpus)
        self.slots = slots
        self.streams = streams
        self.run_in: dict[int, Run] = {}  # slot -> the unit running there
        self.key_of: dict[int, int] = {}  # slot -> the shape of its allocation (its launch's)
        self.ahead: dict[int, Run] = {}  # seq -> a unit queued ahead, in order
        self.exited: dict[int, Run] = {}  # slot -> the unit whose exit came last
        self.seq = count(1)
        self.started = self.follows = self.withdrawn = self.withdrawals = 0  # (for the log)

    def summary(self) -> str:
        return (
            f"{self.started} started in lanes, {self.follows} queued ahead there, "
            f"{self.withdrawn} taken back in {self.withdrawals} withdrawals"
        )

    @property
    def fd(self) -> int:
        return self.threads.fd

    def close(self) -> None:
        self.threads.close()

    def slot_for(self, alloc) -> int | None:
        """The slot a unit with `alloc` runs in, or None (not one rank on one free core)."""
        if len(alloc.ranks) != 1:
            return None
        cpus = {c for c, _ in alloc.ranks[0][1].get("cpus", ())}
        if len(cpus) != 1:
            return None
        c = next(iter(cpus))
        return c if c < self.slots and c not in self.run_in else None

    def keys_running(self) -> set[int]:
        """The shapes of the allocations that lanes hold now (a unit ahead waits for one)."""
        return {self.key_of[s] for s in self.run_in}

    def start(self, slot: int, run: Run, key: int, env: tuple, cpus) -> None:
        run.started_at = time.time()  # its EXECUTING: never after the end the thread reports
        run.lane_key = key
        _, out, err = self.threads.start(slot, run.handle, key, env, cpus)  # (pid: handle's)
        assert run.sandbox is not None and run.names is not None  # (a lane's run: prepared)
        run.streams = self.streams.adopt(run.sandbox, run.names, (out, err))
        self.run_in[slot] = run
        self.key_of[slot] = key
        self.started += 1

    def follow(self, key: int, run: Run) -> bool:
        seq = next(self.seq)
        run.lane_key = key
        if not self.threads.follow(key, run.handle, f"{run.unit['uid']}\n".encode(), seq):
            return False
        self.ahead[seq] = run
        self.follows += 1
        return True

    def head_keys(self, n: int) -> list[int]:
        """The shapes of the first `n` units ahead, in order."""
        keys = [run.lane_key for run in itertools.islice(self.ahead.values(), n)]
        return cast("list[int]", keys)  # (a run ahead has its key: follow)

    def withdraw(self, most: int = -1) -> list[Run]:
        back = [self.ahead.pop(seq) for seq in self.threads.withdraw(most)]
        if back:
            self.withdrawals += 1
            self.withdrawn += len(back)
        return back

    def news(self, running: dict, starting: dict) -> tuple[list, list]:
        """(exits, started), in the order they happened; each unit started is entered into
        `running` (pid -> Run) at once, and into `starting` (pid -> handle) until it is known
        to have exec'd, as LocalRunner keeps them (its exit may be in the same news)."""
        exits, started = [], []
        for kind, slot, pid, value, out, err, at, seq in self.threads.take():
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
            nxt = self.ahead.pop(seq)
            prev = self.exited.pop(slot, None)
            if pid == 0:  # it never ran: the allocation waits for the next one in the slot
                nxt.start_errno = value
                if prev is not None:
                    self.exited[slot] = prev
            else:
                if prev is not None:
                    prev.handed_on = True  # its allocation is this one's now
                    nxt.alloc = prev.alloc
                assert nxt.sandbox is not None and nxt.names is not None  # (prepared)
                nxt.streams = self.streams.adopt(nxt.sandbox, nxt.names, (out, err))
                nxt.pids.append(pid)
                nxt.started_at = at
                running[pid] = nxt
                handle = nxt.handle
                assert handle is not None  # (a run ahead holds its prepared handle)
                if not handle.settled() or handle.error() is not None:
                    starting[pid] = handle
                nxt.handle = None
                self.run_in[slot] = nxt
                self.started += 1
            started.append(nxt)
        return exits, started
