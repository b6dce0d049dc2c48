"""How an agent runs units: a UnitRunner and its Stager, chosen per partition (the interfaces
are in agent/runners/base.py).

    local     the agent spawns units itself            LocalRunner + SandboxStager
    daemons   node daemons spawn them on their nodes   DaemonRunner + NoStager
              (every node of the partition has a daemon endpoint: multi-node pilots)
"""

from __future__ import annotations

from pilot.agent.runners.base import Stager, UnitRunner
from pilot.agent.runners.daemons import DaemonRunner, NoStager
from pilot.agent.runners.local import LocalRunner
from pilot.agent.runners.stager import SandboxStager


def for_partition(cfg: dict, ctx, journal: int) -> tuple[UnitRunner, Stager]:
    """The runner and stager for the partition an agent config `cfg` describes; `journal` is
    the start journal (what a runner starts on its own it journals there first)."""
    if cfg["nodes"] and all("endpoint" in n for n in cfg["nodes"]):
        return DaemonRunner(cfg, ctx), NoStager(cfg["pilot_sandbox"])
    return LocalRunner(cfg, journal), SandboxStager(cfg["pilot_sandbox"])
