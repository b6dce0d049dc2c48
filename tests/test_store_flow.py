"""unit_flow (pmgr/store/flow.py): the series `pilot plot` draws of a big session, kept by the
sqlite store's writer, give the same bin means as the units' history streamed (bins.aggregate)
whatever the batches look like: a unit's rows split over batches, a retried batch, a unit
routed twice, units written by another connection, fractional GPUs, units still running."""

from __future__ import annotations

import random
import sqlite3

import numpy as np
import pytest

from pilot.pmgr.observe import bins, plot, timeline
from pilot.pmgr.store import open_store
from pilot.pmgr.store.base import Batch, TextIds

SESSION = "session.flow"
PILOT = "pilot.0000"
PARTS = (f"{PILOT}.part.0000", f"{PILOT}.part.0001")
T0 = 1_700_000_000.0  # a whole second: the streamed bins' edges are then whole ticks too
SPAN = 120.0


def _head() -> Batch:
    b = Batch()
    b.docs["sessions"][SESSION] = {"uid": SESSION, "created": T0, "dir": "/x", "url": "-"}
    b.docs["pilots"][PILOT] = {"uid": PILOT, "session": SESSION, "state": "ACTIVE"}
    b.history.append((SESSION, "pilots", PILOT, "NEW", T0, None, 0))
    b.history.append((SESSION, "pilots", PILOT, "ACTIVE", T0 + SPAN, None, 1))  # the end
    for i, part in enumerate(PARTS):
        b.docs["partitions"][part] = {"uid": part, "session": SESSION, "pilot": PILOT}
        b.history.append((SESSION, "partitions", part, "ACTIVE", T0 + 0.5 + i, None, 0))
    return b


def _units(n: int, rng: random.Random) -> list[dict]:
    """Each unit: its description, partition, slots and rows (state, ts), in order."""
    out = []
    for k in range(n):
        gpus = rng.choice([0, 0, 1, 2, 0.5])
        desc = {"executable": "/bin/true", "ranks": 1, "cores_per_rank": rng.choice([1, 2, 3])}
        if gpus:
            desc["gpus_per_rank"] = gpus
        slots = {"cpus": list(range(desc["cores_per_rank"])), "gpus": [0] if gpus else []}
        if gpus == 2:
            slots["gpus"] = [0, 1]
        t = T0 + 1 + rng.random() * 70  # (+ at most 6 x 7 s: within SPAN)
        states = ["NEW", "SCHEDULING", "QUEUED"]
        if k % 7 == 3:  # routed again
            states += ["SCHEDULING", "QUEUED"]
        states.append("EXECUTING")
        if k % 11 != 5:  # (else: still running at the end)
            states.append(rng.choice(["DONE", "DONE", "FAILED", "CANCELED"]))
        rows, ts = [], t
        for s in states:
            rows.append((s, ts))
            ts += rng.choice([0.0, 0.01, 0.3, 2.5, 7.0])
        out.append(
            {
                "uid": f"unit.{k:06d}",
                "desc": desc,
                "part": PARTS[k % 2],
                "slots": slots,
                "rows": rows,
            }
        )
    return out


