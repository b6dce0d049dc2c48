"""unit_flow: what `pilot plot` draws of a big session, kept by the store writer as it writes
(pmgr/store/sqlite.py), so that a plot of 10^7 units reads a few thousand rows, not 5 x 10^7.

    (session, series, tick) -> (s1, s2)
    series   "state:<STATE>"          units entering a state (+1) and leaving it (-1)
             "cores:<partition uid>"  cores held by the partition's EXECUTING units: taken
             "gpus:<partition uid>"   (+held) at EXECUTING, given back (-held) at the next row
    tick     floor(ts / TICK): the second of the change (TICK = 1 s)
    s1       the sum of the changes' values v in that tick
    s2       the sum of v * (ts - tick * TICK) (seconds into the tick: small numbers, exact sums)

An event (t, v) of a series adds v * (e - t) to the series' integral from 0 to time e > t, so the
integral to the end of any tick is a sum over the ticks before it of s1 * (e - tick start) - s2:
exact at tick boundaries.  pmgr/observe/bins.py's `from_flow` gives the time-weighted mean of
each series in bins whose edges are whole ticks, the same numbers its stream over the history
gives for those edges.  A unit's last state gets no -1 (it holds to the session's end), and an
EXECUTING unit holds its cores until its next row.

Each history row of a unit is an event: +1 to its state and -1 to the state of the row before
it (seq - 1), found in the batch or remembered (each unit's latest row written here, while it
is not final).  A unit whose rows do not follow what is remembered (another client wrote it,
or its rows came out of order) is read from the store: then each state's exit is counted by
whichever of its row and the next is inserted second.  A unit's first row (NEW, seq 0) is
taken to be its first written, as the store writer writes each unit's rows in order: a new
unit costs no read.  Only rows the store inserted count: when it ignored some (a retried
batch), those with an id above the last one before the batch.  What a unit holds is
held.held(slots, description) at its EXECUTING row, from the batch's doc (a state change
and its object are one record) or else the stored one, remembered until its next row; its
request (cores, GPUs) is remembered from its first doc (which carries the description) while
it is not final.  Memory: units in flight only.
"""

from __future__ import annotations

from pilot.pmgr.store.base import Own, Template
from pilot.pmgr.store.held import held_of, requested
from pilot.states import EXECUTING, FINAL

TICK = 1.0  # seconds a row of unit_flow covers (the keeper's int(ts) takes it to be 1)


