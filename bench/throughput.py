"""Null-unit throughput through the whole path, beside the fork/exec limit of this machine.

    python bench/throughput.py [--n 5000] [--reps 3]

Each repetition, interleaved so that a noisy minute hits every row:
  limit  posix_spawn of /bin/true with 2 children in flight, reaped with os.wait (the fastest way
         found to launch processes from Python here), measured in this process
  api    what a user measures, as issue 30 defines it: a fresh process measures the limit itself
         (after `import pilot`), then Session (default place, on disk) + a local.localhost pilot
         with one 2-core partition, nothing run before; rate = N / (submit_units called ->
         wait_units returned), against the limit it measured just before.  Pilot start here is
         submit_pilots -> the partition ACTIVE in a cold process
  ours   a fresh process: Session + 2-core local.localhost pilot with one partition; N units of
         /bin/true, 1 core each, from submit until every unit is DONE and its state persisted
         (store flushed); also pilot start (submit -> partition ACTIVE), first unit (submit_units
         called -> the first unit EXECUTING), the tail (the last unit's DONE, as the agent
         stamped it -> every DONE seen by wait_units and persisted) and peak RSS of the client,
         the bootstrap and the agent
ours runs twice per repetition: with the session directory (and so the unit sandboxes) on tmpfs
(/dev/shm), and on the disk under /tmp.  The limit creates no files at all.  A unit of /bin/true
writes nothing, so it gets no output files, and its empty sandbox directory becomes a later
unit's (agent/runners/stager.py, spares.py): a new inode costs 100-700 us of kernel time on
this disk.
The table shows medians [min-max] and ours / limit from the same repetition.
Why `api` and `ours` differ: `ours` warms the pilot with 4 units (its lane threads, the first
sandboxes and spares exist before the clock starts), ends its clock when the store has every
record (`api` when wait_units returns), and divides by a limit measured in the bench's own
small process; `api` divides by a limit measured in the client, which has imported the whole
client (more memory to map for every posix_spawn: measured lower, so its ratio reads higher).
What matters to users is `api`: the first units of a cold pilot count, as they do for them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.local_pilot import TRUE, in_fresh_process, status_mb, two_core_pilot  # noqa: E402


def limit_rate(n: int, inflight: int = 2) -> float:
    env = dict(os.environ)
    launched = done = running = 0
    t0 = time.perf_counter()
    while done < n:
        while running < inflight and launched < n:
            os.posix_spawn(TRUE, [TRUE], env)
            running += 1
            launched += 1
        os.wait()
        running -= 1
        done += 1
    return n / (time.perf_counter() - t0)


def api_run(n: int) -> dict:
    """The `api` row, inside a fresh process (see the header)."""
    import pilot as rp

    limit_rate(50)
    lim = limit_rate(n)
    pd = rp.ComputePilotDescription(
        resource="local.localhost", runtime=30, parts=[rp.ComputePartitionDescription(cores=2)]
    )
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PILOT_SESSIONS_DIR"] = tmp
        with rp.Session() as session:
            t0 = time.perf_counter()
            pilot = rp.PilotManager(session).submit_pilots(pd)
            pilot.partitions[0].wait(rp.ACTIVE, timeout=60)
            startup = time.perf_counter() - t0
            umgr = rp.UnitManager(session)
            umgr.add_pilots(pilot)
            descs = [rp.ComputeUnitDescription(executable=TRUE) for _ in range(n)]
            t1 = time.perf_counter()
            umgr.submit_units(descs)
            states = umgr.wait_units(timeout=600)
            run_s = time.perf_counter() - t1
            assert set(states) == {rp.DONE}, "not every unit is DONE"
            pilot.cancel()
    return {"rate": n / run_s, "limit": lim, "ratio": n / run_s / lim, "startup_s": startup}


def one_run(n: int, where: str) -> dict:
    """Run inside a fresh process; returns the measurements."""
    import pilot as rp

    with two_core_pilot(where) as run:
        t1, t1_epoch = time.perf_counter(), time.time()
        units = run.umgr.submit_units(
            [rp.ComputeUnitDescription(executable=TRUE) for _ in range(n)]
        )
        states = run.umgr.wait_units([u.uid for u in units], timeout=600)
        run.session.writer.flush(timeout=120)
        run_s, flushed = time.perf_counter() - t1, time.time()
        assert states == [rp.DONE] * n, "not every unit is DONE"
        return {
            "rate": n / run_s,
            "run_s": run_s,
            "startup_s": run.startup_s,
            "first_s": min(dict(u.history)[rp.EXECUTING] for u in units) - t1_epoch,
            "tail_ms": 1e3 * (flushed - max(dict(u.history)[rp.DONE] for u in units)),
            "rss_client": status_mb(os.getpid(), "VmHWM"),
            "rss_bootstrap": status_mb(run.bootstrap, "VmHWM"),
            "rss_agent": max(status_mb(p, "VmHWM") for p in run.agents()),
            "write_lag_s": run.session.writer.max_lag,
        }


def fmt(values: list[float], digits: int = 0) -> str:
    med = statistics.median(values)
    return f"{med:.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--one", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run = api_run(args.n) if args.one == "api" else one_run(args.n, args.one)
        print(json.dumps(run))
        return 0
    places = {"tmpfs": "/dev/shm", "disk": tempfile.gettempdir()}
    limits: list[float] = []
    runs: dict[str, list[dict]] = {k: [] for k in places}
    api: list[dict] = []
    for rep in range(args.reps):
        run = in_fresh_process(__file__, ["api", "--n", str(args.n)], timeout=900)
        if run is None:
            return 1
        api.append(run)
        print(f"rep {rep + 1}: api {run['rate']:.0f}/s, {run['ratio']:.2f} x", file=sys.stderr)
        limit_rate(50)
        lim = limit_rate(args.n)
        limits.append(lim)
        for name, where in places.items():
            run = in_fresh_process(__file__, [where, "--n", str(args.n)], timeout=900)
            if run is None:
                return 1
            run["ratio"] = run["rate"] / lim
            runs[name].append(run)
            print(
                f"rep {rep + 1}: limit {lim:.0f}/s, ours on {name} {run['rate']:.0f}/s",
                file=sys.stderr,
            )
    print(
        f"\nN={args.n} null units (/bin/true, 1 core), 2-core local.localhost pilot, "
        f"{args.reps} reps, {os.cpu_count()} cores\n"
    )
    print(
        "| row | units/s median [min-max] | x limit | pilot start s | first unit s | tail ms | "
        "peak RSS MB client / bootstrap / agent | store write lag s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(f"| limit/spawn-c2 | {fmt(limits)} | 1.00 | - | - | - | - | - |")
    col = lambda k: [r[k] for r in api]  # noqa: E731
    print(
        f"| api (cold, limit in the client: {fmt(col('limit'))}/s) | {fmt(col('rate'))} | "
        f"{fmt(col('ratio'), 2)} | {fmt(col('startup_s'), 2)} | - | - | - | - |"
    )
    for name, rs in runs.items():
        col = lambda k, rs=rs: [r[k] for r in rs]  # noqa: E731
        print(
            f"| ours, sandboxes on {name} | {fmt(col('rate'))} | {fmt(col('ratio'), 2)} | "
            f"{fmt(col('startup_s'), 2)} | {fmt(col('first_s'), 3)} | {fmt(col('tail_ms'))} | "
            f"{max(col('rss_client')):.0f} / "
            f"{max(col('rss_bootstrap')):.0f} / {max(col('rss_agent')):.0f} | "
            f"{fmt(col('write_lag_s'), 2)} |"
        )
    print(
        "\ntargets: x limit >= 0.75 at N=5000 (api, and on disk); pilot start < 0.5 s; "
        "every RSS < 100 MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