def _write(stores: list, units: list[dict], rng: random.Random) -> None:
    """The units' rows in batches that cut each unit's life at random places, as the store
    writer may: a doc with its rows; rows before EXECUTING alone; a doc ahead of its rows (a
    send writes the docs of the units it sends first); a batch now and then written twice (a
    retry) or by the other connection.  An EXECUTING row comes with its doc, as a state change
    and its object are one record."""
    pending = {u["uid"]: 0 for u in units}
    by_uid = {u["uid"]: u for u in units}
    described: set[str] = set()
    while pending:
        b = Batch()
        for uid in rng.sample(sorted(pending), min(len(pending), 40)):
            u, i = by_uid[uid], pending[uid]
            rows = u["rows"]
            j = min(len(rows), i + rng.randint(1, 3))
            early = [s for s, _ in rows].index("EXECUTING")
            mode = rng.choice(["both", "both", "rows", "ahead"]) if j <= early else "both"
            last = j if mode != "ahead" else min(early, j + rng.randint(0, 2))
            if mode != "rows":
                doc = {"uid": uid, "session": SESSION, "pilot": PILOT, "state": rows[last - 1][0]}
                if uid not in described:
                    doc["description"] = u["desc"]
                    described.add(uid)
                if any(s == "EXECUTING" for s, _ in rows[:last]):
                    doc.update(partition=u["part"], slots=u["slots"])
                b.docs["units"][uid] = doc
            if mode == "ahead":
                continue  # its rows in a later batch
            for seq in range(i, j):
                s, ts = rows[seq]
                b.history.append((SESSION, "units", uid, s, ts, None, seq))
            if j == len(rows):
                del pending[uid]
            else:
                pending[uid] = j
        store = rng.choice(stores)
        store.write_batch(b)
        if rng.random() < 0.2:
            store.write_batch(b)  # a retry: its rows are there already


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flow_bins_equal_the_streamed_bins(tmp_path, seed):
    rng = random.Random(seed)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    one, other = open_store(url), open_store(url)
    try:
        one.write_batch(_head())
        _write([one, one, other], _units(400, rng), rng)
        tl = timeline.load(one, SESSION, max_units=0)
        assert (tl.start, tl.end) == (T0, T0 + SPAN)  # (session_span's)
        assert one.history_span(SESSION) == tuple(
            sqlite3.connect(tmp_path / "state.db")
            .execute("SELECT MIN(ts), MAX(ts) FROM history WHERE session = ?", (SESSION,))
            .fetchone()
        )
        streamed = bins.aggregate(one, tl, int(SPAN))
        flow = one.unit_flow(SESSION)
        assert flow is not None and len(flow) < 400 * 7
        kept = bins.from_flow(flow, tl, int(SPAN))
        assert np.allclose(kept.edges, streamed.edges)
        assert set(kept.states) == set(streamed.states)
        for state, step in streamed.states.items():
            assert np.allclose(kept.states[state].values, step.values, atol=1e-6), state
        assert set(kept.busy) == set(streamed.busy) == set(PARTS)
        for part, (cores, gpus) in streamed.busy.items():
            assert np.allclose(kept.busy[part][0].values, cores.values, atol=1e-6), part
            assert np.allclose(kept.busy[part][1].values, gpus.values, atol=1e-6), part
            assert cores.values.max() > 3 and gpus.values.max() > 1
        # fewer bins than ticks: each bin a whole number of ticks, its mean the ticks' mean
        coarse = bins.from_flow(flow, tl, 50)
        assert coarse.width == 3.0 and len(coarse.edges) == 41
        fine = kept.states["EXECUTING"].values[:-1]
        assert np.allclose(coarse.states["EXECUTING"].values[:-1], fine.reshape(40, 3).mean(1))
    finally:
        one.close()
        other.close()


def test_a_store_made_before_unit_flow_streams_its_old_sessions(tmp_path):
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}"
    rng = random.Random(3)
    store = open_store(url)
    store.write_batch(_head())
    _write([store], _units(60, rng), rng)
    store.close()
    db = sqlite3.connect(path)  # (as an earlier version left it)
    db.executescript("DROP TABLE unit_flow; DROP TABLE unit_flow_since; DROP TABLE session_span;")
    db.close()
    store = open_store(url)
    try:
        assert store.unit_flow(SESSION) is None  # its history began before: not whole
        assert store.history_span(SESSION) == (T0, T0 + SPAN)  # (scanned)
        drawn = plot.plot_session(store, SESSION, str(tmp_path / "old.png"), exact_units=10)
        assert drawn["units"] == 60 and (tmp_path / "old.png").stat().st_size > 0
        b = Batch()
        b.docs["units"]["unit.new"] = {"uid": "unit.new", "session": "session.later"}
        b.history.append(("session.later", "units", "unit.new", "NEW", T0 + 5, None, 0))
        store.write_batch(b)
        assert store.unit_flow("session.later") == [("state:NEW", int(T0 + 5), 1.0, 0.0)]
        assert store.history_span("session.later") == (T0 + 5, T0 + 5)
        assert store.history_span("session.none") == (None, None)
    finally:
        store.close()


def test_plot_of_a_big_session_reads_the_flow(tmp_path, monkeypatch):
    rng = random.Random(4)
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        store.write_batch(_head())
        _write([store], _units(120, rng), rng)
        monkeypatch.setattr(bins, "aggregate", None)  # (the streamed way is not taken)
        drawn = plot.plot_session(store, SESSION, str(tmp_path / "f.png"), exact_units=10)
        assert drawn["units"] == 120 and set(drawn["peak_cores"]) == set(PARTS)
        assert max(drawn["peak_cores"].values()) > 1
        assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    finally:
        store.close()


