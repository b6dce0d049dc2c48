"""glibc's malloc in the client: large chunks served from the heap and kept there, instead of
given back to the system and mapped anew.

glibc serves a chunk over its mmap threshold (128 KiB, then moving up to the size of the
largest chunk freed) with a fresh mapping, and gives back the top of its heap past its trim
threshold: a call's megabytes (pickled, written, read back, unpickled) paid a page fault for
each 4 KiB page of each copy.  Measured on 2 cores: pickling 2 MB of arguments 1.2-1.6 ms
against 0.05 ms once both thresholds are fixed at 16 MiB; rp.Executor's round trip of 2 MB
there and back (by reference, pilot/functions.py) 15-20 % shorter (alternating runs; this
machine's 2 MB round trips vary 7-19 ms from minute to minute).  The function workers get the
same setting through GLIBC_TUNABLES when their runner starts them (agent/runners/functions.py,
`set_by_environment`); the client's process is the user's, already started, so `keep_freed`
sets it with mallopt(3) when the process first pickles a call holding a buffer of LARGE bytes
or more, or loads such a value (pilot/functions.py `dumps`, `unwrap`): a client that moves
no megabytes keeps glibc's own behaviour (with it, 100,000 small units peaked ~10 % higher,
their lists and dicts of megabytes grown in the heap instead of remapped).

A user's own setting stands: nothing is changed when the environment sets glibc's malloc
itself (GLIBC_TUNABLES naming glibc.malloc.*, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
MALLOC_TOP_PAD_) or PILOT_MALLOC is 0 / false / no / off; nor off glibc (musl, macOS).
What it costs: chunks under 16 MiB come from the heap, and glibc gives back only the top of a
heap (past 16 MiB free there): what is freed below it stays in the process for later chunks,
so a client's memory stays nearer its peak.  Chunks of 16 MiB and more are mapped and given
back as before.
"""

from __future__ import annotations

import os

THRESHOLD = 16 << 20  # bytes (MALLOC_TUNABLES of agent/workers/function_worker.py: the same)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt(3)'s parameters (glibc's malloc.h)
_OWN = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_OFF = ("0", "false", "no", "off")
_done: list[bool] = []  # (once a process: [applied]; two threads racing both set the same)


def keep_freed(environ=os.environ) -> bool:
    """Fix glibc's mmap and trim thresholds at THRESHOLD in this process, once (the module's
    header); True when they are set (now or before), False when left as they are."""
    if not _done:
        _done.append(_apply(environ))
    return _done[0]


def set_by_environment() -> None:
    """This process was started with the thresholds in its GLIBC_TUNABLES (a function
    worker, which takes the variable out of its environment): nothing to do later."""
    if not _done:
        _done.append(True)


def _apply(environ) -> bool:
    if environ.get("PILOT_MALLOC", "").strip().lower() in _OFF:
        return False
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", "") or any(v in environ for v in _OWN):
        return False  # (the user's own setting)
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):  # (glibc's alone: musl's mallopt does nothing)
            return False
    except (ValueError, OSError):
        return False
    import ctypes  # (here: most processes that import pilot.functions never need it)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # (mmap first: setting it also ends glibc's moving of both thresholds)
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, THRESHOLD)
    )
