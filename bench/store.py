"""State store: write throughput per backend, and what persistence costs unit throughput.

    python bench/store.py [--n 5000] [--reps 3]

  writes   updates/s persisted by each backend: N unit docs + 4N history rows in batches of
           the store writer's size, the shape of N units' lifetimes (sqlite file; MongoDB
           through SecantusDB started here, or MONGODB_URI)
  units    N null units through the whole path on a 2-core localhost pilot (sandboxes on
           tmpfs), with persistence off (null://, the baseline, same run), the embedded sqlite
           store, MongoDB, and sqlite without unit_flow (what the plot's series cost a
           workload); the write lag is the largest age of a record when written
  rows     sqlite: one batch of 200 unit upserts + 400 history rows written one row per
           statement (executemany, the baseline) and several rows per statement (what the store
           does), alone and beside a busy Python thread (the client's other threads): sqlite3
           lets go of the interpreter for every statement, and getting it back waits for the
           busy thread's switch interval
  views    sqlite: the CPU the store writer spends a unit over its life (five upserts, five
           history rows) without the views' bookkeeping (unit_tally, units_executing,
           unit_flow: the baseline, same run), with the tally, with units_executing, and with
           unit_flow (the plot's series) and session_span
Target: the embedded store lowers unit throughput by no more than 10% against persistence off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pilot as rp  # noqa: E402
from pilot.pmgr.store import open_store  # noqa: E402
from pilot.pmgr.store.base import FIELDS, Batch  # noqa: E402


def write_rate(url: str, n: int) -> float:
    """Records/s a backend takes: N units' docs and 4 N history rows, in batches of the store
    writer's size (the store's BATCH_RECORDS[0]: a unit's doc and a row count as one record
    each)."""
    store = open_store(url)
    most = store.BATCH_RECORDS[0]
    batches, b = [], Batch()
    now = time.time()
    for i in range(n):
        uid = f"unit.{i:06d}"
        b.docs["units"][uid] = {
            "uid": uid,
            "session": "bench",
            "state": "DONE",
            "exit_code": 0,
            "description": {"executable": "/bin/true"},
        }
        for seq, s in enumerate(("SCHEDULING", "QUEUED", "EXECUTING", "DONE"), 1):
            b.history.append(("bench", "units", uid, s, now, None, seq))
        if len(b) >= most:
            batches.append(b)
            b = Batch()
    if len(b):
        batches.append(b)
    t0 = time.perf_counter()
    for b in batches:
        store.write_batch(b)
    dt = time.perf_counter() - t0
    store.close()
    return sum(len(b) for b in batches) / dt


def rows_batch(multi: bool, busy: bool, batches: int = 10) -> tuple[float, float]:
    """(wall ms, this thread's CPU ms) per batch of 200 upserts + 400 history rows."""
    import threading

    from pilot.pmgr.store import sqlite as sq

    store = sq.SqliteStore(f"sqlite:///{tempfile.mkdtemp()}/rows.db")
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(100))

    spinner = threading.Thread(target=spin, daemon=True)
    if busy:
        spinner.start()
    wall = cpu = 0.0
    try:
        for b in range(batches):
            uids = [f"unit.{b * 200 + i:07d}" for i in range(200)]
            row = {  # (the units table's columns, structured ones as JSON text)
                "session": "bench",
                "pilot": "pilot.0000",
                "partition": "pilot.0000.part.0000",
                "state": "EXECUTING",
                "exit_code": 0,
                "node": '"localhost"',
                "slots": '{"cpus":[0]}',
            }
            docs = [[u] + [row.get(c) for c in FIELDS["units"][1:]] for u in uids]
            hist = [
                ("bench", "units", u, s, time.time(), None, q)
                for u in uids
                for q, s in ((2, "QUEUED"), (3, "EXECUTING"))
            ]
            t0, c0 = time.perf_counter(), time.thread_time()
            store.db.execute("BEGIN")
            if multi:
                sq.execute_rows(store.db, sq.UPSERT["units"], docs)
                sq.execute_rows(store.db, sq.HISTORY_INSERT, hist)
            else:
                store.db.executemany(sq.UPSERT["units"], docs)
                store.db.executemany(sq.HISTORY_INSERT, hist)
            store.db.execute("COMMIT")
            wall += time.perf_counter() - t0
            cpu += time.thread_time() - c0
    finally:
        stop.set()
        if busy:
            spinner.join()
        store.close()
    return wall * 1e3 / batches, cpu * 1e3 / batches


