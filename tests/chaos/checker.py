"""The checker of a chaos seed: what the store says against what the units did.

    report = check(url, session, plan, work)
    report.violations    # [Violation(what, rule, evidence)], one line each when printed

Read: the store (the session's units, partitions, pilots and history rows, and the named
streams' marks), the agents' start journals (`<pilot sandbox>/<partition>.started`, every pilot
of the session) and the ground-truth log the units write themselves (tests/chaos/workload.py).
The rules, for every unit the store knows (each rule's name is what a violation says):
    final-once      its doc is final and its history has exactly one final row
    history         a legal path through the unit state machine (pilot/states.py), from NEW;
                    seqs 0..n-1; timestamps non-decreasing; the doc's state is the last row's
    reason          a FAILED or CANCELED unit says why
    started-twice   no rank started twice (the log), no unit journaled twice (the agents)
    done-ran        DONE only if every rank started exactly once and ran to its end, exit 0,
                    and the unit was journaled once
    outcome         a unit all of whose ranks ran to their end is DONE, unless its reason says
                    why not (killed, outcome unknown, lost, no space, ...)
    staged-out      a DONE staging unit's file is back in the client's directory, its own uid
                    in it
    unknown-ran     nothing ran (the log) or was journaled that the store does not know
    ran-after-final no rank started (the log's time) after the store's final record of the
                    unit's partition or pilot (SLACK s allowed: clocks of one machine)
    item            every item of every wave is exactly one unit (its `name`), and every unit
                    is an item; each wave's stream has its marks
    agree           the last client (WORK/client_view.json, written once its writer flushed)
                    and the store hold the same units, in the same states, with as many
                    history rows
Partitions and pilots: final-once, history (their own machines) and reason likewise.  What the
runner adds (tests/chaos/run.py): processes left, batch jobs left, hangs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter, defaultdict

from pilot import states as S
from pilot.pmgr.store import open_store
from tests.chaos import workload
from tests.chaos.schedule import Schedule

# a unit whose ranks all ran to their end may still not be DONE, when its reason says so
EXPLAINED = (
    "outcome is unknown",
    "killed",
    "lost",
    "halted",
    "No space left",
    "staging",
    "stopped",
    "canceled",
    "cancel",
    "unknown",
)
SLACK = 1.0  # s: a start the log stamps this much after its partition's final record is one
MACHINES = {"units": S.UNIT_MACHINE, "partitions": S.PARTITION_MACHINE, "pilots": S.PILOT_MACHINE}


@dataclasses.dataclass
class Violation:
    what: str  # the unit's (partition's, pilot's) uid, or what else it is about
    rule: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.what}: {self.rule}: {self.evidence}"


@dataclasses.dataclass
class Report:
    units: int = 0
    states: dict = dataclasses.field(default_factory=dict)
    violations: list = dataclasses.field(default_factory=list)

    def add(self, what: str, rule: str, evidence: str) -> None:
        self.violations.append(Violation(what, rule, evidence))


def journals(sandboxes: list[str]) -> Counter:
    """uid -> how many times an agent journaled its start, over every pilot sandbox."""
    started: Counter = Counter()
    for sandbox in sandboxes:
        if not sandbox or not os.path.isdir(sandbox):
            continue
        for name in os.listdir(sandbox):
            if name.endswith(".started"):
                with open(os.path.join(sandbox, name), errors="replace") as f:
                    started.update(line.strip() for line in f if line.strip())
    return started


def _history(report: Report, kind: str, uid: str, doc: dict, rows: list[dict]) -> None:
    machine = MACHINES[kind]
    rows = sorted(rows, key=lambda r: r["seq"] if r["seq"] is not None else -1)
    seqs = [r["seq"] for r in rows]
    said = " ".join(f"{r['seq']}:{r['state']}" for r in rows)
    finals = [r for r in rows if r["state"] in S.FINAL]
    if doc.get("state") not in S.FINAL:
        report.add(uid, "final-once", f"not final: the doc is {doc.get('state')}; history {said}")
    if len(finals) != 1:
        report.add(
            uid, "final-once", f"{len(finals)} final rows in its history: {said}; "
            + "; ".join(f"{r['state']} ({r.get('reason')!r})" for r in finals),
        )  # fmt: skip
    if seqs != list(range(len(rows))):
        report.add(uid, "history", f"seqs {seqs} are not 0..{len(rows) - 1}: {said}")
    if rows and rows[0]["state"] != S.NEW:
        report.add(uid, "history", f"starts at {rows[0]['state']}, not NEW: {said}")
    for a, b in zip(rows, rows[1:]):
        try:
            S.check_move(machine, uid, a["state"], b["state"])
        except S.IllegalTransition:
            report.add(uid, "history", f"illegal move {a['state']} -> {b['state']}: {said}")
        if (b["ts"] or 0) < (a["ts"] or 0):
            report.add(
                uid, "history", f"time goes back {a['state']} {a['ts']:.6f} -> "
                f"{b['state']} {b['ts']:.6f}: {said}",
            )  # fmt: skip
    if rows and doc.get("state") != rows[-1]["state"]:
        report.add(uid, "history", f"the doc says {doc.get('state')}, its last row {said}")
    if doc.get("state") in (S.FAILED, S.CANCELED) and not doc.get("reason"):
        report.add(uid, "reason", f"{doc.get('state')} without a reason")


def check(url: str, session: str, plan: Schedule, work: str) -> Report:
    store = open_store(url)
    try:
        units = {d["uid"]: d for d in store.find("units", session=session)}
        parts = {d["uid"]: d for d in store.find("partitions", session=session)}
        pilots = {d["uid"]: d for d in store.find("pilots", session=session)}
        rows: dict[tuple, list] = defaultdict(list)
        for r in store.history(session=session):
            rows[(r["kind"], r["uid"])].append(r)
        marks = {k: store.marks(f"{session}/stream/wave-{k}/") for k in range(len(plan.waves))}
    finally:
        store.close()
    report = Report(units=len(units), states=dict(Counter(d["state"] for d in units.values())))
    for kind, docs in (("units", units), ("partitions", parts), ("pilots", pilots)):
        for uid, doc in docs.items():
            _history(report, kind, uid, doc, rows.get((kind, uid), []))
    truth = workload.read_truth(os.path.join(work, "truth.log"))
    starts: Counter = Counter()
    ends: Counter = Counter()
    pids: dict = defaultdict(list)
    for uid, rank, pid, what, _ in truth:
        (starts if what == "start" else ends)[(uid, rank)] += 1
        pids[(uid, rank)].append(f"{what} pid {pid}")
    journal = journals([p.get("sandbox") for p in pilots.values()])
    for (uid, rank), n in sorted(starts.items()):
        if n > 1:
            report.add(uid, "started-twice", f"rank {rank} started {n} times: {pids[(uid, rank)]}")
    for uid, n in sorted(journal.items()):
        if n > 1:
            report.add(uid, "started-twice", f"journaled {n} times by the agents")
    ended = {}  # partition or pilot uid -> (its final state, when)
    for (kind, uid), rs in rows.items():
        if kind in ("partitions", "pilots"):
            for r in rs:
                if r["state"] in S.FINAL:
                    ended[uid] = (r["state"], r["ts"], r.get("reason"))
    first: dict = {}
    for uid, rank, _, what, t in truth:
        if what == "start":
            first.setdefault(uid, []).append((t, rank))
    for uid, times in sorted(first.items()):
        doc = units.get(uid) or {}
        for where in (doc.get("partition"), doc.get("pilot")):
            if where in ended and max(times)[0] > ended[where][1] + SLACK:
                t, rank = max(times)
                state, at, why = ended[where]
                report.add(
                    uid, "ran-after-final", f"rank {rank} started at {t:.3f}, {t - at:.1f} s "
                    f"after {where} was {state} in the store ({why!r})",
                )  # fmt: skip
    ran = {uid for uid, _ in starts} | set(journal)
    for uid in sorted(ran - set(units)):
        report.add(uid, "unknown-ran", f"ran (log: {sorted(pids.get((uid, 0), []))}, journal: "
                   f"{journal.get(uid, 0)}) but the store has no such unit")  # fmt: skip
    items = {}
    for k, w in enumerate(plan.waves):
        for i, item in enumerate(w.items):
            items[f"w{k}.i{i}"] = item
    by_name: dict[str, list] = defaultdict(list)
    for uid, doc in sorted(units.items()):
        desc = doc.get("description") or {}
        name = desc.get("name")
        by_name[name].append(uid)
        item = items.get(name)
        if item is None:
            report.add(uid, "item", f"is no item of the plan (name {name!r})")
            continue
        ranks = item.ranks
        state, reason, code = doc.get("state"), doc.get("reason") or "", doc.get("exit_code")
        ran_all = all(starts[(uid, r)] == 1 and ends[(uid, r)] == 1 for r in range(ranks))
        if state == S.DONE:
            per_rank = [(r, starts[(uid, r)], ends[(uid, r)]) for r in range(ranks)]
            if not ran_all or code not in (0, None) or journal.get(uid, 0) != 1:
                report.add(
                    uid, "done-ran", f"DONE, but (rank, starts, ends) {per_rank}, exit code "
                    f"{code}, journaled {journal.get(uid, 0)} time(s)",
                )  # fmt: skip
            if item.kind == "staging":
                back = os.path.join(work, workload.OUT, f"{name}.txt")
                text = open(back).read().split() if os.path.exists(back) else None
                if not text or text[-1] != uid:
                    report.add(uid, "staged-out", f"DONE, but {back} holds {text}")
        elif state in S.FINAL and ran_all and code in (0, None):
            if not any(word in reason for word in EXPLAINED):
                report.add(
                    uid, "outcome", f"{state} ({reason!r}, exit code {code}), yet every rank "
                    "of it ran to its end",
                )  # fmt: skip
    for name, uids in sorted(by_name.items(), key=lambda kv: str(kv[0])):
        if name in items and len(uids) > 1:
            report.add(name, "item", f"made {len(uids)} times: {uids}")
    for name in sorted(set(items) - set(by_name)):
        report.add(name, "item", "no unit in the store")
    for k, m in marks.items():
        if not m:
            report.add(f"wave-{k}", "item", "the stream has no marks in the store")
    _agree(report, session, units, rows, os.path.join(work, "client_view.json"))
    return report


def _agree(report: Report, session: str, units: dict, rows: dict, path: str) -> None:
    if not os.path.exists(path):
        return  # (no client finished: a hang, named as such)
    with open(path) as f:
        view = json.load(f)
    if not view.get("flushed"):
        report.add(session, "agree", "the last client's writer did not flush by its deadline")
    seen = view.get("units") or {}
    for uid, (state, n) in sorted(seen.items()):
        if state not in S.FINAL:
            continue  # (a unit the client waited for in vain: a hang; its close ends it)
        doc = units.get(uid)
        stored = len(rows.get(("units", uid), []))
        if doc is None:
            report.add(uid, "agree", f"the last client has it ({state}), the store has not")
        elif doc.get("state") != state or stored != n:
            report.add(
                uid, "agree", f"the last client: {state}, {n} history rows; the store: "
                f"{doc.get('state')}, {stored} rows",
            )  # fmt: skip
    for uid in sorted(set(units) - set(seen)):
        report.add(uid, "agree", f"the store has it ({units[uid].get('state')}), the last "
                   "client does not")  # fmt: skip


def main(argv: list[str]) -> int:
    """python -m tests.chaos.checker WORK: the checks again over a kept seed directory (an
    sqlite seed's: a MongoDB seed's database went with its run's server)."""
    work = argv[1]
    with open(os.path.join(work, "plan.json")) as f:
        plan = Schedule.from_json(f.read())
    (session,) = os.listdir(os.path.join(work, "sessions"))
    report = check(f"sqlite:///{os.path.join(work, 'store', 'state.db')}", session, plan, work)
    for v in report.violations:
        print(v)
    print(f"{report.units} units {report.states}, {len(report.violations)} violation(s)")
    return 1 if report.violations else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv))
