"""What the agent needs to run units: a runner and a stager, chosen together per partition
(agent/runners/__init__.py).

    UnitRunner   starts a placed unit's ranks, reports their exits, kills them.
                 local.py    the agent spawns them itself (single-node partitions)
                 daemons.py  the node daemons of the partition's nodes do (multi-node)
    Stager       prepares a unit's sandbox before it starts.
                 stager.py     a thread makes the sandbox ahead of use, reuses empty ones
                 daemons.py    nothing here: node daemons make sandboxes on their node

UnitRunner (a Protocol) is what every runner does; RunnerBase the optional rest, with what a
runner without that capability does (every runner derives from it).  A runner is driven from
the agent's loop only: `spawn` returns at once with the unit's `Run`;
`reap()` yields (Run, exit code) for units whose ranks have all ended (the first non-zero code;
negative = signal), with `left_empty` set when its sandbox may be empty and serve again;
`output` holds forwarded output [uid, node, rank, stream, text] until the agent sends it;
`watch(poller)` registers what the runner must hear (daemon sockets, unit output pipes: it keeps
the set up to date), and the agent hands each of those that is ready to `on_readable`; what it
looks at without polling (quiet output pipes) it does in `sweep`, called by `due()`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pilot.unit_record import UnitRecord


class Run:
    """One unit's processes (one per rank) while they run."""

    __slots__ = (
        "unit",
        "alloc",
        "pids",
        "codes",
        "cancel_reason",
        "fail_reason",
        "node_lost",
        "not_started",
        "streams",
        "left_empty",
        "extra",
        "handed_on",
        "start_errno",
        "sandbox",
        "names",
        "started_at",
        "ended_at",
        "lingering",
        "handle",
        "lane_key",
    )

    def __init__(self, unit, alloc):
        self.unit, self.alloc = unit, alloc
        self.streams = None  # its output pipes (agent/runners/streams.py), local runner only
        self.left_empty = False  # ended, and nothing of it is known in its (private) sandbox
        self.extra = None  # what its final state carries besides (a function's value, output)
        self.pids: list = []  # one per rank (node daemons: (node index, rank))
        self.codes: dict = {}
        self.cancel_reason = None
        self.fail_reason = None  # set when the unit ended without an exit code (node lost)
        self.node_lost = False  # it ended because a node it ran on was lost
        self.not_started = False  # a rank could not exec: the unit never ran (no exit code)
        self.handed_on = False  # its allocation went on to its successor (it is not released)
        self.start_errno = 0  # a unit a lane thread could not start: why
        self.sandbox = self.names = None  # (lanes: where its pipes' files go)
        self.started_at = self.ended_at = 0.0  # when a lane thread started / reaped it
        self.lingering = None  # (a lane's) whether its process group outlived it
        self.handle = None  # (lanes) its prepared start handle, until it starts
        self.lane_key = None  # (lanes) the shape of what it asks for, when it runs in a lane

    @property
    def nodes(self) -> list[str]:
        return [node.name for node, _ in self.alloc.ranks]


class UnitRunner(Protocol):
    """What every runner does (the agent calls these on any runner)."""

    @classmethod
    def for_partition(cls, cfg: dict, ctx, journal: int) -> tuple[UnitRunner, Stager]: ...

    output: list  # [uid, node, rank, stream, text] waiting to be sent to the client
    running: dict  # rank -> its unit's Run, while it runs
    sigchld: bool  # whether the agent must hear SIGCHLD (else it leaves it at its default)
    runs_functions: bool  # whether it runs function units (single-node partitions)
    shares_data: bool  # its function workers see the client's data directory (by reference)

    def describe(self) -> str: ...  # how units start (the agent's log, `pilot top`)

    def summary(self) -> str: ...  # what it did, for the agent's last log lines

    # the owning client's data directory ({dir, token, sync} | None: pilot/functions.py)
    def set_data(self, data: dict | None) -> None: ...

    # `sandbox`: the stager's, None for a function unit (its worker's directory is the runner's);
    # OSError: nothing left running
    def spawn(self, unit: dict, sandbox: str | None, alloc) -> Run: ...

    def reap(self) -> Iterator[tuple[Run, int]]: ...

    def kill(self, run: Run, sig: int) -> None: ...

    def runs(self) -> list[Run]: ...

    # None: it cannot be found; `search` is the unit's own PATH (None: the agent's)
    def which(self, executable: str, search: str | None = None) -> str | None: ...

    def close(self) -> None: ...

    # the optional part: RunnerBase's, which every runner derives from (what each does: there)
    def hold_ahead(self, queue: deque, take: Callable[[dict], str]) -> list[tuple[dict, str]]: ...

    def give_back(self, freed: list | None = None) -> list[UnitRecord]: ...

    def started(self) -> list[Run]: ...

    def has_exited(self, run: Run) -> bool: ...

    def node_lost(self, index: int, reason: str) -> None: ...

    def watch(self, poller) -> None: ...

    def on_readable(self, key) -> None: ...

    def flush(self) -> None: ...

    def due(self) -> float | None: ...

    def sweep(self, now: float) -> None: ...


