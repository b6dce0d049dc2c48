"""The local runner: units of a single-node partition, spawned by the agent itself.

Each unit runs in its own sandbox directory (the pilot sandbox / unit uid; made ahead of time by
the SandboxStager, agent/runners/stager.py) with stdin from /dev/null, stdout and stderr into
pipes the agent copies into the files STDOUT and STDERR there, made when the unit first writes
(agent/runners/streams.py), in a process group of its own, bound to its cores (agent/spawn.py).
The spawn does not wait for the exec (Spawner.start): a child that cannot exec exits 127, and
its unit ends FAILED "cannot start: ..." without an exit code, as when the start fails at once.
A unit of one rank on one core goes through a lane instead (agent/runners/lanes.py):
a thread per core starts it, and the next unit queued ahead the moment a core frees.  The runner
decides what waits ahead (`hold_ahead`, from the head of the agent's queue) and gives it back
when a freed allocation may be the head's (`give_back`): its LaneFeed (`feed`,
agent/runners/lane_feed.py) does both, and starts a unit in a lane.
Exits are collected with waitpid(-1, WNOHANG) when the pidfd of a process the agent started
becomes readable (`watch_child`; where the kernel has no pidfds, when SIGCHLD arrives: `sigchld`),
a lane's from its thread; what is left in the pipes is copied before the unit's end is
reported.  The agent starts queued units on the freed cores before it reports the ended ones.

A unit of R ranks is R processes (one per rank, each bound to its own cores, all writing to
the unit's pipes); it ends when all have ended, with the first non-zero exit code.  Its sandbox
is recycled (`Run.left_empty`) when it is its own, nothing was staged into or out of it, it wrote
no output and no process of its process groups is left (the stager checks that the directory
is empty before it serves again).  A unit with output staging gets its output files even when
empty (its directives may name them).
Interface: UnitRunner (agent/runners/base.py).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pilot import processes
from pilot.agent import unit_command
from pilot.agent.rank_env import (
    call_base_env,
    call_unit_env,
    grant_ids,
    prof_command,
    rank_env,
    rp_pilot_vars,
    with_nodes,
)
from pilot.agent.runners.base import Run, RunnerBase
from pilot.agent.runners.functions import FunctionWorkers, seen_data_dir
from pilot.agent.runners.lane_feed import LaneFeed, lane_shape
from pilot.agent.runners.stager import SandboxStager
from pilot.agent.runners.streams import SWEEP_EVERY, StreamSet
from pilot.agent.spawn import WNOTHREAD, Spawner, exits
from pilot.sandbox import output_names

if TYPE_CHECKING:
    from pilot.unit_record import UnitRecord

_WALL = 0x40000000  # (Linux __WALL: also children without an exit signal, before their exec)


def _pidfds_work() -> bool:
    """Whether this kernel opens pidfds (Linux 5.3+, and no filter refuses them)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (AttributeError, OSError):
        return False