def lifecycle(n: int, variant: str) -> float:
    """CPU us a unit of sqlite writes as the store writer makes them: every unit upserted in
    each of its states (NEW with its description, SCHEDULING, QUEUED with its partition,
    EXECUTING, DONE with its slots), a state a batch of 256 units, with its history rows.
    variant: "without" (no unit_tally, no units_executing, no unit_flow: the store before
    them, the baseline), "tally" (unit_tally only), "both" (unit_tally and units_executing),
    "flow" (and unit_flow with session_span: what the store does)."""
    from pilot.pmgr.store import sqlite as sq

    states = ("NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE")
    desc = {"executable": "/bin/true"}
    size, batches = 256, []
    groups = n // size
    for k in range(groups + len(states) - 1):  # batch k: group k NEW, k-1 SCHEDULING, ...
        b = Batch()
        for stage, state in enumerate(states):
            g = k - stage
            if not 0 <= g < groups:
                continue
            for i in range(g * size, (g + 1) * size):
                uid = f"unit.{i:06d}"
                ts = 1.7e9 + i / 2000 + stage * 0.05  # (2,000 units/s, each stage 50 ms)
                b.history.append(("bench", "units", uid, state, ts, None, stage))
                doc = {"uid": uid, "session": "bench", "pilot": "pilot.0000", "state": state}
                doc["partition"] = "pilot.0000.part.0000" if stage >= 2 else None
                if stage == 0:
                    doc["description"] = desc
                if stage >= 3:
                    doc.update(node="localhost", slots={"cpus": [i % 2]})
                b.docs["units"][uid] = doc
        batches.append(b)
    store_class = sq.SqliteStore
    saved = sq.INDEXES, store_class.tally, store_class.keep_flows, store_class.keep_spans
    if variant in ("without", "tally"):
        sq.INDEXES = sq.INDEXES.split("CREATE INDEX IF NOT EXISTS units_executing")[0]
    if variant == "without":
        sq.SqliteStore.tally = lambda self, docs: {}
    if variant != "flow":
        store_class.keep_flows = lambda self, units, new: None
        store_class.keep_spans = lambda self, history: None
    try:
        store = sq.SqliteStore(f"sqlite:///{tempfile.mkdtemp()}/life.db")
        t0 = time.process_time()
        for b in batches:
            store.write_batch(b)
        cpu = time.process_time() - t0
        store.close()
    finally:
        sq.INDEXES, store_class.tally, store_class.keep_flows, store_class.keep_spans = saved
    return cpu * 1e6 / (groups * size)


def unit_run(url: str, n: int, flows: bool = True) -> tuple[float, float]:
    """(units/s, the writer's largest lag) of N null units on a 2-core local pilot; flows=False:
    the sqlite store without unit_flow and session_span (what they cost a running workload)."""
    from pilot.pmgr.store import sqlite as sq

    saved = sq.SqliteStore.keep_flows, sq.SqliteStore.keep_spans
    if not flows:
        sq.SqliteStore.keep_flows = lambda self, units, new: None
        sq.SqliteStore.keep_spans = lambda self, history: None
    try:
        return _unit_run(url, n)
    finally:
        sq.SqliteStore.keep_flows, sq.SqliteStore.keep_spans = saved


