"""The local runner's side of the lanes: which units run in a lane, their start handles, and the
queue ahead it keeps filled from the head of the agent's queue.

agent/runners/lanes.py has the lanes themselves (a thread per core, agent/_spawn-src/lanes.c's
LaneThreads) and their protocol; LocalRunner (agent/runners/local.py) holds a LaneFeed
(`runner.feed`), given what it uses of the runner: its spawner, output streams, slots, its
running and starting tables, and what it does once a unit started (`on_start`).
    lane_shape(unit)      (cores, GPUs) of a unit that may run in a lane, or None: one rank on
                          one core, no placement of its own, nothing that names its slot
    use_lanes(journal, quiet)  start the lanes (once); the runner's `spawn` starts a unit in
                          a free slot through `start_in_lane`
    hold_ahead(queue, take)   the agent (UnitRunner): move units from the head of its queue
                          into the queue ahead, in order, while the head asks for a shape a
                          lane holds now; returns (unit, reason) for those that cannot start
    give_back(freed)      the agent, when allocations were freed: the head units that take
                          exactly those (a lane's freed allocation for a head unit of its
                          shape, one each, as a lane's thread would have; measured: taking
                          them all back re-queued each null unit 2.5 times, and left the queue
                          empty meanwhile), else every unit ahead; on a cancel or a stop
                          (freed None) every unit ahead; not started, in order (its prepared
                          start handle is kept for the next hold_ahead)
    started()             the agent: the units the lanes started on their own since (or could
                          not: Run.start_errno)
A start handle is prepared once per unit (`_lane_run`), not bound to a slot: what every unit of
a shape shares (the agent's environment without the names a slot fills in) is made once per
shape (`_shape`); the slot's own entries are added by the thread as it starts it
(`_slot_entries`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pilot.agent import unit_command
from pilot.agent.rank_env import UNIT_VARS, grant_ids, ids_var, unit_vars
from pilot.agent.runners import lanes
from pilot.agent.runners.base import Run
from pilot.agent.runners.streams import StreamSet
from pilot.agent.spawn import Spawner, entry
from pilot.sandbox import output_names

if TYPE_CHECKING:
    from pilot.unit_record import UnitRecord

# units queued ahead in the lanes: per lane (enough to run on through the few
# milliseconds the agent loses its core to units and the client: at 8 a lane ran dry for 2-4 %
# of the units, started by the agent after its core had idled), at most AHEAD_TOTAL (each holds
# a sandbox and 17 KB)
AHEAD_PER_LANE = 32
AHEAD_TOTAL = 256
_CONSTANT = ("PILOT_RANK", "PILOT_RANKS")  # the same for every lane unit


def lane_shape(unit: dict, ahead: bool = False) -> tuple | None:
    """(cores, GPUs) a unit asks for when it may run in a lane: one rank on one core,
    no placement of its own, nothing in its environment that names its slot; None when not.
    `ahead`: also queued ahead (a sandbox of its own, with nothing to stage)."""
    if unit.get("function") or unit.get("mpi") or unit.get("policy") or unit.get("resources"):
        return None
    if unit.get("ranks", 1) != 1 or unit.get("cpus", 1) != 1:
        return None
    env = unit.get("environment")
    if env and any("%(" in v for v in env.values()):
        return None  # (placeholders for its ids)
    if ahead and (unit.get("stage_in") or unit.get("sandbox")):
        return None
    return (1, unit.get("gpus", 0))


class LaneFeed:
    """The lanes of a LocalRunner, fed from the agent's queue (the module's header)."""

    def __init__(
        self,
        spawner: Spawner,
        streams: StreamSet,
        slots: int,
        *,
        has_gpus: bool,
        prof: str,
        node_types: list[str],
        running: dict[int, Run],
        starting: dict,
        on_start: Callable[[Run, Any], None],
    ) -> None:
        """No lanes yet (use_lanes starts them), nothing ahead.  `slots`: the runner's logical
        cores, one lane each; `prof`: RP 1.x tasks' RP_PROF command; `running`, `starting`:
        the runner's tables (pid -> Run, pid -> start handle), which the lanes' news fills;
        `on_start(run, handle)`: the runner's, once a lane started a unit."""
        self.spawner = spawner
        self.streams = streams
        self.slots = slots
        self.has_gpus = has_gpus
        self.prof = prof
        self.node_types = node_types
        self.running = running
        self.starting = starting
        self.on_start = on_start
        self.lanes: lanes.Lanes | None = None  # (use_lanes)
        self.lane_exits: list = []  # (pid, code) the lane thread reaped
        self.lane_started: list[Run] = []  # units queued ahead it started (or could not)
        self.shapes: dict[tuple, tuple] = {}  # lane shape -> (key, reserved names, env head)
        self.given_back: dict[str, Run] = {}  # uid -> its prepared Run, until the next hold
        self.ahead_most = min(AHEAD_TOTAL, AHEAD_PER_LANE * self.slots)

    def use_lanes(self, journal: int, quiet: bool) -> bool:
        """Start single-core units through a lane thread per core (agent/runners/lanes.py)
        from now on, journaling what it starts into `journal`; False where it cannot be built.
        `quiet`: SIGCHLD is at its default in the agent (no lane unit's exit wakes it)."""
        # a lane's own variables: its node, its ids of each type, the GPU variable and RP's
        fits = len(self.node_types) + 3 <= lanes.SLOT_ENV_MAX
        if self.lanes is None and lanes.available() and fits:
            # quiet: SIGCHLD is at its default here, so the kernel drops the one each lane
            # unit's exit makes (agent/_spawn-src/lanes.c) instead of waking the agent for it
            cpus = [self.spawner.real_core(c) for c in range(self.slots)]  # (a slot's own)
            self.lanes = lanes.Lanes(
                journal,
                self.slots,
                self.streams,
                quiet=quiet,
                cpus=cpus if len(self.spawner.allowed) > 1 else None,
            )
            if self.streams.poller is not None:
                self.streams.poller.register(self.lanes.fd, 1)  # zmq.POLLIN
        return self.lanes is not None

    def hold_ahead(self, queue: deque, take: Callable[[dict], str]) -> list[tuple[dict, str]]:
        """Move units from the head of the agent's `queue` into the lanes' queue ahead, in
        order, while there is room and the head asks for an allocation that a lane holds now
        (the first lane of that shape to free starts it).  `take(unit)` gives its sandbox.
        Returns (unit, reason) for those that cannot start (the agent fails them)."""
        failed: list[tuple[dict, str]] = []
        ln = self.lanes
        if ln is not None and queue and ln.run_in:
            room = self.ahead_most - len(ln.ahead)
            running = ln.keys_running() if room > 0 else ()
            while room > 0 and queue:
                unit = queue[0]
                shape = lane_shape(unit, ahead=True)
                if shape is None or self._shape(shape)[0] not in running:
                    break  # (the queue's order holds: nothing overtakes its head here)
                queue.popleft()
                try:
                    run = self._lane_run(unit, take(unit), shape)
                except (OSError, ValueError) as exc:
                    failed.append((unit, f"cannot start: {exc}"))
                    continue
                if not ln.follow(self._shape(shape)[0], run):
                    unit.taken_sandbox = run.sandbox  # taken: the next take of it is this one
                    self.given_back[unit["uid"]] = run
                    queue.appendleft(unit)
                    break
                room -= 1
        self.given_back.clear()  # (what was not held again is prepared anew when it is)
        return failed

    def give_back(self, freed: list | None = None) -> list[UnitRecord]:
        """The units queued ahead that have not started, taken back (their sandboxes stay
        taken), in order.  For a cancel or a stop (`freed` None): all of them.  For the Runs
        whose allocations were just freed: the head ones when each freed allocation is a
        lane's and the head ones ask for those very shapes (one each: they take exactly what
        was freed, as the lanes' threads would have); otherwise all (the agent's scheduler
        places them again, in order)."""
        if self.lanes is None:
            return []
        most = -1
        if freed:
            keys = [r.lane_key for r in freed]
            if None not in keys and sorted(self.lanes.head_keys(len(keys))) == sorted(keys):
                most = len(keys)
        back = []
        for run in self.lanes.withdraw(most):
            run.unit.taken_sandbox = run.sandbox  # (SandboxStager.take gives it back)
            self.given_back[run.unit["uid"]] = run  # its handle serves again
            back.append(run.unit)
        return back

    def started(self) -> list[Run]:
        """Units the lanes started on their own since (or could not: Run.start_errno)."""
        started, self.lane_started = self.lane_started, []
        return started

    def _shape(self, shape: tuple) -> tuple:
        """(key, reserved names, env head) of a lane shape: what every unit of that shape
        shares (the names its slot fills in, the agent's environment without them)."""
        got = self.shapes.get(shape)
        if got is None:
            slot_names = ["PILOT_NODE_NAME", *(ids_var(t) for t in self.node_types)]
            if self.has_gpus or shape[1]:
                slot_names.append("CUDA_VISIBLE_DEVICES")
            if shape[1]:
                slot_names.append("RP_GPU_ID")
            reserved = frozenset((*slot_names, *UNIT_VARS, *_CONSTANT))
            const = {"PILOT_RANK": "0", "PILOT_RANKS": "1"}
            head = self.spawner.entries_without(reserved) + [entry(k, v) for k, v in const.items()]
            got = self.shapes[shape] = (len(self.shapes), reserved, head)
        return got

    def _lane_run(self, unit: dict, sandbox: str, shape: tuple) -> Run:
        """A Run for `unit` in a lane, its start handle prepared (not bound to a slot)."""
        run = self.given_back.pop(unit["uid"], None)
        if run is not None and run.sandbox == sandbox:
            return run
        run = Run(unit, None)
        run.sandbox, run.names = sandbox, output_names(unit)
        _, reserved, head = self._shape(shape)
        user = unit.get("environment")
        envp = head
        if user:
            user = {k: v for k, v in user.items() if k not in reserved}
            if not self.spawner.replaces_none(user):
                envp = self.spawner.entries_without(reserved | user.keys())
                envp += head[-len(_CONSTANT) :]
            envp = envp + [entry(k, v) for k, v in user.items()]
        own = [entry(k, v) for k, v in unit_vars(unit, sandbox, self.prof).items()]
        path = user.get("PATH") if user else None
        one_pipe = run.names[0] == run.names[1]
        argv = unit_command.argv(unit)
        run.handle = self.spawner.prepare_envp(argv, sandbox, envp + own, path, one_pipe)
        return run

    def _slot_entries(self, alloc, shape: tuple) -> tuple:
        """The environment entries of a lane's allocation (its ids), as its units see them."""
        node, grant = alloc.ranks[0]
        ids = grant_ids(node.cap, grant)
        env = {"PILOT_NODE_NAME": node.name, **{ids_var(t): v for t, v in ids.items()}}
        if self.has_gpus or shape[1]:
            env["CUDA_VISIBLE_DEVICES"] = self.spawner.visible("CUDA_VISIBLE_DEVICES", ids["gpus"])
        if shape[1]:
            env["RP_GPU_ID"] = ids["gpus"]
        return tuple(entry(k, v) for k, v in env.items())

    def news(self) -> None:
        assert self.lanes is not None  # (the lanes' fd said so: they are there)
        exits, started = self.lanes.news(self.running, self.starting)
        self.lane_exits.extend(exits)
        self.lane_started.extend(started)

    def start_in_lane(self, unit: dict, sandbox: str, alloc, shape: tuple, slot: int) -> Run:
        run = self._lane_run(unit, sandbox, shape)
        run.alloc = alloc
        key = self._shape(shape)[0]
        mask = self.spawner.mask([slot])
        assert self.lanes is not None  # (a slot of theirs was found: they are there)
        self.lanes.start(slot, run, key, self._slot_entries(alloc, shape), mask)
        self.on_start(run, run.handle)  # (pid: its child's)
        run.handle = None
        return run
