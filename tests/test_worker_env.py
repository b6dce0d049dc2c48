"""A function worker's per-call environment (agent/workers/worker_env.py): what a call and the
programs it starts see, and no memory kept per value (os.environ's setenv kept ~80 bytes of every
distinct value: ~440 bytes a call)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import os, subprocess
from pilot.agent.workers.worker_env import WorkerEnviron

def rss_mb():
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024

def shell(cmd):
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout.strip()

w = WorkerEnviron()
w.update({"PILOT_UNIT_ID": "unit.000000", "KEEP": "same"})
before = rss_mb()
for i in range(200_000):  # distinct values, as every call's ids are
    w.update({"PILOT_UNIT_ID": f"unit.{i:06d}", "SANDBOX": "/s/" + "x" * (i % 50), "KEEP": "same"})
grew = rss_mb() - before
assert grew < 3, f"RSS grew {grew:.1f} MB over 200,000 calls"
assert os.environ["PILOT_UNIT_ID"] == "unit.199999"
assert shell("echo $PILOT_UNIT_ID $KEEP") == "unit.199999 same"  # the C environment too

w.set("SANDBOX", "/a/much/longer/value/" * 20)  # past its buffer: a new one
assert shell("echo $SANDBOX") == "/a/much/longer/value/" * 20 == os.environ["SANDBOX"]
w.set("MINE", "v 1")
assert shell("echo ${MINE-unset}") == "v 1"
w.unset("MINE")
assert "MINE" not in os.environ and shell("echo ${MINE-unset}") == "unset"
w.set("MINE", "v2")  # set again after an unset: put back
assert shell("echo ${MINE-unset}") == "v2" == os.environ["MINE"]

os.environ["PILOT_UNIT_ID"] = "set.by.the.call"  # user code changes it its own way
w.set("PILOT_UNIT_ID", "unit.000007")  # the next call's value still reaches both
assert shell("echo $PILOT_UNIT_ID") == "unit.000007" == os.environ["PILOT_UNIT_ID"]

try:
    w.set("BAD", "a\0b")
except ValueError:
    pass
else:
    raise AssertionError("a NUL in a value was accepted")
print("ok", round(grew, 2))
"""


def test_per_call_environment_is_seen_and_keeps_no_memory_per_value():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok"), out.stdout
