"""glibc's malloc in the client: keep up to 16 MiB of what it frees, instead of giving every
large chunk back to the system and mapping it anew.

glibc serves a chunk over its mmap threshold (128 KiB, then moving up to the size of the
largest chunk freed) with a fresh mapping, and gives back the top of its heap past its trim
threshold: a call's megabytes (pickled, written, read back, unpickled) paid a page fault for
each 4 KiB page of each copy.  Measured on 2 cores: pickling 2 MB of arguments 1.2-1.6 ms
against 0.05 ms once the thresholds are fixed at 16 MiB, and rp.Executor's round trip of 2 MB
there and back (by reference, pilot/functions.py) 16-18 ms against 8-10 ms in the same run.
The function workers get the same setting through GLIBC_TUNABLES when their runner starts
them (agent/runners/functions.py); the client's process is the user's, already started, so
`keep_freed` sets it with mallopt(3), when the process first pickles or loads a LARGE call or
value (pilot/functions.py `dumps`, `unwrap`): a client that moves no megabytes keeps glibc's
own behaviour (with it, 100,000 small units peaked ~10 % higher, their lists and dicts of
megabytes grown in the heap instead of remapped).

A user's own setting stands: nothing is changed when the environment sets the malloc
thresholds itself (GLIBC_TUNABLES naming glibc.malloc.*, MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_) or PILOT_MALLOC is `0`; nor off glibc (musl, macOS).
What it costs: up to 16 MiB freed at the top of each malloc arena stays in the process for
its next large chunk, and chunks under 16 MiB come from the heap instead of mappings of their
own.  Chunks of 16 MiB and more are mapped and given back as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

THRESHOLD = 16 << 20  # bytes (MALLOC_TUNABLES of agent/workers/function_worker.py: the same)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt(3)'s parameters (glibc's malloc.h)
_OWN = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_lock = threading.Lock()
_done: list[bool] = []  # (once a process: [applied])


def keep_freed(environ=os.environ) -> bool:
    """Fix glibc's mmap and trim thresholds at THRESHOLD in this process, once (the module's
    header); True when they were set (now or before), False when left as they are."""
    with _lock:
        if not _done:
            _done.append(_apply(environ))
        return _done[0]


def _apply(environ) -> bool:
    if environ.get("PILOT_MALLOC", "").strip() == "0":
        return False
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", "") or any(v in environ for v in _OWN):
        return False  # (the user's own setting)
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (glibc's alone: musl has a mallopt that does nothing)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # (mmap first: setting it also ends glibc's moving of both thresholds)
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, THRESHOLD)
    )
