"""agent/_spawn-src/, the native spawner, or why it is not used (one place decides).

The install compiles it (pyproject.toml, an optional extension: a machine without a C compiler
still installs).  Without it the agent starts units through posix_spawn from a thread bound
to the unit's cores (correct, slower: agent/spawn.py), with no lanes (agent/runners/lanes.py)
and no one-call sandbox take (agent/runners/spares.py).  PILOT_NATIVE=0 in the environment turns it
off, so that the pure-Python path is tested too (.ci/run runs the end-to-end and fault tests a
second time that way).  `why_not` says why it is not used; the agent logs how its units start
and `pilot top` shows it; the client warns once when a local pilot starts without it.
"""

from __future__ import annotations

import os
from types import ModuleType

spawn: ModuleType | None
why_not: str | None = None
if os.environ.get("PILOT_NATIVE") == "0":
    spawn = None
    why_not = "turned off by PILOT_NATIVE=0"
else:
    try:
        from pilot.agent import _spawn as spawn
    except ImportError as exc:  # not built (no C compiler at install), or another platform's
        spawn = None
        why_not = f"agent/_spawn-src/ was not built ({exc}); a C compiler and a reinstall build it"
