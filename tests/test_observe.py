"""`pilot plot` and `pilot export --format chrome-trace` (pmgr/observe/) against a real session
(a local pilot with three partitions, overlapping units, a reconfig) and a synthetic one of
100,000 units written straight into a sqlite store.  Expected values are computed here from
the store rows, by brute force, not with the code under test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter

import pytest

import pilot as rp
from pilot.pmgr.core import reaper
from pilot.pmgr.observe import extras, plot, series, timeline
from pilot.pmgr.store import held
from pilot.pmgr.store.base import Batch
from pilot.pmgr.store.sqlite import SqliteStore
from tests.conftest import ROOT, active_pilot

CPD = rp.ComputePartitionDescription
CUD = rp.ComputeUnitDescription
CLI_TIMEOUT = 60


def sleeper(seconds: float, **kw) -> rp.ComputeUnitDescription:
    return CUD(executable="/bin/sleep", arguments=[str(seconds)], **kw)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """A finished session: partitions A (1 core, 1 GPU), B (1 core), C (2 cores); units that
    overlap; B stopped and D (1 core) started by one reconfig while B runs a unit."""
    base = tmp_path_factory.mktemp("observe")
    cfg = base / "four.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 4\ngpus_per_node: 2\n")
    sessions = base / "sessions"
    sessions.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PILOT_SESSIONS_DIR", str(sessions))
        session = rp.Session()
        try:
            parts = (CPD(cores=1, gpus=1), CPD(cores=1), CPD(cores=2))
            pilot, umgr = active_pilot(
                session, parts=parts, resource=str(cfg), cores=4, gpus=2, runtime=3
            )
            a, b, c = pilot.partitions
            first = umgr.submit_units(
                [sleeper(0.8, gpus=1, partition=a.uid)] * 2
                + [sleeper(0.8, partition=b.uid)] * 3
                + [sleeper(0.8, cores=2, partition=c.uid)] * 2
                + [sleeper(0.8, partition=c.uid)] * 2
            )
            first[2].wait(rp.EXECUTING, timeout=30)
            time.sleep(0.4)  # B's unit runs a while before the reconfig cancels it
            (d,) = pilot.reconfig(stop=b.uid, start=[CPD(cores=1)])
            assert d.wait(rp.ACTIVE, timeout=20) == rp.ACTIVE, d.reason
            assert b.wait(timeout=20) == rp.CANCELED
            later = umgr.submit_units([sleeper(0.3, partition=d.uid)] * 2)
            umgr.wait_units(timeout=60)
            assert {u.state for u in later} == {rp.DONE}
            session.writer.flush(timeout=30)
        finally:
            session.close()
            left = reaper.session_processes(session.uid)
            reaper.kill_session_processes(session.uid)
        assert not left, f"processes left behind after close: {left}"
    yield {
        "session": session.uid,
        "sessions": str(sessions),
        "url": f"sqlite:///{sessions / session.uid / 'state.db'}",
        "parts": {"A": a.uid, "B": b.uid, "C": c.uid, "D": d.uid},
        "units": len(first) + len(later),
    }


def cli(ran, *args):
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_SESSIONS_DIR=ran["sessions"])
    return subprocess.run(
        [sys.executable, "-m", "pilot", *args],
        capture_output=True,
        timeout=CLI_TIMEOUT,
        env=env,
    )


def store_rows(url: str, session: str):
    """(unit docs, history rows, the session's start: its creation or first change)."""
    store = SqliteStore(url)
    try:
        units, history = store.find("units", session=session), store.history(session=session)
        created = store.get("sessions", session)["created"]
    finally:
        store.close()
    return units, history, min([created] + [r["ts"] for r in history])


def executing_spans(units, history):
    """{partition: [(start, stop, cores, gpus)]} from the raw store rows."""
    by_uid: dict[str, list] = {}
    for row in history:
        by_uid.setdefault(row["uid"], []).append(row)
    out: dict[str, list] = {}
    for u in units:
        rows = sorted(by_uid[u["uid"]], key=lambda r: r["seq"])
        for row, nxt in zip(rows, rows[1:]):
            if row["state"] == "EXECUTING":
                slots = u["slots"]
                held = (len(slots.get("cpus", [])), len(slots.get("gpus", [])))
                out.setdefault(u["partition"], []).append((row["ts"], nxt["ts"], *held))
    return out


def brute_peak(spans, which: int) -> float:
    """The most of cores (which=2) or GPUs (3) held at any one moment, by brute force."""
    return max(sum(s[which] for s in spans if s[0] <= t < s[1]) for t, *_ in spans)


def test_plot_png_matches_the_store(ran, tmp_path):
    out = tmp_path / "timeline.png"
    t = time.monotonic()
    done = cli(ran, "plot", ran["session"], "-o", str(out))
    took = time.monotonic() - t
    assert done.returncode == 0, done.stderr.decode()
    assert f"{ran['units']} units, 4 partitions, 1 reconfig(s)" in done.stdout.decode()
    assert took < 30
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    import matplotlib.image

    pixels = matplotlib.image.imread(str(out))
    assert pixels.shape[:2] == (900, 1200)
    assert pixels.std() > 0.05  # something is drawn, not a blank canvas

    # the series the figure is drawn from agree with what the units held, per the store
    units, history, _ = store_rows(ran["url"], ran["session"])
    assert len(units) == ran["units"]
    spans = executing_spans(units, history)
    store = SqliteStore(ran["url"])
    try:
        tl = timeline.load(store, ran["session"])
    finally:
        store.close()
    busy = series.busy(tl)
    p = ran["parts"]
    expected = {p["A"]: (1, 1), p["B"]: (1, 0), p["C"]: (2, 0), p["D"]: (1, 0)}
    for uid, (cores, gpus) in expected.items():
        assert brute_peak(spans[uid], 2) == cores, uid  # the scenario filled each partition
        assert brute_peak(spans[uid], 3) == gpus, uid
        assert busy[uid][0].peak == cores, uid
        assert busy[uid][1].peak == gpus, uid
    total = sum(s[2] * (s[1] - s[0]) for ss in spans.values() for s in ss)  # core-seconds
    drawn = sum(_area(busy[uid][0], tl.rel(tl.end)) for uid in busy)
    assert drawn == pytest.approx(total, rel=1e-6)

    (reconfig,) = tl.reconfigs
    assert (reconfig.stopped, reconfig.started) == ([p["B"]], [p["D"]])
    by_uid = {x.uid: x for x in tl.partitions}
    assert by_uid[p["B"]].first("ACTIVE") < reconfig.ts < by_uid[p["D"]].first("ACTIVE")
    # the store names the command: B stopped and D started by the same one, the others by none
    assert by_uid[p["B"]].stopped_by and by_uid[p["B"]].stopped_by == by_uid[p["D"]].started_by
    assert not any(by_uid[p[k]].started_by or by_uid[p[k]].stopped_by for k in "AC")

    counts = series.unit_states(tl)
    finals = Counter(u["state"] for u in units)
    assert finals[rp.CANCELED] >= 1  # B's running unit
    for state, n in finals.items():
        assert counts[state].values[-1] == n, state
    assert counts[rp.EXECUTING].values[-1] == 0
    running = [(a, b, 1) for ss in spans.values() for a, b, *_ in ss]
    assert counts[rp.EXECUTING].peak == brute_peak(running, 2) >= 3  # A, B and C side by side


def _area(step, end: float) -> float:
    t = list(step.times) + [end]
    return sum(v * (t[i + 1] - t[i]) for i, v in enumerate(step.values))


def test_plot_svg_and_pdf_and_bad_names(ran, tmp_path):
    svg, pdf = tmp_path / "timeline.svg", tmp_path / "timeline.pdf"
    for path in (svg, pdf):
        done = cli(ran, "plot", ran["session"], "--output", str(path))
        assert done.returncode == 0, done.stderr.decode()
    text = svg.read_text()
    assert text.startswith("<?xml") and "<svg" in text and len(text) > 20_000
    assert "reconfig -part.0001 +part.0003" in text  # the reconfig's label
    assert pdf.read_bytes()[:5] == b"%PDF-"
    bad = cli(ran, "plot", ran["session"], "-o", str(tmp_path / "timeline.gif"))
    assert bad.returncode == 2
    assert "must end in one of .png, .svg, .pdf" in bad.stderr.decode()
    assert not (tmp_path / "timeline.gif").exists()
    missing = cli(ran, "plot", "session.nope", "-o", str(tmp_path / "x.png"))
    assert missing.returncode == 2 and "no session 'session.nope'" in missing.stderr.decode()


def test_missing_extra_says_what_to_install():
    with pytest.raises(extras.MissingExtra, match=r"pip install 'pilot-partitions\[observe\]'"):
        extras.require("matplotlib_that_is_not_there")


def test_chrome_trace(ran):
    done = cli(ran, "export", ran["session"], "--format", "chrome-trace")
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert set(doc) >= {"traceEvents", "displayTimeUnit"}
    events = doc["traceEvents"]
    assert all(e["ph"] in ("X", "i", "M") for e in events)
    assert all(e["ts"] >= 0 for e in events if "ts" in e)
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    procs = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert set(ran["parts"].values()) <= set(procs)

    units, history, start = store_rows(ran["url"], ran["session"])
    slices = [e for e in events if e["ph"] == "X" and e["cat"] == "unit"]
    assert Counter(e["name"] for e in slices) == Counter(u["uid"] for u in units)  # one each
    by_uid = {u["uid"]: u for u in units}
    execs: dict[tuple, list] = {}
    for e in events:
        if e["ph"] == "X" and e["cat"] == "unit.state" and e["name"] == "EXECUTING":
            execs.setdefault((e["pid"], e["tid"]), []).append(e)
    for e in slices:
        unit = by_uid[e["name"]]
        assert e["pid"] == procs[unit["partition"]] and (e["pid"], e["tid"]) in threads
        rows = sorted((r for r in history if r["uid"] == unit["uid"]), key=lambda r: r["seq"])
        assert e["ts"] == pytest.approx((rows[0]["ts"] - start) * 1e6, abs=1)
        assert e["ts"] + e["dur"] == pytest.approx((rows[-1]["ts"] - start) * 1e6, abs=1)
        assert [s for s, _ in e["args"]["states"]] == [r["state"] for r in rows]
        for ran_at in [(r["ts"] - start) * 1e6 for r in rows if r["state"] == "EXECUTING"]:
            (child,) = [x for x in execs[(e["pid"], e["tid"])] if abs(x["ts"] - ran_at) < 1]
            assert e["ts"] <= child["ts"] and child["ts"] + child["dur"] <= e["ts"] + e["dur"] + 1
    lanes: dict[tuple, list] = {}
    for e in slices:
        lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in lanes.values():  # slices of one thread never overlap
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))

    (reconfig,) = [e for e in events if e.get("cat") == "reconfig"]
    assert reconfig["ph"] == "i" and reconfig["s"] == "g"
    assert reconfig["args"]["stopped"] == [ran["parts"]["B"]]
    assert reconfig["args"]["started"] == [ran["parts"]["D"]]
    canceled = [
        e for e in events if e["ph"] == "i" and e["cat"] == "partition" and e["name"] == "CANCELED"
    ]
    assert procs[ran["parts"]["B"]] in {e["pid"] for e in canceled}

    jsonl = cli(ran, "export", ran["session"])  # the default stays JSON lines
    rows = [json.loads(line) for line in jsonl.stdout.decode().splitlines()]
    assert len(rows) == len(history) and {"uid", "state", "ts"} <= set(rows[0])