def test_rows_out_of_order_count_each_exit_once(tmp_path):
    """A unit's rows after its first written in any order (each alone): the bins are the exact
    ones of its history in order (the streamed way assumes the writer's order, so the
    reference here is series.py's exact steps)."""
    from pilot.pmgr.observe import series

    rng = random.Random(5)
    units = _units(30, rng)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = open_store(url)
    try:
        store.write_batch(_head())
        later = []
        for u in units:
            doc = {"uid": u["uid"], "session": SESSION, "pilot": PILOT, "state": "NEW"}
            doc.update(description=u["desc"], partition=u["part"], slots=u["slots"])
            b = Batch()
            b.docs["units"][u["uid"]] = doc
            b.history.append((SESSION, "units", u["uid"], "NEW", u["rows"][0][1], None, 0))
            store.write_batch(b)
            later += [(u["uid"], seq, s, ts) for seq, (s, ts) in enumerate(u["rows"]) if seq]
        rng.shuffle(later)
        for uid, seq, s, ts in later:
            b = Batch()
            b.history.append((SESSION, "units", uid, s, ts, None, seq))
            store.write_batch(b)
        tl = timeline.load(store, SESSION)
        kept = bins.from_flow(store.unit_flow(SESSION), tl, int(SPAN))
        end = tl.rel(tl.end)
        for state, step in series.unit_states(tl).items():
            _, (exact,) = series.bin_means(step.times, [step.values], end, int(SPAN))
            assert np.allclose(kept.states[state].values, exact, atol=1e-6), state
        for part, (cores, gpus) in series.busy(tl).items():
            for i, step in enumerate((cores, gpus)):
                grid, (vals,) = series.on_grid([step])
                _, (exact,) = series.bin_means(grid, [vals], end, int(SPAN))
                assert np.allclose(kept.busy[part][i].values, exact, atol=1e-6), part
    finally:
        store.close()


def test_a_unit_doc_with_fields_of_its_own_counts_what_it_asks(tmp_path):
    """A unit's first doc whose description has fields of its own (Own: a sweep's arguments,
    a call's function) is read through for what it asks, as a plain one is: the batch is
    written at once (it raised AttributeError, and the writer wrote the batch again one
    record at a time), and the unit's cores count in the flow."""
    from pilot.pmgr.store.base import Own, Template

    store = open_store(f"sqlite:///{tmp_path / 'own.db'}")
    try:
        b = _head()
        desc = Own(Template({"cores_per_rank": 3, "ranks": 1}), {"function": {"name": "f"}})
        b.docs["units"]["unit.000000"] = {
            "uid": "unit.000000", "session": SESSION, "pilot": PILOT, "partition": PARTS[0],
            "state": "EXECUTING", "slots": {"cpus": [0, 1, 2]}, "description": desc,
        }  # fmt: skip
        for seq, state in enumerate(["NEW", "SCHEDULING", "QUEUED", "EXECUTING"]):
            b.history.append((SESSION, "units", "unit.000000", state, T0 + 2 + seq, None, seq))
        assert store.write_batch(b) == []
        assert store.get("units", "unit.000000")["description"] == {
            "cores_per_rank": 3, "ranks": 1, "function": {"name": "f"},
        }  # fmt: skip
        flow = store.unit_flow(SESSION)
        assert any(series.startswith("cores") and v > 0 for series, _, v, _ in flow), flow
    finally:
        store.close()


def test_the_template_ids_kept_are_bounded_by_their_characters_too():
    """The store's cache of templates it wrote (text -> id) keeps at most MOST texts and
    CHARS_MOST characters: units of a 12 KB environment each held ~50 MB there at MOST texts."""
    ids = TextIds()
    text = "x" * 12_000
    for i in range(TextIds.MOST):
        ids.update({f"{i:06d}{text}": i})
    assert ids.chars <= TextIds.CHARS_MOST
    assert len(ids.ids) == TextIds.CHARS_MOST // (12_006)
    assert ids.get(f"{TextIds.MOST - 1:06d}{text}") == TextIds.MOST - 1  # (the newest kept)
    assert ids.get(f"{0:06d}{text}") is None  # (the oldest gone)
    small = TextIds()
    for i in range(TextIds.MOST + 10):
        small.update({str(i): i})
    assert len(small.ids) == TextIds.MOST and small.chars == sum(len(t) for t in small.ids)
