"""How an agent runs units: a UnitRunner and its Stager, chosen per partition (the interfaces
are in agent/runners/base.py).

    local     the agent spawns units itself            LocalRunner + SandboxStager
    daemons   node daemons spawn them on their nodes   DaemonRunner + NoStager
              (every node of the partition has a daemon endpoint: multi-node pilots)
    zero      no process at all: units end DONE once   ZeroRunner + ZeroStager
              placed (resource config unit_launch: zero, a benchmark of the stack alone)
(named once, in pilot/config/plugins.py: RUNNERS; each runner's `for_partition` makes it and its
stager)
"""

from __future__ import annotations

from pilot.agent.runners.base import Stager, UnitRunner
from pilot.config import plugins


def for_partition(cfg: dict, ctx, journal: int) -> tuple[UnitRunner, Stager]:
    """The runner and stager for the partition an agent config `cfg` describes; `journal` is
    the start journal (what a runner starts on its own it journals there first)."""
    daemons = cfg["nodes"] and all("endpoint" in n for n in cfg["nodes"])
    name = "daemons" if daemons else "local"
    if cfg.get("unit_launch") == "zero":
        name = "zero"
    runner = plugins.load(plugins.RUNNERS, name, "runner")
    return runner.for_partition(cfg, ctx, journal)
