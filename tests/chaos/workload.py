"""The units of a plan (tests/chaos/schedule.py), each writing a ground-truth log itself.

Every process of a unit appends to TRUTH (one `write` per line, O_APPEND: lines of
concurrent writers never mix), whatever the pilot reports:

    <unit uid> <rank> <pid> start <epoch s>
    <unit uid> <rank> <pid> end <epoch s>

`end` is the unit's last act before it exits 0 (a step that fails skips it).  A process unit
runs WORK/unit.sh (`SCRIPT`; its arguments say what to do); a function unit logs the same from
Python.  A unit is named `w<wave>.i<item>` (its description's `name`), so that the checker can
tell which item of which wave a unit is.  The shapes:
    sleep     sleeps (lognormal, 0.05-3 s); as root in a sandbox of its own under WORK/
              sandboxes (a small tmpfs when the plan fills it), some writing 20-200 KB to stdout
    ranks     2-4 ranks, each its own process (rp.POSIX), each logging with its rank
    function  `logged_call` of this module, called by a function worker
    staging   a file of the client staged in (TRANSFER), copied with the unit's uid appended to
              out.txt, staged back to the client's OUT/<name>.txt
"""

from __future__ import annotations

import os
import time

import pilot as rp
from tests.chaos.schedule import Schedule

STAGED_IN = "chaos-in.txt"  # in the client's directory (the seed's work directory)
OUT = "out"  # the staged-out files, in the client's directory


def logged_call(truth: str, sleep: float) -> str:
    """A function unit: its start and end in the ground-truth log, as a process unit's."""
    uid = os.environ.get("PILOT_UNIT_ID", "?")
    write_truth(truth, uid, 0, "start")
    time.sleep(sleep)
    write_truth(truth, uid, 0, "end")
    return uid


def write_truth(truth: str, uid: str, rank: int, what: str) -> None:
    line = f"{uid} {rank} {os.getpid()} {what} {time.time():.6f}\n".encode()
    fd = os.open(truth, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


SCRIPT = """# a chaos unit (tests/chaos/workload.py): TRUTH SLEEP OUTPUT STAGING
r=${PILOT_RANK:-0}
echo "$PILOT_UNIT_ID $r $$ start $(date +%s.%N)" >> "$1" || exit 1
if [ "$4" = 1 ]; then cat in.txt > out.txt && echo "$PILOT_UNIT_ID" >> out.txt || exit 2; fi
if [ "$3" != 0 ]; then head -c "$3" /dev/zero | tr '\\0' x || exit 3; fi
sleep "$2" || exit 4
echo "$PILOT_UNIT_ID $r $$ end $(date +%s.%N)" >> "$1"
"""


def write_script(work: str) -> str:
    """The units' script, in the seed's work directory (a unit's arguments are shell words
    the launcher expands once more: what must run in the unit is in a file, not in them)."""
    path = os.path.join(work, "unit.sh")
    with open(path, "w") as f:
        f.write(SCRIPT)
    return path


def description(
    plan: Schedule, wave: int, i: int, truth: str, sandboxes: str
) -> rp.ComputeUnitDescription:
    """Item `i` of wave `wave` (the same description for every client that asks)."""
    item = plan.waves[wave].items[i]
    name = f"w{wave}.i{i}"
    if item.kind == "function":
        return rp.ComputeUnitDescription(
            name=name, function="tests.chaos.workload.logged_call", args=(truth, item.sleep)
        )
    kw: dict = {}
    if item.kind == "ranks":
        kw.update(ranks=item.ranks, cpu_process_type=rp.POSIX)
    if item.kind == "staging":
        kw.update(
            input_staging=[
                {"source": f"client:///{STAGED_IN}", "target": "unit:///in.txt",
                 "action": rp.TRANSFER}
            ],
            output_staging=[
                {"source": "unit:///out.txt", "target": f"client:///{OUT}/{name}.txt",
                 "action": rp.TRANSFER}
            ],
        )  # fmt: skip
    if item.kind == "sleep" and plan.root:
        kw["sandbox"] = os.path.join(sandboxes, name)
    script = os.path.join(os.path.dirname(truth), "unit.sh")
    args = [script, truth, str(item.sleep), str(item.output), str(int(item.kind == "staging"))]
    return rp.ComputeUnitDescription(name=name, executable="/bin/sh", arguments=args, **kw)


def wave(plan: Schedule, k: int, truth: str, sandboxes: str):
    """The items of wave k, in order, as a generator (a named stream's iterable)."""
    for i in range(len(plan.waves[k].items)):
        yield description(plan, k, i, truth, sandboxes)


def read_truth(truth: str) -> list[tuple[str, int, int, str, float]]:
    """The log's lines as (uid, rank, pid, start|end, time); a torn last line is skipped."""
    rows = []
    try:
        with open(truth) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return rows
    for line in lines:
        parts = line.split()
        if len(parts) != 5 or parts[3] not in ("start", "end"):
            continue
        try:
            rows.append((parts[0], int(parts[1]), int(parts[2]), parts[3], float(parts[4])))
        except ValueError:
            continue
    return rows
