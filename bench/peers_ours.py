"""Our row for the shared peer benchmark (run by its ours.sh with BENCH_* in the environment).

    OURS_CMD="python3 $PWD/bench/peers_ours.py" PEERS="limit" BENCH_OUT=/tmp/peers-out \
        ../shared/bench/peers/run_all.sh

Startup = Session + pilot with BENCH_WORKERS cores in one partition, until a warm-up round of
2 x BENCH_WORKERS units (executable and function units, so the function workers are up) has come
back.  exec = BENCH_N units of /bin/true; func = BENCH_N function units calling the harness's
`common.noop` (importable through the PYTHONPATH run_all.sh sets, so it travels by reference,
as it does for the peers), each placed on 1 core and run by the partition's persistent workers.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("BENCH_HOME", "."))

t_import = time.perf_counter()
from common import TRUE, WORKERS, N, emit, noop, now  # noqa: E402

import pilot as rp  # noqa: E402

import_s = time.perf_counter() - t_import


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = now()
        pd = rp.ComputePilotDescription(
            resource="local.localhost",
            parts=[rp.ComputePartitionDescription(cores=WORKERS)],
            cores=WORKERS,
            runtime=30,
        )
        with rp.Session(dir=tmp) as session:
            pilot = rp.PilotManager(session).submit_pilots(pd)
            umgr = rp.UnitManager(session)
            umgr.add_pilots(pilot)
            umgr.submit_units([rp.ComputeUnitDescription(executable=TRUE)] * (2 * WORKERS))
            umgr.submit_units([rp.ComputeUnitDescription(function=noop)] * (2 * WORKERS))
            if set(umgr.wait_units(timeout=120)) != {rp.DONE}:
                print("warm-up units failed", file=sys.stderr)
                return 1
            emit("ours", "startup", startup_s=now() - t0, import_s=import_s)
            t1 = now()
            units = umgr.submit_units(
                [rp.ComputeUnitDescription(executable=TRUE) for _ in range(N)]
            )
            states = umgr.wait_units([u.uid for u in units], timeout=600)
            emit("ours", "exec", n=N, run_s=now() - t1)
            if set(states) != {rp.DONE}:
                print(f"not all DONE: {set(states)}", file=sys.stderr)
                return 1
            t1 = now()
            units = umgr.submit_units(
                [rp.ComputeUnitDescription(function=noop, args=(i,)) for i in range(N)]
            )
            states = umgr.wait_units([u.uid for u in units], timeout=600)
            emit("ours", "func", n=N, run_s=now() - t1)
            if set(states) != {rp.DONE} or any(u.return_value != 0 for u in units):
                print(f"function units: {set(states)}", file=sys.stderr)
                return 1
            t2 = now()
        emit("ours", "shutdown", shutdown_s=now() - t2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
