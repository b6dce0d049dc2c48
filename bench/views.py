"""The session views at scale: `pilot status`, `export` (jsonl and chrome-trace), `plot` and
`pilot top`'s reads, each in a fresh process, on a synthetic session of N units.

    python bench/views.py [--n 1000000] [--mongodb] [--dir DIR] [--views status,export,...]
    python bench/views.py --real 3000          # bytes per unit of a real run's sqlite store
    python bench/views.py --dir D --no-build   # the views of a real run's session kept in D
                                               # (bench/scale.py --dir D), its only session

The session is written straight into the store (sqlite by default; --mongodb: a SecantusDB
started on 127.0.0.1 as tests/mongo_server.py starts it, or $MONGODB_URI) with the rows a real
unit leaves: five history rows (NEW, SCHEDULING, QUEUED, EXECUTING, DONE; FAILED for 1 in
1,000, with its reason) and its doc (partition, node, slots, exit_code, the description as
ComputeUnitDescription.to_stored gives it), written in batches of WINDOW units in time order
(as the store writer does with streaming submission's window in flight), plus a pilot with
two partitions.  Each view then runs as the CLI runs it, in a fresh process (`pilot status`,
`pilot export`, `pilot export --format chrome-trace`, `pilot plot`, and the plot drawn without
the store's unit_flow, from the history streamed: "plot-streamed", the baseline); `pilot top`
needs a running pilot, so its store reads (top_snapshot's reader: pilots, partitions, unit counts,
EXECUTING units, latest events) run in a fresh process instead, and one frame is drawn.
Printed: N, view, seconds, peak RSS (MB, /usr/bin/time's %M of the child), and the store's bytes per
unit: the sqlite file's size / N; for MongoDB dataSize + indexSize of dbStats (or of each
collection's collStats), if the server gives them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SESSION = "session.views"
PILOT = "pilot.0000"
PARTS = (f"{PILOT}.part.0000", f"{PILOT}.part.0001")
CORES = 64  # per partition: units run CORES at a time in each
WINDOW = 20_000  # units a batch (streaming submission's window)
VIEWS = ("status", "export", "trace", "plot", "plot-streamed", "top")

TOP_SCRIPT = """
import sys, time
from pilot.pmgr.observe import top_store
from pilot.pmgr.observe.top_snapshot import busy_per_partition, describe_events
session, pilot, url = sys.argv[1:4]
r = top_store.open_reader(session, url)
for _ in range(2):  # a first refresh and a second (top's steady state)
    pilots = r.pilots(session)
    parts = r.partitions(pilot)
    counts = r.unit_counts(session, pilot)
    busy = busy_per_partition(r.executing(session, pilot))
    events = describe_events(r.events(session), pilot, {p["uid"]: p for p in parts}, 2)
