"""One look at a running pilot for `pilot top`: a Snapshot, merged from what the pilot's
bootstrap says over its control socket and what the session's store holds (top_store.py).

The control socket (partition/control.py), asked once per refresh by Source.ask, a REQ
socket with the session's CURVE keys:
    top -> bootstrap   {cid: "top.<pid>", op: "partitions", args: {}}
    bootstrap -> top   {cid, ok: true, result: {pilot, size, free, partitions: [...]}}
                       | {cid, ok: false, error}
    top -> bootstrap   {cid, op: "nodes", args: {}}          (a pilot of more than one node)
    bootstrap -> top   {cid, ok: true, result: {pilot, nodes: [[index, name, state, cores,
                       gpus, busy cores, busy gpus, ranks, partition], ...]}}
No answer within CONTROL_TIMEOUT: the refresh goes on with the store alone (the header says
why).  Once the bootstrap's control file is gone or stale it is not asked again; if its client
has not stored the pilot's end GONE_GRACE later, the pilot is shown as lost.
The bootstrap's word wins for the pilot's size, free cores and partitions (live whichever
process runs the client, and even without one), and for what is busy where (its nodes' load:
no walk of the EXECUTING units, which a pilot of 10^5 cores has as many of); the store's for the
pilot's state (though a pilot that answers has not ended yet), its units (per partition and
state; the cores EXECUTING units hold when the pilot does not answer: pmgr/observe/
timeline.py) and the latest events (pilot and partition state changes, reconfigs, FAILED
units with their reason).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import zmq

from pilot import states as S
from pilot.descriptions import ComputePilotDescription
from pilot.pmgr.observe.timeline import STOPPED_BY_RECONFIG
from pilot.pmgr.observe.top_store import open_reader
from pilot.pmgr.observe.top_target import Target, read_control
from pilot.pmgr.store.held import held
from pilot.wire import security
from pilot.wire.protocol import pack, unpack

CONTROL_TIMEOUT = 2.0  # s a refresh waits for the pilot's answer
GONE_GRACE = 5.0  # s the client gets to store a pilot's end once its bootstrap is gone
STYLE = {  # the colour of a state, in the frame and in the events' lines
    S.ACTIVE: "green",
    S.EXECUTING: "green",
    S.DONE: "blue",
    S.FAILED: "bold red",
    S.CANCELED: "yellow",
    S.PENDING: "cyan",
    S.STARTING: "cyan",
    S.QUEUED: "cyan",
}


@dataclass
class Snapshot:
    session: str
    pilot: str
    state: str
    reason: str | None
    size: dict
    free: dict | None
    runtime: float | None  # s, as described
    active_since: float | None  # epoch s
    ended_at: float | None
    # uid, state, reason, cores, gpus, busy (cores, gpus), units {state: n}, runner
    parts: list[dict]
    unrouted: dict  # units of the pilot at no partition: {state: n}
    totals: dict  # all of the pilot's units: {state: n}
    events: list[tuple[float, str, str]]  # (ts, text, style)
    live: bool  # the control socket answered
    lost: bool = False  # its bootstrap is gone, and the store was not told how it ended
    note: str = ""  # why it did not
    others: list[str] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)  # its batch jobs (partition/growth.py)
    # its nodes, as the bootstrap says (a pilot of more than one node, while it answers):
    # [[index, name, state, cores, gpus, busy cores, busy gpus, ranks, partition], ...]
    nodes: list = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.state in S.FINAL or self.lost


class Source:
    """Polls one pilot: its control socket and its session's store (module docstring)."""

    def __init__(self, target: Target, database_url: str | None = None) -> None:
        self.target = target
        self.reader = open_reader(target.session, database_url)
        self.keys = None
        if target.control is not None:
            try:
                self.keys = security.load(target.control["keys"])
            except OSError as exc:
                raise ValueError(
                    f"cannot read the session's keys ({exc}): only the user who runs "
                    f"{target.pilot} may watch it"
                ) from None
        self.gone: float | None = None if target.control else time.monotonic()  # since when

    def close(self) -> None:
        self.reader.close()

    def ask(self, op: str = "partitions") -> tuple[dict | None, str]:
        """The bootstrap's answer to `op` (partitions, nodes), or None and why not."""
        if self.gone is None:
            assert self.target.control is not None  # (__init__: gone None only with a control)
            if read_control(self.target.control["path"]) is None:
                self.gone = time.monotonic()
        if self.gone is not None:
            return None, "its bootstrap is gone"
        # (not gone: the target has a control, whose keys __init__ loaded)
        assert self.keys is not None and self.target.control is not None
        sock: zmq.Socket = zmq.Context.instance().socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(CONTROL_TIMEOUT * 1000))
        try:
            self.keys.client(sock)
            sock.connect(self.target.control["endpoint"])
            sock.send(pack({"cid": f"top.{os.getpid()}", "op": op, "args": {}}))
            reply = unpack(sock.recv())
        except zmq.Again:
            return None, f"no answer within {CONTROL_TIMEOUT:g} s"
        except zmq.ZMQError as exc:
            return None, str(exc)
        finally:
            sock.close()
        if not reply.get("ok"):
            return None, f"refused: {reply.get('error')}"
        return reply["result"], ""

    def poll(self) -> Snapshot:
        """One look at the pilot: its bootstrap's answer and its store's, merged."""
        t = self.target
        listing, note = self.ask()
        doc = next((p for p in self.reader.pilots(t.session) if p["uid"] == t.pilot), None) or {}
        times = self.reader.state_times(t.pilot)
        state = doc.get("state") or (S.ACTIVE if listing else "?")
        if listing and state in S.FINAL:
            state = S.ACTIVE  # still answering: the store's word is not the last one yet
        lost = (  # gone, and its client did not write the end within the grace: it is gone too
            self.gone is not None
            and state not in S.FINAL
            and time.monotonic() - self.gone > GONE_GRACE
        )
        stored_desc = doc.get("description")
        runtime = ComputePilotDescription.from_stored(stored_desc).runtime if stored_desc else None
        active = next((ts for s, ts in times if s == S.ACTIVE), None)
        ended = times[-1][1] if times and times[-1][0] in S.FINAL else None
        stored = {p["uid"]: p for p in self.reader.partitions(t.pilot)}
        parts = merged_partitions(listing, stored)
        counts = self.reader.unit_counts(t.session, t.pilot)
        nodes: list = []
        if listing and (listing.get("size") or {}).get("nodes", 1) > 1:
            got, _ = self.ask("nodes")
            nodes = (got or {}).get("nodes") or []
        if nodes:  # (live: its agents' word; no walk of the EXECUTING units)
            busy = busy_of_nodes(nodes)
        else:
            busy = busy_per_partition(self.reader.executing(t.session, t.pilot))
        rows = [
            partition_row(uid, parts[uid], stored, busy, counts)
            for uid in sorted(parts, key=_natural)
        ]
        totals, unrouted = _unit_totals(counts, parts)
        n_initial = len((doc.get("description") or {}).get("parts") or ())
        jobs = (listing or {}).get("jobs") or doc.get("jobs") or []
        events = describe_events(self.reader.events(t.session), t.pilot, stored, n_initial)
        events = sorted(events + job_events(jobs), key=lambda e: e[0])
        return Snapshot(
            session=t.session,
            pilot=t.pilot,
            state=state,
            reason=doc.get("reason"),
            size=(listing or {}).get("size") or doc.get("size") or {},
            free=(listing or {}).get("free"),
            runtime=runtime * 60 if isinstance(runtime, (int, float)) else None,
            active_since=active,
            ended_at=ended,
            parts=rows,
            unrouted=unrouted,
            totals=totals,
            events=events,
            live=listing is not None,
            lost=lost,
            note=note,
            others=t.others,
            jobs=jobs,
            nodes=nodes,
        )


