"""pilot/malloc.py: the client's glibc malloc keeps what it frees once the client moves a call's
megabytes, and only then; a user's own setting stands.  Each case runs in a fresh interpreter
(mallopt is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT


def _glibc_with_mallinfo2() -> bool:
    """glibc 2.33 or later (mallinfo2, which the probe reads), its own malloc (no other
    allocator preloaded)."""
    if not sys.platform.startswith("linux") or os.environ.get("LD_PRELOAD"):
        return False
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION") or ""
        if os.path.exists("/etc/ld.so.preload"):
            with open("/etc/ld.so.preload") as f:
                if f.read().strip():
                    return False
    except (ValueError, OSError):
        return False
    import ctypes

    return version.startswith("glibc") and hasattr(ctypes.CDLL(None), "mallinfo2")


pytestmark = pytest.mark.skipif(
    not _glibc_with_mallinfo2(), reason="glibc's own malloc, 2.33 or later, only"
)

# how many chunks glibc serves with mappings of their own (mallinfo2's hblks) grows by one for
# a buffer larger than any freed before under glibc's own thresholds (they move up to the
# largest chunk freed), and by none under 16 MiB once they are fixed there
PROBE = textwrap.dedent(
    """
    import ctypes, json, pickle, sys
    sys.path.insert(0, {root!r})
    from pilot import functions, malloc

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Info

    def mapped(mib):
        before = libc.mallinfo2().hblks
        buf = bytearray(mib << 20)
        return libc.mallinfo2().hblks - before

    out = {{"before": mapped(3)}}
    functions.dumps(((1, "small"), {{}}))  # (a few numbers: nothing changes)
    out["small"] = malloc._done[:]
    {step}
    out["after"] = mapped(12)
    out["done"] = malloc._done[:]
    print(json.dumps(out))
    """
)


def _probe(step: str, **env) -> dict:
    import json

    base = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    base.pop("PILOT_MALLOC", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(root=ROOT, step=step)],
        env={**base, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_large_argument_fixes_the_thresholds_once():
    got = _probe('functions.dumps(((b"x" * 2_000_000,), {}))')
    assert got["before"] == 1  # (glibc's own: a mapping for 3 MiB)
    assert got["small"] == []  # a call of a few numbers leaves malloc as it is
    assert got["done"] == [True] and got["after"] == 0  # from the heap now


def test_a_large_value_loaded_fixes_them_too():
    # (the value pickled here without functions.dumps, which would fix them first)
    got = _probe(
        'value = functions.wrap(pickle.dumps(b"v" * 100_000, 5)); '
        "assert malloc._done == [], malloc._done; "
        "functions.unpack_value(value)"
    )
    assert got["done"] == [True] and got["after"] == 0


def test_a_worker_started_with_them_is_not_set_again():
    got = _probe('malloc.set_by_environment(); functions.dumps(((b"x" * 2_000_000,), {}))')
    assert got["done"] == [True] and got["after"] == 1  # (the probe's process has glibc's own)


@pytest.mark.parametrize(
    "env",
    [
        {"PILOT_MALLOC": "0"},
        {"PILOT_MALLOC": "off"},
        {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"},
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
    ],
)
def test_a_users_own_setting_stands(env):
    got = _probe('functions.dumps(((b"x" * 2_000_000,), {}))', **env)
    assert got["done"] == [False] and got["after"] == 1