def test_reconfigs_close_together_are_told_apart_by_their_commands():
    """Two reconfigs 0.5 s apart (a stage shorter than RECONFIG_GAP between them) are two when
    the partitions name their commands; a store without the names can only merge them."""

    def part(uid, history, reason=None, started_by=None, stopped_by=None):
        return timeline.Entity(uid, history[-1][0], history, reason, pilot="p",
                               started_by=started_by, stopped_by=stopped_by)  # fmt: skip

    pilot = timeline.Entity("p", "DONE", [("NEW", 0.0), ("ACTIVE", 1.0), ("DONE", 20.0)])
    pilot.description = {"parts": [{}, {}]}
    stopped = "stopped by reconfig"
    parts = [
        part("p.part.0000", [("NEW", 0.0), ("ACTIVE", 1.0), ("CANCELED", 5.1)], stopped,
             stopped_by="c1"),
        part("p.part.0001", [("NEW", 0.0), ("ACTIVE", 1.0), ("DONE", 20.0)]),
        part("p.part.0002", [("NEW", 5.0), ("ACTIVE", 5.2), ("CANCELED", 5.6)], stopped,
             started_by="c1", stopped_by="c2"),
        part("p.part.0003", [("NEW", 5.5), ("ACTIVE", 5.7), ("DONE", 20.0)], started_by="c2"),
    ]  # fmt: skip
    named = timeline.find_reconfigs([pilot], parts)
    assert [(r.ts, r.stopped, r.started) for r in named] == [
        (5.0, ["p.part.0000"], ["p.part.0002"]),
        (5.5, ["p.part.0002"], ["p.part.0003"]),
    ]
    for p in parts:
        p.started_by = p.stopped_by = None
    (merged,) = timeline.find_reconfigs([pilot], parts)  # what the histories alone allow
    assert merged.started == ["p.part.0002", "p.part.0003"]


