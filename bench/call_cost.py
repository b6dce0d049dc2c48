"""Where a call's time goes: one call at a time on a warm rp.Executor, the CPU each thread of
each process spends per call (from /proc, over every call of the row), beside the wall time of
a round trip; in one run, for a small call and for 2 MB there and back, the latter both by
reference (the pilot sees the session's data directory: only file names cross it) and as
bytes (the pilot told of no directory: the bytes cross every hop, as for a pilot on another
host).

    python bench/call_cost.py                  # ~1 min on 2 cores
    python bench/call_cost.py --calls 500 --size 2000000

Each row is a fresh process (the executor's own local pilot).  Columns: the client's threads
(main: the caller; feeder: rp.Executor's; channel: the pilot link's; writer: the store's;
zmq: libzmq's I/O thread, where CURVE encrypts), the bootstrap, the agent and the function
worker (each process's threads together), us per call.

A second table splits the round trip by the call's unit's state times (one clock: every
process is on this host), median over the row's calls, ms:
    submit -> NEW            the caller packs the call, the feeder makes its unit
    NEW -> QUEUED            the store writes the unit, the channel sends it, the bootstrap
                             forwards it, the agent takes it in (QUEUED: the agent's time)
    QUEUED -> EXECUTING      placed, handed to a function worker
    EXECUTING -> DONE        the call in the worker, its reply read by the agent
    DONE -> result           the agent's report, the bootstrap, the client's channel, the
                             future set and the caller woken
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TCK = os.sysconf("SC_CLK_TCK")


def identity(x):
    return x


def _threads(pid: int) -> dict:
    """(tid, name) -> CPU seconds, for each thread of `pid`."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[(int(tid), stat[stat.index("(") + 1 : stat.rindex(")")])] = (
            int(fields[11]) + int(fields[12])
        ) / TCK
    return out


def _role(pid: int, me: int) -> str:
    if pid == me:
        return "client"
    with open(f"/proc/{pid}/cmdline") as f:
        argv = f.read().split("\0")
    mod = argv[2] if len(argv) > 2 else ""
    if mod.endswith("bootstrap"):
        return "bootstrap"
    if mod.endswith("function_worker"):
        return "worker"
    return "agent"  # (the zygote and the agent it forked: the zygote itself stays idle)


def one(kind: str, calls: int, size: int) -> dict:
    """(in the fresh process) The row's numbers."""
    os.environ.setdefault("PILOT_SESSIONS_DIR", tempfile.mkdtemp())
    import pilot as rp
    from pilot.pmgr.core import pilot_manager, reaper

    if kind == "bytes":  # (no directory to share: as a pilot on another host)
        pilot_manager.data_files.for_pilot = lambda data, local: None
    data = b"x" * size
    fn, args = (pow, (2, 2)) if kind == "call" else (identity, (data,))
    names = {t.native_id: t.name for t in threading.enumerate()}
    with rp.Executor(max_workers=2) as ex:
        for _ in range(20):
            ex.submit(fn, *args).result()
        me = os.getpid()
        pids = [me, *reaper.session_processes(ex.session.uid)]
        roles = {p: _role(p, me) for p in pids}
        before = {p: _threads(p) for p in pids}
        marks = []  # (submitted, unit, result) of each call, time.time()
        t0 = time.perf_counter()
        for i in range(calls):
            sent = time.time()
            fut = ex.submit(fn, i, 2) if kind == "call" else ex.submit(fn, *args)  # (its own)
            fut.result()
            marks.append((sent, fut.unit, time.time()))
        wall = (time.perf_counter() - t0) / calls
        after = {p: _threads(p) for p in pids}
        names.update({t.native_id: t.name for t in threading.enumerate()})
    row: dict = {"round trip ms": wall * 1e3, "legs": _legs(marks)}
    for p in pids:
        role = roles[p]
        for key, cpu in after[p].items():
            spent = (cpu - before[p].get(key, 0.0)) / calls * 1e6
            if role == "client":
                name = names.get(key[0], key[1])
                col = {
                    "MainThread": "main",
                    "pilot-executor": "feeder",
                    "pmgr-channel": "channel",
                    "pmgr-store-writer": "writer",
                }.get(name, "zmq" if name.startswith("ZMQ") else "other")
                col = f"client {col}"
            else:
                col = role
            row[col] = row.get(col, 0.0) + spent
    return row


LEGS = [
    ("submit -> NEW", None, "NEW"), ("NEW -> QUEUED", "NEW", "QUEUED"),
    ("QUEUED -> EXECUTING", "QUEUED", "EXECUTING"), ("EXECUTING -> DONE", "EXECUTING", "DONE"),
    ("DONE -> result", "DONE", None),
]  # fmt: skip


def _legs(marks: list) -> dict:
    """The median ms of each leg (LEGS) over the calls' (submitted, unit, result)."""
    import statistics

    out = {}
    for label, start, end in LEGS:
        spans = []
        for sent, unit, got in marks:
            at = dict(unit.history)
            t_start = sent if start is None else at.get(start)
            t_end = got if end is None else at.get(end)
            if t_start is not None and t_end is not None:
                spans.append((t_end - t_start) * 1e3)
        out[label] = statistics.median(spans) if spans else float("nan")
    return out


COLUMNS = [
    "client main", "client feeder", "client channel", "client writer", "client zmq",
    "bootstrap", "agent", "worker",
]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--size", type=int, default=2_000_000)
    ap.add_argument("--one", choices=("call", "reference", "bytes"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.calls, args.size)))
        return 0
    rows = []
    for kind, label, calls in [
        ("call", "call (pow)", args.calls * 10),
        ("reference", f"{args.size:,} B by reference", args.calls),
        ("bytes", f"{args.size:,} B as bytes", args.calls),
    ]:
        done = subprocess.run(
            [sys.executable, __file__, "--one", kind, "--calls", str(calls)]
            + ["--size", str(args.size)],
            capture_output=True, text=True, timeout=900, cwd=ROOT,
        )  # fmt: skip
        if done.returncode:
            sys.stderr.write(done.stderr)
            return 1
        rows.append((label, json.loads(done.stdout.strip().splitlines()[-1])))
    print("\nCPU per call, us (each thread's /proc time over the row's calls / calls)\n")
    print("| row | round trip ms | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    for label, row in rows:
        cells = [f"{row.get(c, 0.0):,.0f}" for c in COLUMNS]
        print(f"| {label} | {row['round trip ms']:.2f} | " + " | ".join(cells) + " |")
    print("\nWhere the round trip goes, ms (median of each leg over the row's calls)\n")
    print("| row | " + " | ".join(label for label, _, _ in LEGS) + " |")
    print("|---" * (len(LEGS) + 1) + "|")
    for label, row in rows:
        cells = [f"{row['legs'][leg]:.2f}" for leg, _, _ in LEGS]
        print(f"| {label} | " + " | ".join(cells) + " |")
    by_ref, as_bytes = rows[1][1]["round trip ms"], rows[2][1]["round trip ms"]
    print(f"\nby reference / as bytes: {by_ref / as_bytes:.2f} (round trip, same run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