class LocalRunner(RunnerBase):
    """Units on this node, spawned by the agent itself (the module's header)."""

    runs_functions = True  # (in its FunctionWorkers)

    @classmethod
    def for_partition(cls, cfg: dict, ctx, journal: int) -> tuple[LocalRunner, SandboxStager]:
        """The runner and its stager (agent/runners/stager.py) for an agent config."""
        return cls(cfg, journal), SandboxStager(cfg["pilot_sandbox"])

    def __init__(self, cfg: dict, journal: int = -1) -> None:
        self.has_gpus = any(n["gpus"] for n in cfg["nodes"])
        self.spawner = Spawner(
            {
                "PILOT_SESSION_ID": cfg["session"],
                "PILOT_PILOT_ID": cfg["pilot"],
                "PILOT_PARTITION_ID": cfg["uid"],
                **rp_pilot_vars(cfg),
            }
        )
        self.mpi_command = cfg.get("mpi_command")
        self.prof = prof_command(cfg["pilot_sandbox"])  # (RP 1.x tasks' RP_PROF)
        self.running: dict[int, Run] = {}  # pid -> its unit's Run
        self.starting: dict = {}  # pid -> its Spawner.start handle, until it is reaped
        self.killed: set[int] = set()  # ranks of a unit whose start failed, until reaped
        self.output: list = []  # units here write to their files only: nothing is forwarded
        self.streams = StreamSet()
        self.next_sweep = 0.0  # (monotonic) when the quiet pipes are read next
        cores = sum(len(n.get("cores") or ()) for n in cfg["nodes"])
        data = seen_data_dir(cfg.get("data"))
        self.shares_data = data is not None  # (the `ready` it sends says so)
        self.functions = FunctionWorkers(
            self.spawner,
            cfg["pilot_sandbox"],
            cfg["uid"],
            cores,
            cfg.get("python_path") or (),
            data=data,
        )
        self.node_name = cfg["nodes"][0]["name"] if cfg["nodes"] else "localhost"
        self.node_types = ["cpus"]  # (as agent/pool.py's NodePool has them)
        for node in cfg["nodes"]:
            self.node_types += [t for t in node.get("pool") or () if t not in self.node_types]
        if "gpus" not in self.node_types:
            self.node_types.append("gpus")
        self.slots = 1 + max((c for n in cfg["nodes"] for c in n.get("cores") or ()), default=0)
        self.feed = LaneFeed(  # (agent/runners/lane_feed.py)
            self.spawner,
            self.streams,
            self.slots,
            has_gpus=self.has_gpus,
            prof=self.prof,
            node_types=self.node_types,
            running=self.running,
            starting=self.starting,
            on_start=self._started,
        )
        # the agent thread's own children (units it spawned, function workers), until reaped:
        # pid -> its pidfd (-1: none could be opened), and pidfd -> pid
        self.children: dict[int, int] = {}
        self.pidfds: dict[int, int] = {}
        # whether the agent must hear SIGCHLD: only where the kernel has no pidfds (before
        # Linux 5.3, or a filter refuses them); otherwise it leaves SIGCHLD at its default
        self.sigchld = not _pidfds_work()
        self.functions.watch_child = self.watch_child
        self.call_env: dict[str, dict] = {}  # node -> what its calls see alike (call_base_env)
        if journal >= 0 and os.environ.get("PILOT_AGENT_LANES") != "0":
            self.feed.use_lanes(journal, quiet=not self.sigchld)

    # -- units held ahead (UnitRunner): the lanes' queue ahead, its feed's ------------------
    def hold_ahead(self, queue, take) -> list[tuple[dict, str]]:
        return self.feed.hold_ahead(queue, take)

    def give_back(self, freed: list | None = None) -> list[UnitRecord]:
        return self.feed.give_back(freed)

    def started(self) -> list[Run]:
        return self.feed.started()

    def set_data(self, data: dict | None) -> None:
        """A new owning client's data directory: its workers write large values there when
        this agent sees it (its token is there), else they send the bytes."""
        self.functions.data = seen_data_dir(data)
        self.shares_data = self.functions.data is not None

    def describe(self) -> str:
        """How units start here, for the agent's log and `pilot top`."""
        lane = "on" if self.feed.lanes is not None else "off"
        return f"spawn {self.spawner.mode()}, lanes {lane}"

    def summary(self) -> str:
        return self.feed.lanes.summary() if self.feed.lanes is not None else "no lanes"

    def watch(self, poller) -> None:
        self.streams.poller = poller  # output pipes are registered as units start
        self.functions.poller = poller  # and function workers' sockets as they start
        for fd in self.pidfds:
            poller.register(fd, 1)  # zmq.POLLIN
        if self.feed.lanes is not None:
            poller.register(self.feed.lanes.fd, 1)

    def watch_child(self, pid: int) -> None:
        """`pid`, a child of the agent's thread, wakes the agent's loop as it exits (its pidfd
        is polled; reap() lets go of it).  Without a pidfd (none left, or none on this kernel)
        its exit is seen at the loop's next turn, within a second, or through SIGCHLD."""
        fd = -1
        if not self.sigchld:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                pass
        self.children[pid] = fd
        if fd >= 0:
            self.pidfds[fd] = pid
            if self.streams.poller is not None:
                self.streams.poller.register(fd, 1)  # zmq.POLLIN

    def _reaped(self, pid: int) -> None:
        fd = self.children.pop(pid, -1)
        if fd >= 0:
            del self.pidfds[fd]
            if self.streams.poller is not None:
                self.streams.poller.unregister(fd)
            os.close(fd)

    def on_readable(self, fd) -> None:
        if fd in self.pidfds:
            return  # a child exited: reap() (the agent's loop calls it next) takes it
        if self.feed.lanes is not None and fd == self.feed.lanes.fd:
            self.feed.news()
            return
        if not self.functions.on_readable(fd):
            self.streams.on_readable(fd)

    def due(self) -> float | None:
        return self.next_sweep if self.streams.quiet else None

    def sweep(self, now: float) -> None:
        """Read the quiet pipes of units started by lanes (agent/runners/streams.py)."""
        self.streams.sweep()
        self.next_sweep = now + SWEEP_EVERY

    def close(self) -> None:
        self.streams.close()
        self.functions.close()
        if self.feed.lanes is not None:
            self.feed.lanes.close()

    def spawn(self, unit: dict, sandbox: str | None, alloc) -> Run:
        """Start every rank of `unit` in its staged sandbox (a function unit: hand its call to
        a worker).  Raises OSError (e.g. executable not found) with nothing left running."""
        run = Run(unit, alloc)
        if unit.get("function"):
            return self._call(unit, run)
        assert sandbox is not None  # (None for a function unit only)
        if self.feed.lanes is not None:
            shape = lane_shape(unit)
            slot = self.feed.lanes.slot_for(alloc) if shape is not None else None
            if slot is not None:
                assert shape is not None  # (a slot is looked for only for a shape)
                return self.feed.start_in_lane(unit, sandbox, alloc, shape, slot)
        argv = unit_command.argv(unit)  # directly, or through /bin/sh (agent/unit_command.py)
        ranks = len(alloc.ranks)
        run.streams = streams = self.streams.open(sandbox, output_names(unit))
        out, err = streams.write_ends
        if unit.get("mpi"):  # one launcher process over all its ranks
            try:
                return self._spawn_mpi(unit, run, sandbox, out, err)
            except (OSError, ValueError):
                self.streams.finish(streams)
                raise
            finally:
                self.streams.spawned(streams)
        unit = with_nodes(unit, alloc.ranks)  # (PILOT_NODE_LIST: rank_env)
        try:
            for rank, (node, grant) in enumerate(alloc.ranks):
                ids = grant_ids(node.cap, grant)
                env, var = rank_env(
                    unit, sandbox, node.name, ids, rank, ranks, self.has_gpus, self.prof
                )
                cpus = [c for c, _ in grant.get("cpus", ())]
                child = self.spawner.start(argv, sandbox, out, err, env, var, cpus)
                self.watch_child(child.pid)
                self._started(run, child)
        except (OSError, ValueError):
            for pid in run.pids:  # (their handles stay until they are reaped)
                self.running.pop(pid, None)
                self.killed.add(pid)
                processes.signal_group(pid, signal.SIGKILL)
            self.streams.finish(streams)
            raise
        finally:
            self.streams.spawned(streams)
        return run

    def _call(self, unit: dict, run: Run) -> Run:
        node, grant = run.alloc.ranks[0]
        ids = grant_ids(node.cap, grant)
        base = self.call_env.get(node.name)
        if base is None:  # (what every call on the node sees alike: rank_env's, sent once)
            base = self.call_env[node.name] = call_base_env(self.functions.workdir, node.name)
        mine, var = call_unit_env(unit, ids, self.has_gpus)
        if var is not None:  # (what the call adds to the worker's own environment)
            mine[var] = self.spawner.visible(var, mine[var])
        mask = self.spawner.mask([c for c, _ in grant.get("cpus", ())])
        own = list(unit.get("environment") or ())
        self.functions.call(run, base, mine, own, sorted(mask) if mask else None)
        return run

    def _spawn_mpi(self, unit: dict, run: Run, sandbox: str, out: int, err: int) -> Run:
        if not self.mpi_command:
            raise OSError("an rp.MPI unit, but the resource config sets no mpi_command")
        node = run.alloc.ranks[0][0]
        grant: dict = {}
        for _, g in run.alloc.ranks:  # the MPI starter holds every rank's slots
            for t, got in g.items():
                grant.setdefault(t, []).extend(got)
        ids = grant_ids(node.cap, grant)
        ranks = len(run.alloc.ranks)
        unit = with_nodes(unit, run.alloc.ranks)  # (PILOT_NODE_LIST: rank_env)
        env, var = rank_env(unit, sandbox, node.name, ids, 0, ranks, self.has_gpus, self.prof)
        argv = unit_command.mpi_argv(unit, self.mpi_command, [("localhost", ranks)])
        cpus = sorted({c for c, _ in grant.get("cpus", ())})
        child = self.spawner.start(argv, sandbox, out, err, env, var, cpus)
        self.watch_child(child.pid)
        self._started(run, child)
        return run

    def _started(self, run: Run, child) -> None:
        run.pids.append(child.pid)
        self.running[child.pid] = run
        if not child.settled() or child.error() is not None:  # (asked when it is reaped)
            self.starting[child.pid] = child

    def reap(self) -> Iterator[tuple[Run, int]]:
        """Yield (Run, exit code) for every unit whose ranks have all exited (the first
        non-zero code by rank; negative = signal), and every function call that ended."""
        yield from self.functions.take_done()
        if not self.running and not self.functions.workers and not self.killed:
            return
        lane, self.feed.lane_exits = self.feed.lane_exits, []
        # (a waitpid for a thread with no child of its own raises, at a cost)
        own: Sequence[tuple[int, int]] = ()
        if self.children or self.feed.lanes is None:  # (every child of this thread is in children)
            own = list(exits(WNOTHREAD if self.feed.lanes is not None else 0))
            for pid, _ in own:
                self._reaped(pid)
        for pid, code in [*lane, *own]:
            if self.functions.on_exit(pid, code):
                continue
            child = self.starting.pop(pid, None)
            if self.killed:
                self.killed.discard(pid)
            run = self.running.pop(pid, None)
            if run is None:
                continue
            run.codes[pid] = code
            failed = child.error() if child is not None else None
            if failed is not None and run.fail_reason is None:
                run.fail_reason = f"cannot start: {failed}"  # (it never ran: no exit code)
                run.not_started = True
                for other in run.pids:  # its other ranks do not run on without it
                    if other not in run.codes:
                        processes.signal_group(other, signal.SIGKILL)
            if len(run.codes) == len(run.pids):
                codes = [run.codes[p] for p in run.pids]
                assert run.streams is not None  # (a local run's: made at its start)
                closed = self.streams.finish(run.streams)  # its output, before its end
                if run.unit.get("stage_out") or run.unit.get("keep_output"):
                    self.streams.make_files(run.streams)  # directives may name them
                run.left_empty = closed and self._left_empty(run)
                yield run, next((c for c in codes if c != 0), 0)
        yield from self.functions.take_done()

    def _left_empty(self, run: Run) -> bool:
        unit = run.unit
        assert run.streams is not None  # (reap's: a local run's)
        if run.streams.made or unit.get("sandbox") or unit.get("stage_in"):
            return False
        if unit.get("stage_out") or unit.get("cleanup"):
            return False
        if run.lingering is not None:  # (its lane thread looked as it reaped it)
            return not run.lingering
        for pid in run.pids:
            try:
                os.killpg(pid, 0)
                return False  # something it started still runs in its group
            except ProcessLookupError:
                pass
            except PermissionError:
                return False
        return True  # whether it is empty is checked before it serves again (spares.py)

    def has_exited(self, run: Run) -> bool:
        """Whether every rank has exited (and waits to be reaped): a cancel comes too late."""
        if run.unit.get("function"):
            return self.functions.has_exited(run)
        for pid in run.pids:
            if pid in run.codes:
                continue
            try:  # (__WALL: a lane's child has no exit signal until its exec)
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL) is None:
                    return False
            except ChildProcessError:
                continue
        return True

    def kill(self, run: Run, sig: int) -> None:
        if run.unit.get("function"):
            self.functions.kill(run, sig)
            return
        for pid in run.pids:
            if pid not in run.codes:
                processes.signal_group(pid, sig)

    def runs(self) -> list[Run]:
        runs = list(self.running.values()) + self.functions.busy()
        return list({id(r): r for r in runs}.values())

    def which(self, executable: str, search: str | None = None) -> str | None:
        """The program that runs for `executable`, or None: a bare name is looked up on
        `search` (the unit's own PATH) or else the agent's; found look-ups are remembered
        (Spawner.which, the look-up the spawn itself uses)."""
        if executable.startswith("/"):
            return executable if os.access(executable, os.X_OK) else None
        if "/" in executable:
            return executable  # relative to its sandbox: the spawn (or its shell) finds it
        try:
            return self.spawner.which(executable, search)
        except FileNotFoundError:
            return None
