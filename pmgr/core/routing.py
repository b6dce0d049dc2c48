"""Unit routing (client side): which partition each waiting unit goes to, and its sending there.

`Routing` is a part the UnitManager holds (pmgr/core/unit_manager.py), given the session, the
manager's unit table and its name in its constructor; it owns what routing is about: the pilots
units go to (`pilots`), the units waiting at the client (`pending`) and the pilots units are
pinned to that are not added yet (`waiting_for`).  Its methods run with the session lock held.
The manager's other parts call `route`, `bind`, `never_fits` and `find_partition`, and queue
units in `pending` (Submission; UnitEvents, for units handed back).

Where a unit goes: a unit with `partition=` goes to that partition once it is ACTIVE; one with
`tag=` to the partition the tagged unit went to; any other unit goes to the ACTIVE partition of
this manager's pilots with the fewest outstanding units per core among those whose largest node
can hold it (of its pilot only, when it has `pilot=` or, with SCHEDULER_ROUND_ROBIN, when it
was bound to the next pilot in turn at submit).  A partition holds at most its window of units
not yet final (Partition.window: 4 x cores + 768, plus what it ends in WINDOW_AHEAD seconds at
its recent rate): enough to keep its agent busy while its reports and the next units are on
their way, few enough that a partition started later gets work and a stopped one has little to
hand back.  While a partition of a running pilot is coming up (NEW, PENDING, STARTING: a
reconfig started it, or the pilot's own partitions come up one after another) the window is
2 x cores plus that rate's share, so that units handed back by a stopped partition, or
submitted meanwhile, wait here for the new one instead of queueing behind another's.  Units
wait at the client (state SCHEDULING) otherwise; each routing round
(`route`) sends one batch per partition.

A unit that can no longer go anywhere ends FAILED with the reason: larger than any node of
every pilot, or its named partition, pilot or tagged unit's partition ended, or no live pilot
is left.

How a batch is sent (persist, then send):
    route       gives each chosen unit its partition, then asks the store writer
                (`send_after`) to write those units' records first
    writer      once they are in the store, calls `_send_persisted` on its thread: for each
                partition, `units` messages [b"units", part uid, packed records] of at most
                SEND_CHUNK units go to the pilot on the channel; units in a row made from one
                description go as one bulk (`wire_list`: their shared fields once, then uids)
    refused     a unit the store refused for good is not sent: it ends FAILED
A unit with input files at the client goes to its partition's pilot first (pmgr/core/transfers.py)
and is sent once they are there, or routed again if the partition went away meanwhile.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from pilot import states as S
from pilot.pmgr.core.blueprint import ARGS, FUNCTION, OWN
from pilot.pmgr.core.handles import Unit
from pilot.pmgr.core.unit_table import UnitTable
from pilot.policy import pin_error
from pilot.rp.names import SCHEDULER_ROUND_ROBIN
from pilot.wire import framed
from pilot.wire.protocol import pack

SEND_CHUNK = 2000
_COMING = (S.NEW, S.PENDING, S.STARTING)  # a partition's states before it is ACTIVE
REBALANCE_EVERY = 0.2  # s between two looks for units to move to a partition with free cores
REBALANCE_WAIT = 5.0  # s an ask waits for its answer before the partition is asked again
REBALANCE_SCAN = 4096  # the youngest units in flight looked at for one (~1 ms)
REBALANCE_AFTER = 1.0  # s a queue must hold at its partition's rate for its units to move
REBALANCE_LIVE_MAX = 100_000  # units in flight beyond which it does not look (a flood's)
log = logging.getLogger("pmgr.units")


class _NotAdded:
    """The pilot of a unit pinned (`pilot=`) to a pilot its manager does not have: RP 1.x keeps
    such a task TMGR_SCHEDULING until that pilot is added."""

    final = False
    uid = None


NOT_ADDED = _NotAdded()


class Routing:
    """A UnitManager's routing (this module's header): the units waiting in `pending` go to
    the partitions of `pilots`; its methods run with the session lock held.

    Args:
        session (Session): the session the units belong to (pmgr/core/session.py).
        units (UnitTable): the manager's units (pmgr/core/unit_table.py).
        name (callable): the manager's uid, as it is now (a face names its manager again:
            RP 1.x's tmgr.NNNN), for what is said about its units.
        rule (str): how units spread over the pilots (RP's `UnitManager(scheduler=)`):
            SCHEDULER_ROUND_ROBIN or SCHEDULER_BACKFILLING (pilot/rp/names.py).
    """

    def __init__(self, session, units: UnitTable, name: Callable[[], str], rule: str) -> None:
        self.session = session
        self.units = units
        self.name = name
        self.pilots: list = []  # the Pilots units are routed to, in the order they were added
        self.pending: deque[Unit] = deque()  # units waiting at the client, oldest first
        self.waiting_for: set[str] = set()  # pilots units are pinned to, not added (yet)
        self.rule = rule
        self.turn = 0  # round robin: the pilot the next unit is bound to
        self.pinned = 0  # units submitted with pilot= (counted by the Submission)
        self.rebalanced = 0.0  # (monotonic) the last time queued units were asked back

    def find_partition(self, uid: str):
        """The partition `uid` of this manager's pilots, or None."""
        for p in self.pilots:
            for part in p.parts.values():
                if part.uid == uid:
                    return part
        return None

    def never_fits(self, unit: Unit) -> str | None:
        """Why `unit` can never run on this manager's pilots (its reason when FAILED at
        submit), or None."""
        d = unit.description
        if d.policy is not None and (wrong := pin_error(d.policy)) is not None:
            return wrong
        if d.pilot is not None:
            pinned = next((p for p in self.pilots if p.uid == d.pilot), NOT_ADDED)
            if isinstance(pinned, _NotAdded):
                return self._never_added(d.pilot)
            if pinned.final:
                return f"pilot={d.pilot!r} is {pinned.state}"
        if d.partition is not None:
            part = self.find_partition(d.partition)
            if part.final:
                return f"partition={d.partition!r} is {_said(part)}"
            return None  # its agent knows the partition's pool and says so at arrival
        if not self.pilots:
            return None
        live = [p for p in self.pilots if not p.final]
        cores, gpus = d.rank_cores, math.ceil(d.rank_gpus)
        if live and all(
            cores > p.size["cores_per_node"] or gpus > p.size["gpus_per_node"] for p in live
        ):
            best = max((p.size["cores_per_node"], p.size["gpus_per_node"]) for p in live)
            return (
                f"cores={cores}, gpus={d.rank_gpus} can never fit: the pilots' nodes have at "
                f"most {best[0]} cores, {best[1]} GPUs"
            )
        if live and all(
            d.ranks * cores > p.size["cores"] or d.ranks * d.rank_gpus > p.size["gpus"]
            for p in live
        ):
            most = max((p.size["cores"], p.size["gpus"]) for p in live)
            return (
                f"ranks={d.ranks} x cores={cores}, gpus={d.rank_gpus} can never fit: the "
                f"pilots hold at most {most[0]} cores, {most[1]} GPUs"
            )
        return None

    def _never_added(self, uid: str) -> str | None:
        """Why a unit pinned to pilot `uid`, which this manager does not have, can never run
        here; None while add_pilots may still add it (it waits: RP's TMGR_SCHEDULING)."""
        pilot = self.session.pilots.get(uid)
        if pilot is None:
            return None
        if pilot.final:
            return f"pilot={uid!r} is {pilot.state} and was not added to {self.name()}"
        if pilot.umgr is not None and pilot not in self.pilots:  # (another manager's)
            return f"pilot={uid!r} is used by {pilot.umgr.uid}, so {self.name()} cannot add it"
        return None

    def bind(self, unit: Unit):
        """The pilot a unit must run on (`pilot=`, or its round-robin turn), or None (any);
        NOT_ADDED: pinned to a pilot this manager does not have (yet): it waits for it."""
        d = unit.description
        if d.pilot is not None:
            return next((p for p in self.pilots if p.uid == d.pilot), NOT_ADDED)
        if self.rule != SCHEDULER_ROUND_ROBIN:
            return None
        if unit.bound is None or unit.bound.final:
            live = [p for p in self.pilots if not p.final and self._could_run(p, d)]
            if not live:
                return None
            unit.bound = live[self.turn % len(live)]
            self.turn += 1
        return unit.bound

    @staticmethod
    def _could_run(pilot, d) -> bool:
        size = pilot.size
        return (
            d.rank_cores <= size["cores_per_node"]
            and math.ceil(d.rank_gpus) <= size["gpus_per_node"]
            and d.ranks * d.rank_cores <= size["cores"]
        )

    def route(self) -> threading.Event | None:
        """Send pending units, oldest first, to partitions with room in their window; an
        Event set once they are sent when a partition was short of units, else None."""
        if not self.pending:
            self.rebalance()
            return None
        if self.pilots and all(p.final or p.lost_to_us for p in self.pilots):
            now = time.time()
            taken = [p for p in self.pilots if p.lost_to_us and not p.final]
            for unit in self.pending:
                if taken and (unit.stored or unit.pilot in taken):
                    continue  # (in the store (sent to it once, or waiting): its new owner has
                    # it, where it ends; a wait for it raises PilotOwned: unit_queries.py)
                pinned = unit.description.pilot
                why = "no live pilot is left to run it"
                if taken:  # (another client took them over: this one acts on them no more)
                    why = f"no pilot is left to this client: {taken[0].uid} {taken[0].released}"
                if pinned and self.bind(unit) is NOT_ADDED:
                    why = self._never_added(pinned) or (
                        f"pilot={pinned!r} was never added to {self.name()}"
                        if pinned not in self.session.pilots
                        else f"pilot={pinned!r} is not one of {self.name()}'s pilots (removed, "
                        "or never added) and none of them is left"
                    )
                unit.advance(S.FAILED, now, why)
            self.pending.clear()
            return None
        if self.pinned and (self.waiting_for or any(p.final for p in self.pilots)):
            self._fail_pinned_to_ended()  # (pinned to a pilot that ended, or to another's)
        coming = any(  # (a partition of a running pilot coming up, a reconfig's: the others
            part.state in _COMING  # hold a small window meanwhile; not a pilot still queued)
            for p in self.pilots
            if p.state == S.ACTIVE
            for part in p.parts.values()
        )
        windows = {
            part: part.window_for(coming)  # (read once: it follows the partition's rate)
            for p in self.pilots
            if p.state == S.ACTIVE and p.linked  # (an attached pilot: once its hello came)
            for part in p.parts.values()
            if part.state == S.ACTIVE and part.accepting
        }
        room = {part: w - part.outstanding for part, w in windows.items() if w > part.outstanding}
        if not room:
            return None
        short = any(part.outstanding < windows[part] // 2 for part in room)  # running short
        batches, sent = self._place(room, list(windows), coming)
        if not batches:
            return None
        return self._send_when_persisted(batches, sent, short)

    def rebalance(self) -> None:
        """(route, nothing waiting here) A partition with nothing to do gets units queued at
        another whose queue would hold them REBALANCE_AFTER s or more at its recent rate (long
        units ahead of them): those asked back (`give_back`: the youngest QUEUED ones that
        could run there, as many as its cores) come back unstarted and are routed again, to
        it.  Units once sent wait at their partition's agent; without this, short ones waited
        behind long ones while another partition idled.  Not moved: a unit pinned (partition,
        tag) or tagged by another, a call (function units run on single-node partitions), one
        with core or GPU ids (a partition's own) or with input files staged for it.  At most
        every REBALANCE_EVERY s, one ask to a partition at a time (REBALANCE_WAIT s, or until
        its answer); the REBALANCE_SCAN youngest units looked at.  It runs when a routing round
        finds nothing waiting here (a unit's end starts one), and on the session's tick (every
        channel.TICK s: a partition that came free in a round the look was held off in)."""
        now = time.monotonic()
        if now < self.rebalanced + REBALANCE_EVERY:
            return
        parts = [
            part
            for p in self.pilots
            if p.state == S.ACTIVE and p.linked and not p.released
            for part in p.parts.values()
            if part.state == S.ACTIVE and part.accepting and not part.reserved
        ]
        busy = {
            q.uid: q
            for q in parts
            if q.outstanding > q.cores
            and now - q.giving_back > REBALANCE_WAIT
            and q.outstanding - q.cores > q.rate() * REBALANCE_AFTER
        }
        live = self.units.live
        if not busy or len(live) > REBALANCE_LIVE_MAX:
            return
        self.rebalanced = now  # (a look costs O(units in flight): one each REBALANCE_EVERY s)
        # the cores its running units hold, and whether any waits there, of each partition
        used: dict = {}
        waiting: set = set()
        for unit in live.values():
            if unit.part is None or unit.final:
                continue
            if unit.state == S.EXECUTING:
                d = unit.description
                used[unit.part] = used.get(unit.part, 0) + d.ranks * d.rank_cores
            else:
                waiting.add(unit.part)
        free = {
            q: q.cores - used.get(q.uid, 0)
            for q in parts
            if q.uid not in waiting and used.get(q.uid, 0) < q.cores
        }
        if not free:
            return
        youngest = list(itertools.islice(reversed(live.values()), REBALANCE_SCAN))
        anchors = {id(u.after) for u in youngest if u.after is not None}
        asks: dict = {}
        for unit in youngest:  # (the youngest first, a bounded look: a flood holds 10^5)
            src = busy.get(unit.part) if unit.state == S.QUEUED else None
            if src is None or not _movable(unit) or id(unit) in anchors:
                continue
            if len(asks.get(src, ())) >= src.outstanding - src.cores:
                continue
            d = unit.description
            shape = (d.rank_cores, d.rank_gpus, d.ranks, unit.blueprint.needs)
            to = next(
                (
                    q
                    for q, n in free.items()
                    if n >= d.ranks * d.rank_cores and q.pilot is src.pilot and q.could_hold(*shape)
                ),
                None,
            )
            if to is None:
                continue
            free[to] -= d.ranks * d.rank_cores
            asks.setdefault(src, []).append(unit.uid)
            if all(n <= 0 for n in free.values()):
                break
        for src, uids in asks.items():
            src.giving_back = now
            src.pilot.command(
                {"cid": None, "op": "give_back", "args": {"part": src.uid, "uids": uids}}
            )

    def _fail_pinned_to_ended(self) -> None:
        """(route) Pending units pinned (`pilot=`) to a pilot that ended: FAILED."""
        now, ended = time.time(), []
        for unit in self.pending:
            uid = unit.description.pilot
            if uid is None:
                continue
            pilot = self.bind(unit)
            why = self._never_added(uid) if pilot is NOT_ADDED else None
            if pilot is not NOT_ADDED and pilot.final:
                why = f"pilot={uid!r} is {pilot.state}"
            if why:
                ended.append((unit, why))
        for unit, why in ended:
            self.pending.remove(unit)
            unit.advance(S.FAILED, now, why)

    def _place(self, room: dict, active: list, coming: bool) -> tuple[dict, list[Unit]]:
        """(route) Pending units, oldest first, to partitions with `room` (used up as they go):
        the batches and the units in them; input files here are staged first; no room: waits.
        A unit goes only where it could run: its shape, and what it needs beyond (a node pin,
        other resource types: `Partition.could_hold`); when none of the `active` partitions
        has what it needs and none is `coming` up, where its node and types are (too few of
        them), else where its shape fits: its agent fails it, saying why (too few, an unknown
        node or type), as it fails a unit pinned there."""
        batches: dict = {}
        sent: list[Unit] = []
        skipped: list[Unit] = []
        fits_cache: dict = {}
        pending = self.pending
        while pending and room:
            unit = pending.popleft()
            d = unit.description
            target = None
            if d.partition is not None:
                part = self.find_partition(d.partition)
                if part in room:
                    target = part
                elif part.final:
                    why = f"partition={part.uid!r} is {_said(part)}"
                    unit.advance(S.FAILED, time.time(), why)
                    continue
            elif unit.after is not None:  # `tag`: where that unit went
                anchor = unit.after
                part = anchor.pilot.parts.get(anchor.part) if anchor.part else None
                if part is not None and part in room:
                    target = part
                elif (part is not None and part.final) or (part is None and anchor.final):
                    where = f"partition {part.uid}, which is {part.state}" if part else "nowhere"
                    why = f"tag={anchor.uid!r}: that unit ran in {where}"
                    unit.advance(S.FAILED, time.time(), why)
                    continue
            else:
                pilot = self.bind(unit)
                if pilot is NOT_ADDED:  # (waits until add_pilots adds it)
                    skipped.append(unit)
                    continue
                if pilot is not None and pilot.final:  # pinned to a pilot that ended
                    unit.advance(S.FAILED, time.time(), f"pilot={pilot.uid!r} is {pilot.state}")
                    continue
                needs = unit.blueprint.needs  # (a node pin, other resource types: or None)
                key = (d.rank_cores, d.rank_gpus, d.ranks, needs, pilot)
                cands = fits_cache.get(key)
                if cands is None:
                    mine = [p for p in active if pilot is None or p.pilot is pilot]
                    cands = [p for p in mine if p.could_hold(*key[:4])]
                    if not cands and needs is not None and not coming:  # (nowhere has it:
                        # where its node and types are, too few of them; else its shape fits)
                        some = (needs[0], tuple((t, 0) for t, _ in needs[1]))
                        cands = [p for p in mine if p.could_hold(*key[:3], some)]
                        cands = cands or [p for p in mine if p.could_hold(*key[:3])]
                    fits_cache[key] = cands
                cands = [p for p in cands if p in room]
                if cands:
                    target = min(cands, key=lambda p: p.outstanding / max(p.cores, 1))
            if target is None:
                skipped.append(unit)
                continue
            unit.part = target.uid
            unit.pilot = target.pilot
            target.outstanding += 1
            room[target] -= 1
            if room[target] <= 0:
                del room[target]
            if unit.client_in and unit.staged_on is not target.pilot:
                self._stage_in(unit, target)  # sent once its files are there
                continue
            batches.setdefault(target, []).append(unit)
            sent.append(unit)
        pending.extendleft(reversed(skipped))
        return batches, sent

    def _send_when_persisted(
        self, batches: dict, sent: list[Unit], short: bool
    ) -> threading.Event | None:
        """(route) `batches` go once the store has `sent`; an Event set then when `short`."""
        # sent once the store has each unit with the partition it goes to (persist, then send:
        # a client that dies in between leaves units its successor finds, asks, and re-routes),
        # ahead of the records of units still waiting here (pmgr/store/writer.py)
        # (a partition with half its window or more in hand can wait for the writer's linger)
        done = threading.Event() if short else None

        def send() -> None:
            try:
                self._send_persisted(batches)
            finally:
                if done is not None:
                    done.set()

        self.session.changes.hand_moves()  # (their first moves join the batch their docs go in)
        self.session.writer.send_after(sent, send, short)
        return done

    def _send_persisted(self, batches: dict) -> None:
        """(Writer thread) Send each batch; a unit the store refused for good is not sent:
        it ends FAILED, named in session.unpersisted."""
        refused = self.session.writer.unpersisted
        send = self.session.channel.send
        for part, units in batches.items():
            if refused:
                kept = [u for u in units if u.uid not in refused]
                self._not_persisted(part, [u.uid for u in units if u.uid in refused])
                units = kept
            refs = part.data_shared  # (its workers read large arguments where the store is)
            for i in range(0, len(units), SEND_CHUNK):
                wire = wire_list(units[i : i + SEND_CHUNK], refs)
                try:
                    frames = [b"units", part.uid.encode(), pack(wire)]
                except TypeError:  # bytes in it (a call's large arguments): frames of their own
                    text, data = framed.dumps(wire)
                    frames = [b"units", part.uid.encode(), text.encode(), *data]
                send(part.pilot.uid, frames)

    def _not_persisted(self, part, uids: list[str]) -> None:
        if not uids:
            return
        deposed = self.session.writer.deposed
        why = "not sent: the store refused its record"
        if deposed is not None:
            why = f"not sent: {deposed}"
        with self.session.locked():
            for uid in uids:
                unit = self.units.live.get(uid)
                if unit is not None and not unit.final:
                    part.outstanding -= 1
                    unit.advance(S.FAILED, time.time(), why)
            self.session.changes.notify()

    # -- data staging (pmgr/core/transfers.py) ----------------------------------------------------
    def _stage_in(self, unit: Unit, target) -> None:
        """(route) The unit's input files go to `target`'s pilot; it is sent once they are
        there (its record, with the partition, is written meanwhile)."""
        self.session.writer.changed(unit)

        def then(error: str | None) -> None:  # (transfer thread)
            with self.session.locked():
                if unit.part != target.uid:
                    pass  # its partition was lost meanwhile: it was routed again from there
                elif unit.final:  # canceled while its files moved
                    target.outstanding -= 1
                elif error:
                    target.outstanding -= 1
                    unit.advance(S.FAILED, time.time(), f"input staging: {error}")
                elif target.final or not target.accepting:
                    target.outstanding -= 1
                    unit.staged_on = target.pilot
                    if unit.cancel_asked is not None:  # (asked of that partition meanwhile)
                        unit.advance(S.CANCELED, time.time(), unit.cancel_asked)
                    else:
                        unit.part = None
                        self.pending.appendleft(unit)  # routed again (its files are there)
                else:
                    unit.staged_on = target.pilot
                    batch = {target: [unit]}
                    self.session.writer.then(lambda: self._send_persisted(batch))
                self.route()

        self.session.transfers.stage(unit, target.pilot, unit.client_in, then)


def wire_list(units: list[Unit], refs: bool = False) -> list[dict]:
    """A `units` message's body (pilot/unit_record.py): units in a row that share their
    blueprint's wire form go as one bulk {"of": it, "uids": [...]}, with "arguments": [each
    unit's, or None] when any has its own; a unit alone as its record.  Calls whose arguments
    are their own (pmgr/core/blueprint.py `own_function`) go the same way, the template's call
    without arguments and "functions": [each unit's call's arguments] (or the template's call
    whole when all are the same); a call alone whole in its record.  `refs`: a call's large
    arguments go as the name of their file in the session's data directory (the partition's
    workers read them there: pmgr/core/blueprint.py `by_reference`)."""
    runs: list[tuple] = []
    for u in units:
        w = u.blueprint.by_reference() if refs else u.blueprint.wire
        own = u.own
        if runs and runs[-1][0] is w and (type(own) is str) is (type(runs[-1][2][0]) is str):
            runs[-1][1].append(u.uid)
            runs[-1][2].append(own)
        else:
            runs.append((w, [u.uid], [own]))
    out = []
    for w, uids, own in runs:
        first = own[0]
        if type(first) is str:  # calls' own arguments: in a record's call, or a bulk's
            if len(uids) == 1:
                out.append({**w, "uid": uids[0], FUNCTION: {**w[FUNCTION], ARGS: first}})
            elif all(a == first for a in own):  # (the same call again: the template's)
                out.append({"of": {**w, FUNCTION: {**w[FUNCTION], ARGS: first}}, "uids": uids})
            else:
                out.append({"of": w, "uids": uids, "functions": own})
        elif len(uids) > 1:
            bulk = {"of": w, "uids": uids}
            if any(own):
                bulk[OWN] = own
            out.append(bulk)
        elif first is None:
            out.append({**w, "uid": uids[0]})
        else:
            out.append({**w, "uid": uids[0], OWN: first})
    return out


def _said(part) -> str:
    """A final partition's state, with its reason when it has one (what was missing, for one
    that did not fit): what a unit pinned to it says, failing."""
    return f"{part.state} ({part.reason})" if part.reason else part.state


def _movable(unit: Unit) -> bool:
    """(rebalance) A unit that may run in another partition than the one it was sent to: not
    pinned (partition, tag), not a call, no core or GPU ids, no input files (a MOVE done for
    it could not be done again)."""
    d = unit.description
    if d.partition is not None or unit.after is not None or d.function is not None:
        return False
    pol = d.policy
    if pol is not None and (pol.cpu_affinity or pol.gpu_affinity):
        return False
    return not d.peek("input_staging")