print(sum(counts.values()), "units", len(events), "events")
"""


PLOT_STREAMED = """
import sys
from pilot.pmgr.observe import plot
from pilot.pmgr.store import open_store
session, url, out = sys.argv[1:4]
store = open_store(url)
store.unit_flow = lambda session: None  # (as without unit_flow: the history streamed)
print(plot.plot_session(store, session, out))
"""


def build(store, n: int, window: int = WINDOW) -> None:
    """N units of SESSION, written as the store writer writes them (module docstring)."""
    import pilot as rp
    from pilot.pmgr.store.base import Batch

    t0 = time.time() - n / 1000.0 - 60
    desc = rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["0"]).to_stored()
    b = Batch()
    b.docs["sessions"][SESSION] = {"uid": SESSION, "created": t0, "dir": "/tmp/x", "url": "-"}
    b.docs["pilots"][PILOT] = {
        "uid": PILOT,
        "session": SESSION,
        "state": "ACTIVE",
        "size": {"nodes": 2, "cores": 2 * CORES, "gpus": 0},
        "description": {"resource": "local.localhost", "parts": [{}, {}]},
    }
    for seq, (s, dt) in enumerate([("NEW", 0), ("LAUNCHING", 0.1), ("PENDING", 0.2)]):
        b.history.append((SESSION, "pilots", PILOT, s, t0 + dt, None, seq))
    b.history.append((SESSION, "pilots", PILOT, "ACTIVE", t0 + 1, None, 3))
    for i, part in enumerate(PARTS):
        b.docs["partitions"][part] = {
            "uid": part,
            "session": SESSION,
            "pilot": PILOT,
            "state": "ACTIVE",
            "resources": {"cores": CORES, "gpus": 0, "nodes": [f"node{i}"]},
        }
        for seq, s in enumerate(("NEW", "PENDING", "STARTING", "ACTIVE")):
            b.history.append((SESSION, "partitions", part, s, t0 + 1 + 0.1 * seq, None, seq))
    store.write_batch(b)
    rate = 1000.0  # units/s end to end: 2 x CORES cores, units of ~0.1 s
    for first in range(0, n, window):
        b = Batch()
        for k in range(first, min(n, first + window)):
            uid = f"unit.{k:06d}"
            part = k % 2
            lane = (k // 2) % CORES
            t = t0 + 2 + k / rate
            failed = k % 1000 == 7
            final = "FAILED" if failed else "DONE"
            reason = "exit code 1" if failed else None
            b.docs["units"][uid] = {
                "uid": uid,
                "session": SESSION,
                "pilot": PILOT,
                "partition": PARTS[part],
                "state": final,
                "reason": reason,
                "exit_code": int(failed),
                "node": f"node{part}",
                "slots": {"cpus": [lane]},
                "description": desc,
            }
            for seq, (s, dt) in enumerate(
                [("NEW", 0), ("SCHEDULING", 0.01), ("QUEUED", 0.02), ("EXECUTING", 0.05)]
            ):
                b.history.append((SESSION, "units", uid, s, t + dt, None, seq))
            b.history.append((SESSION, "units", uid, final, t + 0.15, reason, 4))
        store.write_batch(b)


def run_view(
    view: str, url: str, out: str, session: str = SESSION, pilot: str = PILOT
) -> tuple[float, float, str]:
    """(seconds, peak RSS MB, last line of output) of `view` in a fresh process."""
    SESSION, PILOT = session, pilot  # noqa: N806 (the built session's names, or a real one's)
    pilot_cli = [sys.executable, "-m", "pilot.cli"]
    cmd = {
        "status": [*pilot_cli, "status", SESSION, "--database-url", url],
        "export": [*pilot_cli, "export", SESSION, "--database-url", url, "-o", f"{out}.jsonl"],
        "trace": [
            *pilot_cli,
            "export",
            SESSION,
            "--database-url",
            url,
            "--format",
            "chrome-trace",
            "-o",
            f"{out}.json",
        ],  # fmt: skip
        "plot": [*pilot_cli, "plot", SESSION, "--database-url", url, "-o", f"{out}.png"],
        "plot-streamed": [sys.executable, "-c", PLOT_STREAMED, SESSION, url, f"{out}.png"],
        "top": [sys.executable, "-c", TOP_SCRIPT, SESSION, PILOT, url],
    }[view]
    rusage = f"{out}.time"  # (/usr/bin/time's %M: a child's ru_maxrss would include ours,
    cmd = ["/usr/bin/time", "-f", "%M", "-o", rusage, *cmd]  # kept by Linux across exec)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    took = time.perf_counter() - t
    output = proc.stdout + proc.stderr
    if proc.returncode:
        raise RuntimeError(f"{view} failed ({proc.returncode}): {output[-2000:]}")
    with open(rusage) as f:
        peak_kb = int(f.read().split()[-1])
    lines = [ln for ln in output.splitlines() if ln.strip()]
    return took, peak_kb / 1024, (lines[-1] if lines else "")


def mongo_bytes(store) -> str:
    db = store.db
    try:
        st = db.command("dbStats")
        if st.get("dataSize") is not None:
            return f"dataSize {st['dataSize']} + indexSize {st.get('indexSize', 0)}", (
                st["dataSize"] + (st.get("indexSize") or 0)
            )
    except Exception as exc:  # noqa: BLE001 (a server without dbStats: said below)
        why = f"dbStats: {exc}"
    else:
        why = "dbStats without dataSize"
    total = 0
    try:
        for name in db.list_collection_names():
            cs = db.command("collStats", name)
            total += (cs.get("size") or 0) + (cs.get("totalIndexSize") or 0)
        if total:
            return "collStats size + totalIndexSize", total
    except Exception as exc:  # noqa: BLE001
        why += f"; collStats: {exc}"
    return f"not given by the server ({why})", None


def real_bytes(n: int) -> None:
    """Bytes per unit of a real session's sqlite store: N /bin/true units on a local pilot."""
    import pilot as rp
    from bench.local_pilot import two_core_pilot

    with two_core_pilot(runtime=30, warm=0) as run:
        units = run.umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * n)
        run.umgr.wait_units([u.uid for u in units], timeout=1800)
        run.session.writer.flush(timeout=300)
        path = run.session.store.path
        rows = run.session.store.db.execute("SELECT COUNT(*) FROM history").fetchone()[0]
        size = os.path.getsize(path)
        print(f"real run: {n} units, {rows} history rows, {path}: {size} bytes, "
              f"{size / n:.0f} bytes/unit")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--mongodb", action="store_true", help="a SecantusDB (or $MONGODB_URI)")
    ap.add_argument("--dir", help="where the store and outputs go (kept); default: a temp dir")
    ap.add_argument("--views", default=",".join(VIEWS))
    ap.add_argument("--no-build", action="store_true", help="the sqlite store in --dir is built")
    ap.add_argument("--real", type=int, help="only: bytes per unit of a real run of this many")
    args = ap.parse_args()
    if args.real:
        real_bytes(args.real)
        return 0
    from pilot.pmgr.store import open_store

    work = args.dir or tempfile.mkdtemp(prefix="views.")
    os.makedirs(work, exist_ok=True)
    server = None
    try:
        if args.mongodb:
            sys.path.insert(0, os.path.join(ROOT, "tests"))
            from mongo_server import MongoServer, with_database

            if os.environ.get("MONGODB_URI"):
                url = with_database(os.environ["MONGODB_URI"], f"views{os.getpid()}")
            else:
                os.makedirs(os.path.join(work, "mongo"), exist_ok=True)
                server = MongoServer(os.path.join(work, "mongo"))
                server.start()
                url = with_database(server.url, "views")
        else:
            url = f"sqlite:///{os.path.join(work, 'state.db')}"
        store = open_store(url)
        t = time.perf_counter()
        if not args.no_build:
            build(
                store, args.n, 200 if args.mongodb else WINDOW
            )  # (SecantusDB: 12 s a bulk write at most)
        built = time.perf_counter() - t
        if args.mongodb:
            how, size = mongo_bytes(store)
        else:
            how, size = "file size", os.path.getsize(store.path)
        session, pilot = SESSION, PILOT
        if args.no_build:  # (a real run's store: its only session and its first pilot)
            sessions = [d["uid"] for d in store.find("sessions")]
            if len(sessions) != 1:
                raise SystemExit(f"--no-build: the store holds {len(sessions)} sessions, not 1")
            session = sessions[0]
            pilot = min(d["uid"] for d in store.find("pilots", session=session))
            args.n = sum(store.unit_counts(session, by=("state",)).values())
        store.close()
        per = f"{size / args.n:.0f}" if size else "?"
        made = f"session {session} read" if args.no_build else f"built in {built:.0f} s"
        print(f"# {args.n} units, {made}; store bytes/unit {per} ({how})")
        print(f"{'N':>10} {'view':13} {'seconds':>8} {'peak RSS MB':>12}  output")
        for view in args.views.split(","):
            took, rss, last = run_view(view, url, os.path.join(work, view), session, pilot)
            print(f"{args.n:>10} {view:13} {took:8.1f} {rss:12.0f}  {last[:70]}", flush=True)
    finally:
        if server is not None:
            server.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
