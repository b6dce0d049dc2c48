"""A session read back from its state store as plain records: what `pilot plot` and
`pilot export --format chrome-trace` draw from.  Pure Python (no numpy).

    load(store, session, max_units=None) -> Timeline
        start, end      epoch seconds: the session's creation (or its first state change, if
                        earlier) and its last state change; `rel(ts)` is seconds after start
        pilots          [Entity]: uid, history [(state, ts)], reason, cores, gpus (its size),
                        jobs (those it grew by: job_marks() for the plot)
        partitions      [Entity]: the same, with `pilot`; cores/gpus are what it was given
        units           [UnitRow]: uid, pilot, partition, node, slots, state, reason,
                        exit_code, history, cores/gpus (what it holds while it runs)
        reconfigs       [Reconfig]: pilot, ts, stopped [uid], started [uid]
        units_total     how many units the session has (the store's count)

How it reads (bounded by `max_units`, not by the session): the pilots' and partitions' rows by
their uids, the session's span and unit count as aggregates, and the units' history streamed
oldest first (`iter_history`), of which it keeps the first `max_units` units to change (all,
if None) and stops reading once each of those has reached a final state; their docs are
fetched by uid.  `units` then holds those, `units_total - len(units)` were left out.

What a unit holds: its granted `slots` ({"cpus": [ids], "gpus": [ids]}, a list of those for
several ranks) when it has them, else its description (ranks x cores per rank; gpus per rank,
or RP's gpu_processes for the whole unit).  A GPU shared by fractional requests counts as
that fraction.  It holds them from EXECUTING until its next state (its final one; a
restartable unit routed again holds nothing meanwhile); still EXECUTING: until `end`.

Reconfigs: each partition a reconfig started or stopped names its command (`started_by`,
`stopped_by`: the id partition/manager.py gives them), so a reconfig is the partitions that name
one command, at the time of its first change (a start's NEW, a stop's final state, when its
agent had drained).  A store written before partitions named their commands has only the
partitions' histories: there a pilot's initial partitions are the first len(description.parts)
of it (all those that were NEW before its first partition went ACTIVE, without a description);
every later partition was started by a reconfig (its NEW time), and a partition that ended
with the reason "stopped by reconfig" was stopped by one.  Starts and stops within
RECONFIG_GAP seconds of each other are one reconfig there; a partition canceled otherwise
(`partition.cancel()`) inside such a cluster joins it, unless it ended with its pilot (within
RECONFIG_GAP of the pilot's final state: that is the pilot's teardown).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pilot.pmgr.store.base import PAGE
from pilot.pmgr.store.held import held
from pilot.states import ACTIVE, CANCELED, DONE, EXECUTING, FINAL, NEW

RECONFIG_GAP = 2.0  # s: stops and starts closer than this are one reconfig
STOPPED_BY_RECONFIG = "stopped by reconfig"  # the reason partition/manager.py gives


@dataclass
class Entity:
    """A pilot or a partition."""

    uid: str
    state: str | None  # (None: a doc of the store without one)
    history: list[tuple[str, float]]
    reason: str | None = None
    cores: float = 0
    gpus: float = 0
    pilot: str | None = None  # partitions: the pilot they are part of
    description: dict = field(default_factory=dict)
    jobs: list[dict] = field(default_factory=list)  # pilots: the jobs it grew by (growth.py)
    started_by: str | None = None  # partitions: the reconfig command that started it
    stopped_by: str | None = None  # partitions: the reconfig command that stopped it

    def job_marks(self) -> list[tuple[float, str]]:
        """(ts, label) of each job it grew by: asked for, and given back or ended."""
        out = []
        for j in self.jobs:
            if isinstance(j.get("asked"), (int, float)):
                out.append((j["asked"], f"grow {j.get('job')} +{j.get('nodes')} node(s)"))
            if isinstance(j.get("ended"), (int, float)):
                out.append((j["ended"], f"{j.get('state')} {j.get('job')}"))
        return out

    def first(self, state: str) -> float | None:
        return next((ts for s, ts in self.history if s == state), None)

    @property
    def ended(self) -> float | None:
        """When it reached its final state (None: not final in the store)."""
        return self.history[-1][1] if self.history and self.history[-1][0] in FINAL else None


@dataclass
class UnitRow:
    uid: str
    state: str | None  # (None: a unit the store has no doc of, its history only)
    history: list[tuple[str, float]]
    pilot: str | None = None
    partition: str | None = None
    node: object = None  # a node name, a list of them (multi-node), or None (never placed)
    slots: object = None
    reason: str | None = None
    exit_code: int | None = None
    cores: float = 0
    gpus: float = 0

    def executing(self, end: float) -> list[tuple[float, float]]:
        """[(start, stop)]: when it held its resources (stop = `end` while still running)."""
        spans = []
        for i, (state, ts) in enumerate(self.history):
            if state == EXECUTING:
                nxt = self.history[i + 1][1] if i + 1 < len(self.history) else end
                spans.append((ts, max(ts, nxt)))
        return spans


@dataclass
class Reconfig:
    pilot: str
    ts: float
    stopped: list[str]
    started: list[str]

    def label(self, short: bool = True) -> str:
        name = (lambda uid: uid.removeprefix(self.pilot + ".")) if short else (lambda uid: uid)
        stop = " ".join("-" + name(u) for u in self.stopped)
        start = " ".join("+" + name(u) for u in self.started)
        return " ".join(x for x in ("reconfig", stop, start) if x)


@dataclass
class Timeline:
    session: str
    start: float
    end: float
    pilots: list[Entity]
    partitions: list[Entity]
    units: list[UnitRow]
    reconfigs: list[Reconfig]
    units_total: int = 0

    @property
    def left_out(self) -> int:
        """Units of the session not in `units` (load's max_units)."""
        return max(0, self.units_total - len(self.units))

    def rel(self, ts: float) -> float:
        return ts - self.start

    @property
    def cores(self) -> float:
        return sum(p.cores for p in self.pilots)

    @property
    def gpus(self) -> float:
        return sum(p.gpus for p in self.pilots)


def load(store, session: str, max_units: int | None = None) -> Timeline:
    """What `session` left in `store` (a pmgr.store StateStore), with at most `max_units`
    units (the first to change; None: all of them)."""
    doc = store.get("sessions", session) or {}
    pilot_docs = store.find("pilots", session=session)
    part_docs = store.find("partitions", session=session)
    hist = {d["uid"]: _states(store.history(uid=d["uid"])) for d in pilot_docs + part_docs}
    pilots = [_entity(d, hist, d.get("size") or {}) for d in pilot_docs]
    parts = [_entity(d, hist, d.get("resources") or {}) for d in part_docs]
    parts.sort(key=lambda p: _natural(p.uid))
    total = sum(store.unit_counts(session, by=("state",)).values())
    units = _units(store, session, total if max_units is None else min(max_units, total))
    first, last = store.history_span(session)
    stamps = [ts for ts in (first, last) if ts is not None]
    created = doc.get("created")
    start = min([created, *stamps] if created is not None else stamps, default=0.0)
    end = max(stamps, default=start)
    tl = Timeline(session, start, end, pilots, parts, units, find_reconfigs(pilots, parts))
    tl.units_total = total
    return tl


def _states(rows) -> list[tuple[str, float]]:
    return [(r["state"], r["ts"]) for r in sorted(rows, key=lambda r: r["seq"])]


def _units(store, session: str, keep: int) -> list[UnitRow]:
    """The first `keep` units of `session` to change, with their histories, by uid."""
    rows: dict[str, list] = {}
    open_ = 0  # kept units not yet in a final state
    intern: dict[str, str] = {}
    if keep > 0:
        for _, _, uid, state, ts, _, seq in store.iter_history(session, kinds=("units",)):
            mine = rows.get(uid)
            if mine is None:
                if len(rows) >= keep:
                    if not open_:
                        break  # every kept unit has ended: the rest is left out
                    continue
                mine = rows[uid] = []
                open_ += 1
            state = intern.setdefault(state, state)
            if state in FINAL:  # (once per unit: final states are final)
                open_ -= 1
            mine.append((seq, state, ts))
    units = []
    uids = sorted(rows)
    for i in range(0, len(uids), PAGE):
        docs = store.get_many("units", uids[i : i + PAGE])
        for uid in uids[i : i + PAGE]:
            mine = rows.pop(uid)
            mine.sort()
            units.append(_unit(docs.get(uid) or {"uid": uid}, [(s, ts) for _, s, ts in mine]))
    return units


def _natural(uid: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", uid)]


def _entity(doc: dict, hist: dict, size: dict) -> Entity:
    return Entity(
        uid=doc["uid"],
        state=doc.get("state"),
        history=hist.get(doc["uid"], []),
        reason=doc.get("reason"),
        cores=size.get("cores") or 0,
        gpus=size.get("gpus") or 0,
        pilot=doc.get("pilot"),
        description=doc.get("description") or {},
        jobs=[j for j in doc.get("jobs") or [] if isinstance(j, dict)],
        started_by=_text(doc.get("started_by")),
        stopped_by=_text(doc.get("stopped_by")),
    )


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def _unit(doc: dict, history: list) -> UnitRow:
    desc = doc.get("description") or {}
    cores, gpus = held(doc.get("slots"), desc)
    return UnitRow(
        uid=doc["uid"],
        state=doc.get("state"),
        history=history,
        pilot=doc.get("pilot"),
        partition=doc.get("partition"),
        node=doc.get("node"),
        slots=doc.get("slots"),
        reason=doc.get("reason"),
        exit_code=doc.get("exit_code"),
        cores=cores,
        gpus=gpus,
    )


def find_reconfigs(pilots: list[Entity], parts: list[Entity], gap: float = RECONFIG_GAP):
    """The reconfigs of each pilot: by the commands its partitions name, or read from their
    histories in a store that has no such names (module docstring)."""
    out = []
    for pilot in pilots:
        mine = [p for p in parts if p.pilot == pilot.uid]
        if any(p.started_by or p.stopped_by for p in mine):
            out += _named_reconfigs(pilot, mine)
        else:
            out += _inferred_reconfigs(pilot, mine, gap)
    return sorted(out, key=lambda r: r.ts)


def _named_reconfigs(pilot: Entity, parts: list[Entity]) -> list[Reconfig]:
    changes: dict[str, list] = {}  # command id -> [(ts, "start" | "stop", uid)]
    for p in parts:
        if p.started_by and p.first(NEW) is not None:
            changes.setdefault(p.started_by, []).append((p.first(NEW), "start", p.uid))
        if p.stopped_by and p.ended is not None:
            changes.setdefault(p.stopped_by, []).append((p.ended, "stop", p.uid))
    return [_reconfig(pilot, cluster) for cluster in changes.values()]


def _reconfig(pilot: Entity, cluster: list) -> Reconfig:
    return Reconfig(
        pilot=pilot.uid,
        ts=min(c[0] for c in cluster),
        stopped=sorted({u for _, k, u in cluster if k == "stop"}, key=_natural),
        started=sorted({u for _, k, u in cluster if k == "start"}, key=_natural),
    )


def _inferred_reconfigs(pilot: Entity, mine: list[Entity], gap: float) -> list[Reconfig]:
    initial = _initial(pilot, mine)
    changes = [(p.first(NEW), "start", p.uid) for p in mine if p.uid not in initial]
    changes += [
        (p.ended, "stop", p.uid) for p in mine if (p.reason or "").startswith(STOPPED_BY_RECONFIG)
    ]
    clusters: list[list] = []
    for change in sorted(c for c in changes if c[0] is not None):
        if clusters and change[0] - clusters[-1][-1][0] <= gap:
            clusters[-1].append(change)
        else:
            clusters.append([change])
    teardown = pilot.ended - gap if pilot.ended is not None else float("inf")
    others = [  # ended otherwise (partition.cancel()), but not as the pilot ended
        p
        for p in mine
        if not (p.reason or "").startswith(STOPPED_BY_RECONFIG)
        and p.state in (CANCELED, DONE)
        and p.ended is not None
        and p.ended < teardown
    ]
    out = []
    for cluster in clusters:
        lo, hi = cluster[0][0] - gap, cluster[-1][0] + gap
        cluster += [(p.ended, "stop", p.uid) for p in others if lo <= p.ended <= hi]
        out.append(_reconfig(pilot, cluster))
    return out


def _initial(pilot: Entity, parts: list[Entity]) -> set[str]:
    """The uids of the partitions a pilot was submitted with."""
    described = pilot.description.get("parts")
    if described:
        return {p.uid for p in parts[: len(described)]}
    active = [t for t in (p.first(ACTIVE) for p in parts) if t is not None]
    first_active = min(active, default=float("inf"))
    return {p.uid for p in parts if (p.first(NEW) or 0) <= first_active}
