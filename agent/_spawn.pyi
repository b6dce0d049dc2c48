"""What type checkers see of pilot.agent._spawn, the C extension agent/_spawn-src/ builds (its
names: module.c's table; start, prepare, clone3_works, use_clone3, LaneThreads, AHEAD_MAX and
SLOT_ENV_MAX only where there is start(), x86-64 Linux).  agent/native.py imports it, or None
where it was not built; its users look its names up as they are (getattr, hasattr)."""

from typing import Any

def __getattr__(name: str) -> Any: ...