class RunnerBase:
    """The optional part of the seam: what a runner without the capability does.  Every runner
    derives from it and overrides what it has; the agent calls these on any runner.

    holding units ahead (the local runner's lanes): hold_ahead, give_back, started
    hearing without the agent's SIGCHLD: has_exited (the local runner; the others learn of
        exits on their sockets or at once)
    what it must hear and look at: watch, on_readable (sockets, pipes), due, sweep
    starts sent together: flush (the daemon runner sends a turn's ranks per node at once)
    nodes of a multi-node partition: node_lost (the daemon runner)
    """

    output: list
    running: dict
    sigchld = False
    runs_functions = False
    shares_data = False

    def set_data(self, data: dict | None) -> None:
        """(Function workers that see the client's data directory: the local runner's.)"""

    # Units held ahead: the runner may take units from the head of the agent's queue, in order,
    # to start them itself the moment a slot that fits frees (the local runner's lanes); it
    # journals each before it starts it.  Returns (unit, reason) for those that cannot start.
    # `take(unit)` gives a unit's sandbox.
    def hold_ahead(self, queue: deque, take: Callable[[dict], str]) -> list[tuple[dict, str]]:
        return []

    # the units held ahead and not started, in order: all of them (freed None: a cancel or a
    # stop), or those the allocations of the Runs `freed` (just ended) may be for
    def give_back(self, freed: list | None = None) -> list[UnitRecord]:
        return []

    # units it started on its own since (EXECUTING; Run.start_errno: it could not)
    def started(self) -> list[Run]:
        return []

    def has_exited(self, run: Run) -> bool:  # every rank ended, not yet reaped
        return False  # (its exit events decide)

    def node_lost(self, index: int, reason: str) -> None:
        pass  # (a single-node partition's node is the agent's own)

    def watch(self, poller) -> None:
        pass  # (nothing to poll)

    def on_readable(self, key) -> None:
        pass

    def flush(self) -> None:  # send what `spawn` held back (after each turn of starts)
        pass  # (its spawns went out at once)

    def due(self) -> float | None:  # when `sweep` wants to be called next (None: never)
        return None

    def sweep(self, now: float) -> None:  # what is looked at without being polled
        pass


class Stager(Protocol):
    def submit(self, unit: dict) -> None: ...  # it will run: prepare its sandbox

    def take(self, unit: dict) -> str: ...  # its sandbox; OSError if it could not be made

    def drop(self, unit: dict) -> None: ...  # it will not run here

    def recycle(self, sandbox: str) -> None: ...  # an empty sandbox of a unit that ended

    def untake(self, sandbox: str) -> None: ...  # taken for a unit that will not run here

    def tick(self, now: float) -> None: ...  # about once a second, from the agent's loop

    def summary(self) -> str: ...  # for the agent's log: how sandboxes were made

    def close(self) -> None: ...


class QuietStager:
    """A stager that prepares nothing ahead: `take` alone says (and, for a runner that needs
    it, makes) a unit's sandbox.  The daemon runner's (node daemons make sandboxes on their
    node) and the zero runner's (nothing is written)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def submit(self, unit: dict) -> None:
        pass

    def drop(self, unit: dict) -> None:
        pass

    def untake(self, sandbox: str) -> None:
        pass  # (nothing is taken ahead)

    def recycle(self, sandbox: str) -> None:
        pass

    def tick(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass
