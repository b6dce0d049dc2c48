"""Where a freed core waits: the kernel's scheduler events while null units run (needs root).

    sudo python bench/sched_trace.py [--n 6000] [--window 0.4]

Runs N units of /bin/true (1 core each) on a 2-core local.localhost pilot, and for `window`
seconds in the middle records the scheduler's tracepoints (tracefs: sched_switch, sched_wakeup,
sched_wakeup_new, sched_process_exit).  The starters are the agent's main thread and its
lane threads (agent/runners/lanes.py: one per core, they start single-core units and their
successors).
For every unit that exits it finds the next process a starter creates for the core that unit
freed, and prints:
  exit -> next start   from the unit's exit until the clone of the next unit there (the freed
                       core is idle for most of it), split into: until a starter is woken,
                       until it runs, and its own work until the clone
  handled on           where a starter first ran after each exit, and which: on the freed
                       core, or on the other core, whose unit it then preempts while the freed
                       core idles (this counts exits, not wake-ups: a unit the agent
                       started itself wakes it at end-of-file on each pipe and at its pidfd)
  CPU share            of both cores in the window: idle, units (children of the agent), the
                       agent, its lane threads, and the rest (client, bootstrap, ZeroMQ)
  idle beside          a core's idle time by what the other core ran meanwhile: idle beside
                       the agent is the agent's work that no unit overlaps
The tracepoints add a few microseconds to every switch: compare runs of this script, not its
numbers with bench/throughput.py.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402
from bench.local_pilot import two_core_pilot  # noqa: E402

TRACING = "/sys/kernel/tracing"
EVENTS = "sched:sched_switch sched:sched_wakeup sched:sched_wakeup_new sched:sched_process_exit"
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")


def _write(name: str, value: str) -> None:
    with open(os.path.join(TRACING, name), "w") as f:
        f.write(value)


def record(n: int, window: float) -> tuple[str, dict[int, str]]:
    """(the trace text, the agent's threads that start units: tid -> "agent" or "launcher")."""
    if not os.path.isdir(os.path.join(TRACING, "events")):
        os.system(f"mount -t tracefs nodev {TRACING} 2>/dev/null")
    _write("tracing_on", "0")
    _write("trace", "")
    _write("buffer_size_kb", "65536")
    _write("set_event", EVENTS)
    try:
        with two_core_pilot(warm=8) as run:
            agent = run.agents()[0]
            starters = {agent: "agent"}
            for tid in os.listdir(f"/proc/{agent}/task"):  # its lane thread, if it has one
                with open(f"/proc/{agent}/task/{tid}/comm") as f:
                    if f.read().strip() == "agent-lane":
                        starters[int(tid)] = "launcher"

            def window_on():
                time.sleep(0.5)
                _write("tracing_on", "1")
                time.sleep(window)
                _write("tracing_on", "0")

            th = threading.Thread(target=window_on)
            th.start()
            cud = rp.ComputeUnitDescription
            units = run.umgr.submit_units([cud(executable="/bin/true") for _ in range(n)])
            run.umgr.wait_units([u.uid for u in units], timeout=600)
            th.join()
        with open(os.path.join(TRACING, "trace")) as f:
            return f.read(), starters
    finally:
        _write("tracing_on", "0")
        _write("set_event", "")
        _write("trace", "")


def analyse(text: str, starters: dict[int, str]) -> dict:
    events = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            t, cpu, kind, rest = float(m[4]) * 1e6, int(m[3]), m[5], m[6]
            events.append((t, cpu, int(m[2]), kind, rest))
    if not events:
        raise RuntimeError("no events recorded (is this root, with tracefs?)")
    children = {
        int(re.search(r" pid=(\d+)", e[4])[1]) for e in events if e[3] == "sched_wakeup_new"
    }
    gaps, parts, handled = [], ([], [], []), Counter()
    freed: dict[int, dict] = {}  # core -> its unit's exit, and when the agent woke / ran since
    busy: Counter = Counter()
    beside: Counter = Counter()  # a core's idle time by what the other core runs
    on: dict[int, str] = {}  # core -> the role running there
    last = events[0][0]
    for t, cpu, pid, kind, rest in events:
        for core, role in on.items():
            busy[role] += t - last
            if role == "idle":  # (on a bigger machine: the busiest role elsewhere)
                others = {r for c, r in on.items() if c != core}
                beside[next((r for r in _RANKED if r in others), "idle")] += t - last
        last = t
        if kind == "sched_process_exit" and pid in children:
            freed[cpu] = {"exit": t, "cpu": cpu}
        elif kind == "sched_wakeup" and _woken(rest) in starters:
            for f in freed.values():
                f.setdefault("woken", t)
        elif kind == "sched_wakeup_new" and pid in starters:
            target = int(re.search(r"target_cpu=(\d+)", rest)[1])
            f = freed.pop(target, None)
            if f is not None:
                gaps.append(t - f["exit"])
                if "woken" in f and "ran" in f:
                    for part, value in zip(
                        parts, (f["woken"] - f["exit"], f["ran"] - f["woken"], t - f["ran"])
                    ):
                        part.append(value)
        elif kind == "sched_switch":
            nxt = int(re.search(r"next_pid=(\d+)", rest)[1])
            on[cpu] = _role(nxt, starters, children)
            if nxt in starters:
                for f in freed.values():
                    if "woken" in f and "ran" not in f:
                        f["ran"] = t
                        where = "the freed core" if cpu == f["cpu"] else "the other core"
                        handled[f"{where} ({starters[nxt]})"] += 1
    span = sum(busy.values()) or 1
    return {
        "gaps": gaps,
        "parts": parts,
        "handled": handled,
        "busy": {k: v / span for k, v in busy.items()},
        "beside": {k: v / span for k, v in beside.items()},
    }


_RANKED = ("agent", "launcher", "units", "the rest")


def _woken(rest: str) -> int:
    found = re.search(r" pid=(\d+)", " " + rest)
    return int(found[1]) if found else -1


def _role(pid: int, starters: dict[int, str], children: set) -> str:
    if pid == 0:
        return "idle"
    if pid in starters:
        return starters[pid]
    return "units" if pid in children else "the rest"


def _shares(shares: dict) -> str:
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v * 100:.1f}%" for k, v in ranked)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--window", type=float, default=0.4)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (tracefs)", file=sys.stderr)
        return 2
    text, starters = record(args.n, args.window)
    got = analyse(text, starters)
    gaps = sorted(got["gaps"])
    if not gaps:
        print("no exit was followed by a start in the window", file=sys.stderr)
        return 1
    q = statistics.quantiles(gaps, n=10)
    print(
        f"exit -> next start on the freed core: {len(gaps)} units, median {q[4]:.0f} us, "
        f"p10 {q[0]:.0f}, p90 {q[8]:.0f}"
    )
    steps = ("exit -> starter woken", "woken -> running", "running -> the clone (its work)")
    for name, values in zip(steps, got["parts"]):
        if values:
            print(f"  {name}: median {statistics.median(values):.0f} us")
    total = sum(got["handled"].values()) or 1
    print(
        "exits handled on (by the agent, or its lane thread): "
        + ", ".join(f"{k} {v * 100 / total:.0f}%" for k, v in got["handled"].most_common())
    )
    print("CPU share of both cores: " + _shares(got["busy"]))
    print("a core idle while the other runs: " + _shares(got["beside"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
