"""The cyclic garbage collector's young generation, larger in the client while a Session is open.

CPython collects its youngest generation every 700 container objects allocated (net of those
freed), its middle one every ten of those, and all of them every ten middle ones once the
objects that survived grew by a quarter since the last full collection.  A client that holds
its units (a Unit, its description, a concurrent.futures.Future with its Condition, RLock and
five bound methods: ~19 tracked objects a call that stay) paid for collections that found
nothing to free.  Measured on 2 cores with gc.callbacks, 20,000 `rp.Executor(bundle=False)`
calls of distinct arguments: the collector took 30-35 us of the client's CPU a call at 700
(~1,130 young collections, ~100 middle, 6 full) against 14-16 us at 10,000 (65, 6, none), in
three alternating pairs.  At YOUNG (10,000) a young collection runs every ~500 calls instead of
every ~18, and the full ones as rarely as the middle ones allow; garbage in cycles waits for up
to YOUNG more objects before it is freed (a few MB at most).

`hold()` raises the threshold for an open Session and `release()` gives Python's back when the
last one closes; the user's own setting stands: nothing changes when the thresholds are not
CPython's defaults when the first session opens, or when they were changed meanwhile (then
release leaves them too), nor when PILOT_GC is 0 / false / no / off.  The pilot's own processes
keep Python's: at 1,024 simulated nodes the bootstrap's, the agents' and the hosts' CPU a unit
did not move beyond this machine's drift with it (two alternating pairs).
"""

from __future__ import annotations

import gc
import os
import threading

YOUNG = 10_000  # objects between two collections of the youngest generation
_DEFAULT = (700, 10, 10)  # CPython's own (3.8 - 3.12)
_OURS = (YOUNG, *_DEFAULT[1:])
_OFF = ("0", "false", "no", "off")
_lock = threading.Lock()
_open = 0  # sessions holding it
_found: tuple[int, int, int] | None = None  # the thresholds found before, when ours were set


def _wanted(environ) -> bool:
    return environ.get("PILOT_GC", "").strip().lower() not in _OFF


def hold(environ=os.environ) -> None:
    """A Session opened: the young threshold raised if the process has Python's default."""
    global _open, _found
    with _lock:
        _open += 1
        if _open == 1 and _wanted(environ) and gc.get_threshold() == _DEFAULT:
            _found = _DEFAULT
            gc.set_threshold(*_OURS)


def release() -> None:
    """A Session closed: Python's threshold back once none is open (if it is still ours)."""
    global _open, _found
    with _lock:
        if _open == 0:
            return
        _open -= 1
        if _open == 0 and _found is not None:
            if gc.get_threshold() == _OURS:
                gc.set_threshold(*_found)
            _found = None