def merged_partitions(listing: dict | None, stored: dict) -> dict:
    """The pilot's partitions by uid: the live listing's (else the store's), then those the
    listing lacks as the store has them."""
    parts = {}
    for p in (listing or {}).get("partitions", []) or stored.values():
        parts[p["uid"]] = p
    for uid, p in stored.items():
        parts.setdefault(uid, p)
    return parts


def busy_per_partition(executing: list[dict]) -> dict:
    """{partition: (cores, GPUs)} that the EXECUTING units hold."""
    busy: dict = {}
    for u in executing:
        cores, gpus = held(u.get("slots"), u.get("description") or {})
        c, g = busy.get(u.get("partition"), (0, 0))
        busy[u.get("partition")] = (c + cores, g + gpus)
    return busy


def busy_of_nodes(nodes: list) -> dict:
    """{partition: (cores, GPUs)} busy, from the bootstrap's `nodes` rows."""
    busy: dict = {}
    for row in nodes:
        part = row[8]
        if part is not None:
            c, g = busy.get(part, (0, 0))
            busy[part] = (c + row[5], g + row[6])
    return busy


def partition_row(uid: str, p: dict, stored: dict, busy: dict, counts: dict) -> dict:
    """One of Snapshot.parts: partition `uid` as listed (`p`) with its units' counts."""
    r = p.get("resources") or (stored.get(uid) or {}).get("resources") or {}
    return {
        "uid": uid,
        "state": p.get("state"),
        "reason": p.get("reason"),
        "cores": r.get("cores", 0),
        "gpus": r.get("gpus", 0),
        "busy": busy.get(uid, (0, 0)),
        "units": {s: n for (part, s), n in counts.items() if part == uid},
        "runner": p.get("runner"),  # (the live listing's: how its agent starts units)
    }


