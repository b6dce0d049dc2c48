"""The zero-launch runner: units are placed, started and ended with no process at all.

A benchmark resource (`unit_launch: zero` in a resource config; `local.zero` ships one) that
measures the stack alone, as HyperQueue's zero-worker mode measures its server: everything a
unit passes through runs (the client, its store writer, the pilot link, the bootstrap, the
agent's checks, scheduler and placement, the state reports, the client's callbacks); only the
process start is replaced by an immediate exit 0 with empty output.  A function unit's call is
not made either: it ends DONE with the value None.

`spawn` records the unit as ended at once; the agent reaps it at its loop's next turn (`due`
says "now" while ended units wait, so the loop does not sleep on them), which frees its slots
before the next units are placed, as a real exit would.  Nothing is written anywhere: no
sandbox, no output files (the stager is the no-op one).
Interface: UnitRunner and RunnerBase (agent/runners/base.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from pilot.agent.runners.base import QuietStager, Run, RunnerBase


class ZeroStager(QuietStager):
    """Sandboxes are never made: a zero-launch unit writes nothing."""

    def take(self, unit: dict) -> str:
        return self.root

    def summary(self) -> str:
        return "none (zero-launch)"


class ZeroRunner(RunnerBase):
    """Units end DONE the moment they are started (the module's header)."""

    sigchld = False
    runs_functions = True  # (a function unit ends as at once as any other)

    @classmethod
    def for_partition(cls, cfg: dict, ctx, journal: int) -> tuple[ZeroRunner, ZeroStager]:
        return cls(cfg), ZeroStager(cfg["pilot_sandbox"])

    def __init__(self, cfg: dict) -> None:
        self.output: list = []
        self.running: dict = {}
        self.ended: deque[Run] = deque()
        self.count = 0

    def describe(self) -> str:
        return "zero-launch (no process is started)"

    def summary(self) -> str:
        return f"{self.count} units ended without a process"

    def spawn(self, unit: dict, sandbox: str | None, alloc) -> Run:
        run = Run(unit, alloc)
        run.started_at = run.ended_at = time.time()
        self.ended.append(run)
        self.count += 1
        return run

    def reap(self) -> Iterator[tuple[Run, int]]:
        ended = self.ended
        while ended:
            yield ended.popleft(), 0

    def kill(self, run: Run, sig: int) -> None:
        pass  # (it has ended already)

    def has_exited(self, run: Run) -> bool:
        return True

    def runs(self) -> list[Run]:
        return list(self.ended)

    def which(self, executable: str, search: str | None = None) -> str | None:
        return executable  # (nothing is started: any program "is there")

    def due(self) -> float | None:
        return time.monotonic() if self.ended else None

    def close(self) -> None:
        pass