# -- 100,000 units -------------------------------------------------------------------------
T0 = 1_700_000_000.0
TICK = 0.008  # s a unit slot lasts; a unit runs 95% of it
PLAN = (  # partition, cores, GPUs, units, NEW, end, per-unit cores, reason
    ("part.0000", 8, 2, 50_000, 0.0, 60.0, 1, None),
    ("part.0001", 8, 0, 25_000, 0.0, 60.0, 2, None),  # 2-core units without slots
    ("part.0002", 4, 0, 12_500, 0.0, 27.0, 1, "stopped by reconfig"),
    ("part.0003", 4, 0, 12_500, 26.9, 60.0, 1, None),  # started by that reconfig
)


def write_synthetic(url: str, session: str) -> None:
    """A session of 100,000 units over four partitions, every unit with its full history.
    Within a partition, lane l of its cores runs units back to back, lanes staggered."""
    b = Batch()
    b.docs["sessions"][session] = {"uid": session, "created": T0, "dir": "-", "url": url}
    pilot = "pilot.0000"
    b.docs["pilots"][pilot] = {
        "uid": pilot,
        "session": session,
        "state": "DONE",
        "description": {"parts": [{}, {}, {}]},
        "size": {"nodes": 1, "cores": 20, "gpus": 2},
    }

    def states(kind, uid, changes, reason=None):
        for seq, (state, ts) in enumerate(changes):
            final = state in ("DONE", "FAILED", "CANCELED")
            b.history.append((session, kind, uid, state, T0 + ts, reason if final else None, seq))

    changes = [("NEW", 0), ("LAUNCHING", 0.01), ("PENDING", 0.02), ("ACTIVE", 0.5)]
    states("pilots", pilot, [*changes, ("DONE", 60.0)])
    n = 0
    for name, cores, gpus, count, new, end, per, reason in PLAN:
        part = f"{pilot}.{name}"
        final = "CANCELED" if reason else "DONE"
        changes = [("NEW", new), ("PENDING", new + 0.01), ("STARTING", new + 0.02)]
        states("partitions", part, [*changes, ("ACTIVE", new + 0.2), (final, end)], reason)
        b.docs["partitions"][part] = {
            "uid": part,
            "session": session,
            "pilot": pilot,
            "state": final,
            "reason": reason,
            "resources": {"cores": cores, "gpus": gpus},
        }
        lanes = cores // per
        for k in range(count):
            uid = f"unit.{n:06d}"
            n += 1
            lane = k % lanes
            t = new + 0.3 + (k // lanes) * TICK + lane * TICK / lanes
            failed = k % 1000 == 7
            slots = {"cpus": [lane]} if per == 1 else None
            if slots and lane < gpus:
                slots["gpus"] = [lane]
            b.docs["units"][uid] = {
                "uid": uid,
                "session": session,
                "pilot": pilot,
                "partition": part,
                "state": "FAILED" if failed else "DONE",
                "reason": "exit code 1" if failed else None,
                "exit_code": int(failed),
                "node": "localhost",
                "slots": slots,
                "description": {"executable": "/bin/true", "cores": per, "gpus": 0, "ranks": 1},
            }
            changes = [("NEW", t - 0.3), ("SCHEDULING", t - 0.2), ("QUEUED", t - 0.1)]
            changes += [("EXECUTING", t), ("FAILED" if failed else "DONE", t + 0.95 * TICK)]
            states("units", uid, changes, "exit code 1" if failed else None)
    store = SqliteStore(url)
    try:
        store.write_batch(b)
    finally:
        store.close()


def test_100k_units_plot_fast_from_aggregates(tmp_path):
    session = "session.synthetic"
    url = f"sqlite:///{tmp_path / 'state.db'}"
    write_synthetic(url, session)
    t = time.monotonic()
    store = SqliteStore(url)
    try:
        tl = timeline.load(store, session)
    finally:
        store.close()
    fig, drawn = plot.figure(tl)
    fig.savefig(tmp_path / "big.png")
    took = time.monotonic() - t
    assert took < 20, f"100,000 units took {took:.1f} s to plot"
    assert (tmp_path / "big.png").read_bytes()[:4] == b"\x89PNG"
    assert drawn["units"] == 100_000 and drawn["reconfigs"] == 1
    # aggregated: a few artists per partition and state, not one per unit
    artists = sum(len(ax.get_children()) for ax in fig.axes)
    assert artists < 150, artists
    peaks = {f"pilot.0000.{name}": cores for name, cores, *_ in PLAN}
    assert drawn["peak_cores"] == peaks  # lanes x cores per unit, slots or description
    assert series.busy(tl)["pilot.0000.part.0000"][1].peak == 2
    (reconfig,) = tl.reconfigs
    assert (reconfig.stopped, reconfig.started) == (
        ["pilot.0000.part.0002"],
        ["pilot.0000.part.0003"],
    )
    assert reconfig.ts == pytest.approx(T0 + 26.9)
    counts = series.unit_states(tl)
    failed = sum(len(range(7, count, 1000)) for _, _, _, count, *_ in PLAN)
    assert (counts["FAILED"].values[-1], counts["DONE"].values[-1]) == (failed, 100_000 - failed)
    assert counts["EXECUTING"].peak == 8 + 4 + 4


def test_sweep_counts_touching_and_empty_intervals():
    step = series.sweep([0.0, 1.0, 1.0, 5.0], [1.0, 2.0, 1.0, 6.0], [2, 3, 7, 1])
    assert step.peak == 3  # [0,1) and [1,2) touch; [1,1) holds nothing
    assert list(step.at([0.5, 1.0, 2.5, 5.5, 7.0])) == [2, 3, 0, 1, 0]
    assert series.sweep([], [], 1).peak == 0
    assert held.held({"cpus": [0, 1], "gpus": [0]}, {}) == (2, 1)
    assert held.held([{"cpus": [0]}, {"cpus": [1]}], {"ranks": 2}) == (2, 0)
    assert held.held(None, {"ranks": 2, "cores": 3, "gpu_processes": 2}) == (6, 2)
    assert held.held({"cpus": [0], "gpus": [0]}, {"gpus": 0.5}) == (1, 0.5)


def test_a_big_session_is_binned_and_its_trace_capped(database_url, tmp_path, capsys, monkeypatch):
    """Above plot.EXACT_UNITS the plot's series are bin means streamed from the store (the
    same numbers series.bin_means gives of the exact steps), and above trace.MAX_UNITS the
    trace holds the first units and says how many it left out; on sqlite and MongoDB."""
    import io

    import numpy as np

    from bench.views import PARTS, SESSION, build
    from pilot.pmgr.observe import bins, trace
    from pilot.pmgr.store import open_store

    store = open_store(database_url)
    try:
        build(store, 600, window=100)  # (small batches: SecantusDB on 2 busy cores is slow)
        tl = timeline.load(store, SESSION)
        assert len(tl.units) == tl.units_total == 600 and tl.left_out == 0
        binned = bins.aggregate(store, tl, 120)
        end = tl.rel(tl.end)
        for part in PARTS:
            grid, (vals,) = series.on_grid([series.busy(tl)[part][0]])
            _, (exact,) = series.bin_means(grid, [vals], end, 120)
            assert np.allclose(binned.busy[part][0].values, exact, atol=1e-6)
            assert exact.max() > 1
        for state, step in series.unit_states(tl).items():
            _, (exact,) = series.bin_means(step.times, [step.values], end, 120)
            assert np.allclose(binned.states[state].values, exact, atol=1e-6), state
        drawn = plot.plot_session(store, SESSION, str(tmp_path / "b.png"), exact_units=100)
        assert drawn["units"] == 600 and set(drawn["peak_cores"]) == set(PARTS)
        assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"

        capped = timeline.load(store, SESSION, max_units=200)
        assert len(capped.units) == 200 and capped.left_out == 400
        assert [u.uid for u in capped.units] == [f"unit.{k:06d}" for k in range(200)]
        assert all(len(u.history) == 5 and u.partition in PARTS for u in capped.units)
        out = io.StringIO()
        assert trace.write(capped, out) == 400
        doc = json.loads(out.getvalue())
        assert doc["otherData"]["units_left_out"] == 400
        assert doc["otherData"]["units_in_trace"] == 200
        slices = [e for e in doc["traceEvents"] if e.get("cat") == "unit"]
        assert len(slices) == 200
        whole = io.StringIO()
        assert trace.write(tl, whole) == 0
        assert json.loads(whole.getvalue()) == trace.trace(tl)  # streamed = built whole
    finally:
        store.close()
    from pilot import cli

    monkeypatch.setattr(trace, "MAX_UNITS", 250)
    out = tmp_path / "t.json"
    common = [SESSION, "--database-url", database_url]
    assert cli.main(["export", *common, "--format", "chrome-trace", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "pilot export: 350 of 600 units left out of the trace" in err
    assert json.loads(out.read_text())["otherData"]["units_left_out"] == 350
    trace_cmd = ["export", *common, "--format", "chrome-trace", "-o", str(out)]
    assert cli.main([*trace_cmd, "--max-units", "100"]) == 0
    assert "500 of 600 units left out of the trace" in capsys.readouterr().err
    assert json.loads(out.read_text())["otherData"]["units_in_trace"] == 100
    assert cli.main([*trace_cmd, "--max-units", "0"]) == 0  # every unit
    assert "left out" not in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert len([e for e in doc["traceEvents"] if e.get("cat") == "unit"]) == 600
    assert cli.main([*trace_cmd, "--max-units", "-1"]) != 0
    assert "--max-units=-1 must be 0 (all units) or more" in capsys.readouterr().err
    assert cli.main(["status", *common]) == 0
    assert "units: 600, DONE 599, FAILED 1" in capsys.readouterr().out  # (k % 1000 == 7)