def _unit_totals(counts: dict, parts: dict) -> tuple[dict, dict]:
    """({state: n} of all the pilot's units, {state: n} of those at no partition in `parts`)."""
    unrouted: dict = {}
    totals: dict = {}
    for (part, s), n in counts.items():
        totals[s] = totals.get(s, 0) + n
        if part not in parts:
            unrouted[s] = unrouted.get(s, 0) + n
    return totals, unrouted


def _natural(uid: str) -> list:
    return [int(x) if x.isdigit() else x for x in uid.replace(".", " . ").split()]


def describe_events(rows: list[dict], pilot: str, parts: dict, n_initial: int) -> list[tuple]:
    """(ts, text, style) per event of `pilot`: its state changes, its partitions' (a start
    after the initial ones and a stop with the reconfig reason are shown as reconfigs), and
    its FAILED units with the reason."""
    out = []
    prefix = f"{pilot}.part."
    for r in rows:
        state, uid, reason = r["state"], r["uid"], r.get("reason")
        if r["kind"] == "pilots":
            if uid != pilot or state == S.NEW:
                continue
            text = f"{uid} {state}" + (f": {reason}" if reason else "")
        elif r["kind"] == "partitions":
            if not uid.startswith(prefix):
                continue
            index = uid[len(prefix) :]
            if state == S.NEW:
                if not index.isdigit() or int(index) < n_initial:
                    continue
                text = f"reconfig: started {uid}" + _size(parts.get(uid))
            elif state == S.CANCELED and (reason or "").startswith(STOPPED_BY_RECONFIG):
                why = (reason or "")[len(STOPPED_BY_RECONFIG) :].lstrip(": ")
                text = f"reconfig: stopped {uid}" + (f" ({why})" if why else "")
            else:
                text = f"{uid} {state}" + (f": {reason}" if reason else "")
        else:
            if r.get("pilot") not in (pilot, None):
                continue
            where = f" in {r['partition']}" if r.get("partition") else ""
            text = f"{uid} FAILED{where}" + (f": {reason}" if reason else "")
        out.append((r["ts"], text, STYLE.get(state, "")))
    return out


def job_events(jobs: list[dict]) -> list[tuple]:
    """(ts, text, style) of each job the pilot grew by: asked for, joined, ended, with the
    reasons (partition/growth.py; an adapt policy's grow says why in the job's reason, its
    shrink in the stopped partition's)."""
    out = []
    for j in jobs:
        name, when = j.get("job"), j.get("asked")
        if not isinstance(name, str) or not isinstance(when, (int, float)):
            continue
        out.append((when, f"grow: {name} of {j.get('nodes')} node(s): {j.get('reason')}", "cyan"))
        if isinstance(j.get("joined"), (int, float)):
            out.append((j["joined"], f"grow: {name} joined: {', '.join(j.get('names') or [])}",
                        "green"))  # fmt: skip
        if isinstance(j.get("ended"), (int, float)):
            state = j.get("state")
            out.append((j["ended"], f"{state}: {name}: {j.get('why_ended')}",
                        "yellow" if state in ("ended", "failed") else "dim"))  # fmt: skip
    return out


def _size(doc: dict | None) -> str:
    d = (doc or {}).get("description") or {}
    parts = [f"{k}={d[k]}" for k in ("size", "cores", "gpus", "nodes") if d.get(k) is not None]
    return f" ({', '.join(parts)})" if parts else ""