def _unit_run(url: str, n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        pd = rp.ComputePilotDescription(
            resource="local.localhost",
            parts=[rp.ComputePartitionDescription(cores=2)],
            cores=2,
            runtime=30,
        )
        with rp.Session(dir=tmp, database_url=url) as s:
            pilot = rp.PilotManager(s).submit_pilots(pd)
            umgr = rp.UnitManager(s)
            umgr.add_pilots(pilot)
            umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 4)
            umgr.wait_units(timeout=60)
            t0 = time.perf_counter()
            units = umgr.submit_units(
                [rp.ComputeUnitDescription(executable="/bin/true") for _ in range(n)]
            )
            umgr.wait_units([u.uid for u in units], timeout=600)
            rate = n / (time.perf_counter() - t0)
            s.writer.flush(timeout=600)
            return rate, s.writer.max_lag


NO_FLOW = "sqlite without unit_flow"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    server = None
    mongo = os.environ.get("MONGODB_URI")
    tmp = tempfile.mkdtemp()
    if not mongo:
        from tests.mongo_server import MongoServer

        os.makedirs(f"{tmp}/db")
        server = MongoServer(f"{tmp}/db")
        server.start()
        mongo = server.url
    from tests.mongo_server import with_database

    try:
        backends = {
            "sqlite": lambda i: f"sqlite:///{tmp}/bench{i}.db",
            "mongodb": lambda i: with_database(mongo, f"pilot_bench_{os.getpid()}_{i}"),
        }
        writes = {
            k: [write_rate(f(i), args.n) for i in range(args.reps)] for k, f in backends.items()
        }
        rows = {"off (null://)": lambda i: "null://", **backends}
        rows[NO_FLOW] = lambda i: f"sqlite:///{tmp}/noflow{i}.db"
        runs = {k: [] for k in rows}
        for i in range(args.reps):  # interleaved
            for k, f in rows.items():
                runs[k].append(unit_run(f(100 + i), args.n, flows=k != NO_FLOW))
    finally:
        if server:
            server.stop()
    base = statistics.median(r for r, _ in runs["off (null://)"])
    print(f"\nstate store, N={args.n}, {args.reps} reps\n")
    print("| backend | batch write, records/s | units/s | vs persistence off | write lag s |")
    print("|---|---|---|---|---|")
    for k, rs in runs.items():
        w = writes.get(k.split()[0])
        rate = statistics.median(r for r, _ in rs)
        lag = max(lag for _, lag in rs)
        print(f"| {k} | {statistics.median(w):,.0f} |" if w else f"| {k} | - |", end="")
        print(f" {rate:,.0f} | {rate / base - 1:+.0%} | {lag:.2f} |")
    print("\ntarget: sqlite within -10% of persistence off")
    print("\nsqlite, a batch of 200 upserts + 400 history rows (median of 3)\n")
    print("| rows per statement | beside | wall ms | CPU ms | wall vs one per statement |")
    print("|---|---|---|---|---|")
    for busy in (False, True):
        got = {m: [rows_batch(m, busy) for _ in range(3)] for m in (False, True)}
        base_wall = statistics.median(w for w, _ in got[False])
        for m, rs in got.items():
            w = statistics.median(x for x, _ in rs)
            c = statistics.median(x for _, x in rs)
            print(
                f"| {'several' if m else 'one (executemany)'} | "
                f"{'a busy Python thread' if busy else 'nothing'} | {w:,.1f} | {c:.1f} | "
                f"{w / base_wall:.2f} x |"
            )
    print(
        "\nsqlite, the views' bookkeeping: CPU us a unit of the writer's writes over a unit's "
        f"life, N={args.n} (median of {max(3, args.reps)}, interleaved)\n"
    )
    print("| store | CPU us a unit | vs without |")
    print("|---|---|---|")
    variants = ("without", "tally", "both", "flow")
    life = {v: [] for v in variants}
    for _ in range(max(3, args.reps)):
        for v in variants:
            life[v].append(lifecycle(args.n, v))
    base_life = statistics.median(life["without"])
    names = {
        "without": "without unit_tally, units_executing, unit_flow (baseline)",
        "tally": "with unit_tally",
        "both": "with unit_tally and units_executing",
        "flow": "with unit_tally, units_executing, unit_flow, session_span (the store)",
    }
    for v in variants:
        m = statistics.median(life[v])
        print(f"| {names[v]} | {m:.1f} | {m - base_life:+.1f} us |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
