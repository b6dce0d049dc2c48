"""What the null-unit bench scripts share: one 2-core local.localhost pilot, and what /proc says
about the processes of its session.

    with two_core_pilot(where) as run:      # the partition is ACTIVE, `warm` units have run
        units = run.umgr.submit_units(...)
        run.startup_s, run.agents()          # submit -> ACTIVE; the agents' pids
    in_fresh_process(__file__, [...], timeout)   # a script's measured run, in a new process

Used by bench/throughput.py, bench/memory.py, bench/sched_trace.py and bench/cpu_budget.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRUE = "/bin/true"
TICK = os.sysconf("SC_CLK_TCK")


class PilotRun:
    def __init__(self, session, pilot, umgr, startup_s: float) -> None:
        self.session, self.pilot, self.umgr, self.startup_s = session, pilot, umgr, startup_s

    @property
    def bootstrap(self) -> int:
        return self.pilot.job.pid

    def agents(self) -> list[int]:
        """The pids of the pilot's agents, as their logs say (agents are forked by a zygote:
        their command lines do not tell them apart)."""
        from pilot.pmgr.core import reaper

        live = set(reaper.session_processes(self.session.uid))
        out = []
        for part in self.pilot.partitions:
            with open(os.path.join(self.pilot.sandbox, f"{part.uid}.agent.log")) as f:
                found = re.search(r": up, pid (\d+)", f.read())
            if found is not None and int(found[1]) in live:
                out.append(int(found[1]))
        if not out:
            raise RuntimeError("no agent process found")
        return out


@contextmanager
def two_core_pilot(
    where: str | None = None,
    runtime: int = 30,
    warm: int = 4,
    keep: str | None = None,
    resource: str = "local.localhost",
    cores: int = 2,
):
    """A session in a fresh directory under `where` (default: the temp dir) with one pilot of
    one 2-core partition, ACTIVE, after `warm` units of /bin/true have run; canceled after.
    With `keep`, the session lives in that directory and stays there (for the views after);
    `resource` / `cores`: another resource and partition size (local.zero, 64: zero-launch)."""
    import pilot as rp

    if keep is not None:
        os.makedirs(keep, exist_ok=True)
    with _kept(keep) if keep is not None else tempfile.TemporaryDirectory(dir=where) as tmp:
        pd = rp.ComputePilotDescription(
            resource=resource,
            parts=[rp.ComputePartitionDescription(cores=cores)],
            cores=cores,
            runtime=runtime,
        )
        t0 = time.perf_counter()
        with rp.Session(dir=tmp) as session:
            pilot = rp.PilotManager(session).submit_pilots(pd)
            pilot.partitions[0].wait(rp.ACTIVE, timeout=60)
            startup = time.perf_counter() - t0
            umgr = rp.UnitManager(session)
            umgr.add_pilots(pilot)
            if warm:
                umgr.submit_units([rp.ComputeUnitDescription(executable=TRUE)] * warm)
                umgr.wait_units(timeout=60)
            try:
                yield PilotRun(session, pilot, umgr, startup)
            finally:
                pilot.cancel()
                pilot.wait(timeout=30)


@contextmanager
def _kept(path: str):
    yield path


def in_fresh_process(
    script: str, args: list[str], timeout: float, stream_stderr: bool = False
) -> dict | None:
    """Run `script --one ARGS` in a new interpreter (a measured run starts from nothing) and
    return the JSON its last line prints; None, with its stderr shown, when it failed.  With
    `stream_stderr` its stderr (progress lines) goes to ours as it is written."""
    out = subprocess.run(
        [sys.executable, script, "--one", *args],
        stdout=subprocess.PIPE,
        stderr=None if stream_stderr else subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        if out.stderr:
            print(out.stderr, file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def status_mb(pid: int, key: str) -> float:
    """A /proc/PID/status memory line (VmRSS, VmHWM) in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _stat(path: str) -> list[str]:
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_s(pid: int) -> dict[str, float]:
    """A process's CPU seconds: its own (user + system) and its reaped children's."""
    f = _stat(f"/proc/{pid}/stat")
    return {
        "own": (int(f[11]) + int(f[12])) / TICK,
        "children": (int(f[13]) + int(f[14])) / TICK,
    }


def threads_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (its name, its CPU seconds) for every thread of a process."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            f = _stat(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue  # (it ended)
        out[int(tid)] = (name, (int(f[11]) + int(f[12])) / TICK)
    return out


def machine_idle_s() -> float:
    """Idle + iowait seconds of all CPUs since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return (int(fields[3]) + int(fields[4])) / TICK