class FlowKeeper:
    """The unit_flow changes of each batch (one per store connection; see the module doc)."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[int, str]] = {}  # uid -> (seq, state) of its latest row here
        self.asked: dict[str, tuple[float, float]] = {}  # uid -> request, units not final
        self.holding: dict[str, tuple[str, float, float]] = {}  # EXECUTING: partition, held

    def forget(self) -> None:
        """Another process wrote the store: what is remembered is read again when needed."""
        self.last.clear()
        self.asked.clear()
        self.holding.clear()

    def changes(self, docs: dict, rows: list, store_rows, store_docs) -> dict:
        """{(session, series, tick): [s1, s2]} for the history `rows` (store.base.HISTORY
        tuples) a batch inserted, in the order inserted (the units' rows count); `docs`: its
        unit docs.  `store_rows(uids)` -> {uid: [(seq, state, ts), ...]} (stored, this batch's
        included) and `store_docs(uids)` -> {uid: doc with partition, slots, description} are
        read for units whose rows do not follow what is remembered, and for EXECUTING units
        whose doc is not in the batch."""
        asked, last = self.asked, self.last
        for uid, d in docs.items():
            if uid not in asked:
                desc = d.get("description")
                if isinstance(desc, Own):  # (its own fields, arguments, ask for nothing)
                    desc = desc.template
                desc = desc.value if isinstance(desc, Template) else desc
                if desc:
                    asked[uid] = requested(desc)
        out: dict = {}
        get = out.get
        odd: dict[str, list] = {}  # uid -> its rows that do not follow (see _out_of_order)
        running: list = []  # (uid, session, tick, into, +1 taken / -1 given back)
        ended = []
        for row in rows:
            session, kind, uid, state, ts, _, seq = row
            if kind != "units":
                continue
            before = last.get(uid)
            if uid in odd or seq != (0 if before is None else before[0] + 1):
                odd.setdefault(uid, []).append(row)
                continue
            tick = int(ts)  # (TICK = 1 s; ts is epoch s, positive)
            into = ts - tick
            key = (session, _SERIES[state], tick)
            sums = get(key)
            if sums is None:
                out[key] = [1.0, into]
            else:
                sums[0] += 1.0
                sums[1] += into
            if before is not None:
                was = before[1]
                key = (session, _SERIES[was], tick)
                sums = get(key)
                if sums is None:
                    out[key] = [-1.0, -into]
                else:
                    sums[0] -= 1.0
                    sums[1] -= into
                if was == EXECUTING:
                    running.append((uid, session, tick, into, -1))
            if state == EXECUTING:
                running.append((uid, session, tick, into, 1))
            if state in FINAL:
                last.pop(uid, None)
                ended.append(uid)
            else:
                last[uid] = (seq, state)
        if running:
            self._held(out, docs, running, store_docs)
        if odd:
            self._out_of_order(out, docs, rows, odd, store_rows, store_docs)
        for uid in ended:
            asked.pop(uid, None)
        return out

    def _held(self, out: dict, docs: dict, running: list, store_docs) -> None:
        """What EXECUTING units took (+) and gave back (-), in their partitions' series."""
        holding = self.holding
        need = sorted(
            {
                uid
                for uid, _, _, _, sign in running
                if not (sign < 0 and uid in holding)
                and (_placed(docs.get(uid)) is None or uid not in self.asked)
            }
        )
        found = store_docs(need) if need else {}
        for uid, d in found.items():
            self.asked.setdefault(uid, requested(d.get("description") or {}))
        for uid, session, tick, into, sign in running:
            held = holding.pop(uid, None) if sign < 0 else None
            if held is None:
                doc = _placed(docs.get(uid)) or found.get(uid) or {}
                cores, gpus = held_of(doc.get("slots"), self.asked.get(uid, (1, 0)))
                held = (doc.get("partition") or "", cores, gpus)
            if sign > 0:
                holding[uid] = held
            part, cores, gpus = held
            if not part:  # (a unit with no partition is drawn in none)
                continue
            if cores:
                _add(out, (session, "cores:" + part, tick), sign * cores, into)
            if gpus:
                _add(out, (session, "gpus:" + part, tick), sign * gpus, into)

    def _out_of_order(self, out, docs, rows, odd: dict, store_rows, store_docs) -> None:
        """The rows of units that do not follow what is remembered, against their stored
        neighbours (this batch's included): each state's exit is counted by whichever of its
        row and the next one is inserted second."""
        stored = store_rows(sorted(odd))
        batch = {(r[2], r[6]) for r in rows}
        running: list = []
        for uid, mine in odd.items():
            by_seq = {seq: (state, ts) for seq, state, ts in stored.get(uid, ())}
            for session, _, _, state, ts, _, seq in sorted(mine, key=lambda r: r[6]):
                self._change(out, running, uid, session, state, ts, 1)
                if seq - 1 in by_seq:  # the state before was left now
                    self._change(out, running, uid, session, by_seq[seq - 1][0], ts, -1)
                after = by_seq.get(seq + 1)
                if after is not None and (uid, seq + 1) not in batch:  # left already
                    self._change(out, running, uid, session, state, after[1], -1)
            top = max(by_seq)
            if by_seq[top][0] in FINAL:
                self.last.pop(uid, None)
            else:
                self.last[uid] = (top, by_seq[top][0])
        running.sort(key=lambda r: -r[4])  # (taken before given back: one holding a unit)
        if running:
            self._held(out, docs, running, store_docs)

    @staticmethod
    def _change(out, running, uid, session, state, ts, sign) -> None:
        tick = int(ts)
        into = ts - tick
        _add(out, (session, _SERIES[state], tick), float(sign), into)
        if state == EXECUTING:
            running.append((uid, session, tick, into, sign))


class _Series(dict):
    """state -> its series' name ("state:" + state), made once per state."""

    def __missing__(self, state: str) -> str:
        name = self[state] = "state:" + state
        return name


_SERIES = _Series()


def _placed(doc: dict | None) -> dict | None:
    """The doc, if it says where its unit runs (slots), else None."""
    return doc if doc is not None and doc.get("slots") is not None else None


def _add(out: dict, key: tuple, v: float, into: float) -> None:
    sums = out.get(key)
    if sums is None:
        out[key] = [v, v * into]
    else:
        sums[0] += v
        sums[1] += v * into


def moves_flow(moves: list, out: dict | None = None) -> dict:
    """{(session, series, tick): [s1, s2]} of units' moves in columns (store.base.UnitMoves):
    +1 for the state each unit moved to, -1 for the one it left (`prev`), and, into or out of
    EXECUTING, what it holds (`held`: partition, cores, gpus) taken or given back.  What the
    writer knows of each unit comes with its moves: nothing is remembered or read here.
    Summed a tick at a time (the moves of a batch mostly fall into one or two seconds)."""
    out = {} if out is None else out
    for m in moves:
        session, state = m.session, m.state
        ts = m.ts
        prev, held = m.prev, m.held
        sign = 1.0 if state == EXECUTING else -1.0
        # the moves by tick: [count, sum of (ts - tick)] each
        by_tick = _by_tick(ts)
        for tick, (n, into) in by_tick.items():
            _add_sums(out, (session, _SERIES[state], tick), n, into)
        if isinstance(prev, list):
            for i, p in enumerate(prev):
                if p is not None:
                    t = ts[i]
                    _add(out, (session, _SERIES[p], int(t)), -1.0, t - int(t))
        elif prev is not None:
            series = _SERIES[prev]
            for tick, (n, into) in by_tick.items():
                _add_sums(out, (session, series, tick), -n, -into)
        if held is not None and held[0] is not None and held.count(held[0]) == len(held):
            part, cores, gpus = held[0]  # (all hold the same: the usual group)
            for tick, (n, into) in by_tick.items() if part else ():
                if cores:
                    _add_sums(out, (session, "cores:" + part, tick), sign * cores * n,
                              sign * cores * into)  # fmt: skip
                if gpus:
                    _add_sums(out, (session, "gpus:" + part, tick), sign * gpus * n,
                              sign * gpus * into)  # fmt: skip
        elif held is not None:
            for i, h in enumerate(held):
                if h is not None and h[0]:
                    part, cores, gpus = h
                    t = ts[i]
                    tick = int(t)
                    if cores:
                        _add(out, (session, "cores:" + part, tick), sign * cores, t - tick)
                    if gpus:
                        _add(out, (session, "gpus:" + part, tick), sign * gpus, t - tick)
    return out


def _by_tick(ts: list) -> dict:
    lo, hi = int(min(ts)), int(max(ts))
    if lo == hi:  # (one second: the usual batch)
        return {lo: (float(len(ts)), sum(ts) - lo * len(ts))}
    out: dict = {}
    for t in ts:
        tick = int(t)
        got = out.get(tick)
        out[tick] = (1.0, t - tick) if got is None else (got[0] + 1.0, got[1] + t - tick)
    return out


def _add_sums(out: dict, key: tuple, n: float, into: float) -> None:
    """A tick's n moves (+1 each, or -1 each with n < 0) whose (ts - tick) sum to `into`."""
    sums = out.get(key)
    if sums is None:
        out[key] = [n, into]
    else:
        sums[0] += n
        sums[1] += into
