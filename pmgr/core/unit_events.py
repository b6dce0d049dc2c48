"""What a pilot says about units: state updates, units handed back, partitions lost or ended.

`UnitEvents` is a part the UnitManager holds (pmgr/core/unit_manager.py), given the session,
the manager's unit table and its `Routing` (pmgr/core/routing.py: units handed back wait in its
queue again) in its constructor.  A Pilot (pmgr/core/pilot.py) calls it directly, as
`pilot.umgr.events`, on the channel thread, with the session lock held, inside
`session.locked()` (on_output without it), passing on the news its bootstrap sent
(pilot/wire/protocol.py):
    ustates a batch of unit moves (pilot/wire/updates.py) -> on_unit_moves, then the
            Routing's route() once
    output  unit output forwarded by node daemons -> on_output
    back    units a partition handed back (or the channel could not send) -> on_units_back
    lost    a partition's agent died -> on_partition_lost
    synced  after a sync: the units a partition's agent never had -> on_synced
and the pilot's own news: a partition ACTIVE or final -> on_partition_changed, the pilot ended
-> on_pilot_changed (the face's hooks are told after).  All but on_unit_state and on_output
end in `route()`: where units can go may have changed.

Nothing is lost: every unit ends in exactly one final state.
  - cannot ever fit (larger than any node of every pilot, or than its named partition): FAILED
    at submit with the reason
  - handed back by a stopped partition (queued, not started): routed again
  - a move that is not final from a partition the unit has left (it was routed again since:
    handed back, never reached, its partition lost before it started) is stale, whatever
    its time (an agent stopped while it was handed back, answering a new client's sync when
    it wakes): dropped, counted in `said_again`.  A final move is taken from any partition
    that ran the unit: its outcome is the truth, and the first final state is the one kept
  - its partition or pilot ended while the unit was queued or running there, without a word
    from the agent: FAILED with the partition's reason
  - no live pilot is left to run it: FAILED
A restartable unit (`restartable`, not pinned to the partition it lost) runs again elsewhere
instead of ending FAILED when its node or partition was lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

import pilot.states as S
from pilot.pmgr.core.handles import DIRECT, Unit, advance_together
from pilot.pmgr.core.routing import Routing
from pilot.pmgr.core.unit_hooks import UnitHooks
from pilot.pmgr.core.unit_table import UnitTable
from pilot.unit_record import uids_of

log = logging.getLogger("pmgr.units")
# what a move may carry beyond an exit code, a node, slots, a reason, output, a value or an
# exception (on_unit_state's)
_RARE = frozenset(("lost",))
# the moves along the unit machine a unit may make at its agent's word (on_unit_moves' short
# way): onwards, from where it is to a later state it can reach
_PATHS = frozenset(
    (src, dst)
    for i, src in enumerate(S.UNIT_STATES)
    for dst in S.UNIT_STATES[i + 1 :]
    if src not in S.FINAL and S.reachable(S.UNIT_MACHINE, src, dst)
)


class UnitEvents:
    """A UnitManager's handling of its pilots' news.

    Args:
        session (Session): the session the units belong to (pmgr/core/session.py).
        units (UnitTable): the manager's units (pmgr/core/unit_table.py).
        routing (Routing): the manager's routing (pmgr/core/routing.py).
        hooks (UnitHooks | None): what a face does on its units (pmgr/core/unit_hooks.py):
            told when one of the manager's pilots ended.
    """

    def __init__(
        self, session, units: UnitTable, routing: Routing, hooks: UnitHooks | None = None
    ) -> None:
        self.session = session
        self.units = units
        self.pending = routing.pending
        self.routing = routing
        self.hooks = hooks
        self.said_again = 0  # updates refused because the unit had passed them (sync replays)
        # units an attach adopted as sent to a partition (SCHEDULING there in the store) whose
        # pilot has not answered for them yet: they may have reached it, and started
        self.unsure: set[str] = set()
        self.output_callbacks: list = []  # register_output_callback's

    def on_output(self, chunks: list) -> None:
        """Forwarded output [[uid, node, rank, stream, text], ...] (channel thread)."""
        calls = []
        with self.session.locked():
            for uid, node, rank, stream, text in chunks:
                unit = self.units.live.get(uid)  # (a released unit takes no more output)
                if unit is None:
                    continue
                unit.add_output(node, rank, stream, text)
                calls.append((unit, node, rank, stream, text))
        for cb in list(self.output_callbacks):
            for call in calls:
                try:
                    cb(*call)
                except Exception:
                    log.exception("output callback %r failed", cb)

    # -- events (lock held, channel thread) ---------------------------------------------------
    def on_unit_moves(self, groups: list) -> list[str]:
        """A batch of moves (pilot/wire/updates.py's Groups, each unit's in its order); returns
        the uids of its units that are final here now (the pilot may let go of their
        outcomes once the store has them).  A move of a live unit that goes on along the
        unit machine with no more than an exit code, a node and slots, and a reason takes
        the short way (`_moves`); any other is `on_unit_state`'s."""
        ended: list[str] = []
        if self.unsure:  # (after an attach: what its pilot says of a unit answers for it)
            for g in groups:
                self.unsure.difference_update(g.uids)
        for g in groups:
            if _RARE.isdisjoint(g.cols) and _RARE.isdisjoint(g.same):
                self._moves(g, ended)
                continue
            final = g.state in S.FINAL
            for i, uid in enumerate(g.uids):
                self.on_unit_state(uid, g.state, g.ts[i], g.info(i))
                if final and self.units.state_of(uid) in S.FINAL:
                    ended.append(uid)
        return ended

    def _moves(self, g, ended: list) -> None:
        """(on_unit_moves) A group of plain moves, each applied as on_unit_state would: the
        units that make one direct step together (advance_together), the others one by one."""
        live = self.units.live
        state, ts, uids = g.state, g.ts, g.uids
        final = state in S.FINAL
        codes, nodes = g.column("exit_code"), g.column("node")
        slots, reasons = g.column("slots"), g.column("reason")
        outs, errs = g.column("stdout"), g.column("stderr")  # (a function's, a cleanup unit's)
        values, raised = g.column("value"), g.column("exception")
        paths = _PATHS
        parts = g.column("part")  # (the partition whose agent said it)
        together, when = [], []
        taken: set[str] = set()  # (a uid the group names twice: the agent's report and its
        for i, uid in enumerate(uids):  # answer to a sync, said again: the move once)
            if uid in taken:
                self.said_again += 1
                continue
            taken.add(uid)
            unit = live.get(uid)
            if (
                unit is None
                or unit.part is None
                or (unit.state, state) not in paths
                or (state == S.DONE and unit.client_out)
                or (parts is not None and parts[i] != unit.part)
            ):
                self.on_unit_state(uid, state, ts[i], g.info(i))
                if final and self.units.state_of(uid) in S.FINAL:
                    ended.append(uid)
                continue
            if codes is not None and codes[i] is not None:
                unit.exit_code = codes[i]
            if nodes is not None and nodes[i] is not None:
                unit.node = nodes[i]
                unit.slots = slots[i] if slots is not None else None
            if outs is not None and isinstance(outs[i], str):
                unit.kept["stdout"] = outs[i]
            if errs is not None and isinstance(errs[i], str):
                unit.kept["stderr"] = errs[i]
            if values is not None and isinstance(values[i], (str, bytes)):  # (packed)
                unit.value = values[i]
            if raised is not None and isinstance(raised[i], str):
                unit.exception = raised[i]
            reason = reasons[i] if reasons is not None else None
            if unit.TOGETHER and (unit.state, state) in DIRECT and not (final and reason):
                together.append(unit)
                when.append(ts[i])
            else:
                unit.advance(state, ts[i], reason)
            if final:
                ended.append(uid)
                part = unit.pilot.parts.get(unit.part)
                if part is not None:
                    part.outstanding -= 1
                    part.ended += 1
        if together:
            advance_together(self.session, together, state, when)

    def on_unit_state(self, uid: str, state: str, ts: float, info: dict) -> None:
        """One state update from an agent.  One the unit's state machine refuses changes
        nothing: said again (a sync after an attach repeats what the unit has passed) it is
        counted in `said_again`; any other is logged with the unit and both states."""
        unit = self.units.live.get(uid)
        if unit is None:
            if uid in self.units:  # released: final and stored, so this one was said again
                self.said_again += 1
            else:
                log.warning("state %s for unknown unit %s dropped", state, uid)
            return
        if state == unit.state:
            return
        if state not in S.FINAL and (unit.part is None or info.get("part", unit.part) != unit.part):
            self.said_again += 1  # from a partition it left (routed again): stale
            return
        if not S.reachable(S.UNIT_MACHINE, unit.state, state):
            self._refused(unit, state, info)
            return
        if info.get("lost") and self._may_restart(unit, info.get("reason") or "node lost"):
            self._run_again(unit, ts)
            return
        if state == S.DONE and unit.client_out:  # its output files come here first
            self._stage_out(unit, info)
            return
        if "exit_code" in info:
            unit.exit_code = info["exit_code"]
        for key in ("stdout", "stderr"):  # kept output of a `cleanup` unit, a function's
            if isinstance(info.get(key), str):
                unit.kept[key] = info[key]
        if isinstance(info.get("value"), (str, bytes)):  # a function's return value, packed
            unit.value = info["value"]
        if isinstance(info.get("exception"), str):
            unit.exception = info["exception"]
        if "node" in info:
            unit.node = info["node"]
            unit.slots = info.get("slots")
        unit.advance(state, ts, info.get("reason"))
        if unit.final and unit.part is not None:
            part = unit.pilot.parts.get(unit.part)
            if part is not None:
                part.outstanding -= 1
                part.ended += 1

    def _refused(self, unit: Unit, state: str, info: dict) -> None:
        """(on_unit_state) An update the unit's state machine refuses: counted when said
        again, else logged."""
        if any(state == past for past, _ in unit.history):
            self.said_again += 1
        else:
            log.warning(
                "%s: update %s -> %s refused by the unit state machine (%s)",
                unit.uid,
                unit.state,
                state,
                info.get("reason") or f"exit code {info.get('exit_code')}",
            )

    def _run_again(self, unit: Unit, ts: float) -> None:
        """(on_unit_state) A restartable unit whose node was lost: routed again, first."""
        part = unit.pilot.parts.get(unit.part)
        if part is not None:
            part.outstanding -= 1
            part.accepting = False  # it lost a node: it ends FAILED next
        if self._canceled(unit, ts):
            return
        unit.advance(S.SCHEDULING, ts, None)  # its node was lost: it runs again
        unit.part = None
        self.pending.appendleft(unit)

    def _canceled(self, unit: Unit, ts: float) -> bool:
        """A unit about to be routed again whose cancel was asked of the partition it left
        (the partition handed it back, or was lost, before the cancel reached its agent): it
        ends CANCELED with the cancel's reason instead; True then."""
        if unit.cancel_asked is None:
            return False
        unit.advance(S.CANCELED, ts, unit.cancel_asked)
        return True

    # -- data staging (pmgr/core/transfers.py) ----------------------------------------------------
    def _stage_out(self, unit: Unit, info: dict) -> None:
        """(on_unit_state) DONE at the agent, with output files for the client: they come
        here first, then the unit is DONE (or FAILED if they could not)."""
        if unit.staging_out:
            return  # said again while they do
        unit.staging_out = True
        unit.exit_code = info.get("exit_code", 0)
        if "node" in info:
            unit.node, unit.slots = info["node"], info.get("slots")
        reason = info.get("reason")

        def then(error: str | None) -> None:  # (transfer thread)
            with self.session.locked():
                unit.client_out = []  # done: the DONE below is let through
                if not unit.final:
                    if error:
                        unit.advance(S.FAILED, time.time(), f"output staging: {error}")
                    else:
                        unit.advance(S.DONE, time.time(), reason)
                    part = unit.pilot.parts.get(unit.part) if unit.part else None
                    if part is not None:
                        part.outstanding -= 1
                self.routing.route()

        self.session.transfers.stage(unit, unit.pilot, unit.client_out, then)

    def on_units_back(self, part_uid: str, units: list, stays: bool = False) -> None:
        """Units a partition could not or did not run: route them again.  `stays`: given
        back when asked (Routing.rebalance), its partition goes on; else it is stopping."""
        now = time.time()
        back = []
        partition = self.routing.find_partition(part_uid)
        if partition is not None and not stays:
            partition.accepting = False  # it is going away: send it nothing more
        if partition is not None and stays:
            partition.giving_back = 0.0  # (asked once at a time: Routing.rebalance)
        for uid in uids_of(units):
            self.unsure.discard(uid)  # (its pilot answered for it: it never ran there)
            unit = self.units.live.get(uid)
            if unit is None or unit.final or unit.part != part_uid:
                continue
            part = unit.pilot.parts.get(part_uid)
            if part is not None:
                part.outstanding -= 1
            if self._canceled(unit, now):
                continue
            if unit.description.partition == part_uid:  # pinned there: nowhere else to go
                unit.advance(S.FAILED, now, f"its partition {part_uid} was stopped before it ran")
                continue
            if unit.state == S.QUEUED:
                unit.advance(S.SCHEDULING, now, None)
            unit.part = None
            back.append(unit)
        self.pending.extendleft(reversed(back))
        self.routing.route()

    def on_partition_lost(
        self, part_uid: str, started: Collection[str], killed: Collection[str], reason: str
    ) -> None:
        """The agent of `part_uid` died.  Its units that had started (its start journal) may
        have run: they end FAILED, never run twice (unless restartable: then they run again
        elsewhere); the others never ran and are routed again (to another partition; one
        pinned to this partition fails with it)."""
        started, killed = set(started), set(killed)
        lost = self.routing.find_partition(part_uid)
        if lost is not None:
            lost.accepting = False  # its FAILED state follows: route nothing more there
        now = time.time()
        back = []
        for unit in self.units.active():
            if unit.part != part_uid or unit.final:
                continue
            self.unsure.discard(unit.uid)  # (its pilot answered for it: the journal)
            part = unit.pilot.parts.get(part_uid)
            if part is not None:
                part.outstanding -= 1
            if unit.uid in killed:
                why = f"killed: {reason} while it ran"
            elif unit.uid in started:
                why = f"{reason} after starting it; its outcome is unknown"
            elif unit.description.partition == part_uid:
                why = f"its partition {part_uid} was lost before it started ({reason})"
            else:
                why = None
            if why is not None and not self._may_restart(unit, why):
                unit.advance(S.FAILED, now, why)
                continue
            if self._canceled(unit, now):
                continue
            if unit.state != S.SCHEDULING:
                unit.advance(S.SCHEDULING, now, None)
            unit.part = None
            back.append(unit)
        if back:
            log.warning(
                "%s lost (%s): %d unit(s) routed again (never started, or restartable)",
                part_uid,
                reason,
                len(back),
            )
        self.pending.extendleft(reversed(back))
        self.routing.route()

    def on_partition_changed(self, part) -> None:
        """A partition ended: units of it not final here are asked for (`sync`): the pilot
        keeps every outcome its agents reported until the store has it (partition/client/outbox.py),
        so only what it does not know is lost (on_synced); with the pilot gone too, nothing
        is left to ask."""
        if part.final:
            now = time.time()
            left = [u for u in self.units.active() if u.part == part.uid and not u.final]
            pilot = part.pilot
            if left and not pilot.final and pilot.linked and not pilot.released:
                cid = self.session.ids.next_cid(pilot.uid)
                pilot.command(
                    {"cid": cid, "op": "sync", "args": {"units": {part.uid: [u.uid for u in left]}}}
                )
            else:
                for unit in left:
                    self._never_reached(unit, _lost_with(part), now, front=True)
                part.outstanding = 0
        self.routing.route()

    def _never_reached(self, unit: Unit, why: str, now: float, front: bool = False) -> None:
        """A unit its partition no longer has: one only sent (SCHEDULING, not pinned there)
        never reached it and is routed again; any other is FAILED with `why` (and so is one
        an attach adopted as sent whose pilot never answered for it: it may have run)."""
        unsure = bool(self.unsure) and unit.uid in self.unsure
        if unsure:
            self.unsure.discard(unit.uid)
        if (
            unit.state == S.SCHEDULING and not unsure and self._may_go_again(unit)
        ) or self._may_restart(unit, why):
            self._route_again(unit, now, front)
        else:
            unit.advance(S.FAILED, now, why)

    def _route_again(self, unit: Unit, now: float, front: bool) -> None:
        """`unit` waits here to be routed again (SCHEDULING), or ends CANCELED if its cancel
        was asked."""
        if self._canceled(unit, now):
            return
        unit.advance(S.SCHEDULING, now, None)  # (nothing, when it is SCHEDULING still)
        unit.part = None
        (self.pending.appendleft if front else self.pending.append)(unit)

    def _may_go_again(self, unit: Unit) -> bool:
        """Whether a unit that never reached its partition has somewhere to go: anywhere, or,
        pinned to that partition, there again while it lives."""
        if unit.description.partition != unit.part:
            return True
        part = unit.pilot.parts.get(unit.part) if unit.pilot is not None else None
        return part is not None and not part.final and not unit.pilot.final

    def _may_restart(self, unit: Unit, why: str) -> bool:
        """A restartable unit (not pinned to the partition it lost) runs again elsewhere."""
        d = unit.description
        if not d.restartable or d.partition == unit.part:
            return False
        log.warning("%s restarts: %s", unit.uid, why)
        return True

    def on_pilot_changed(self, pilot) -> None:
        """One of the manager's pilots ended: where units can go changed, and nothing is left
        to ask about a unit still routed to one of its partitions.  Those that ended with it
        were settled (on_partition_changed); one that ended before and was asked for (`sync`)
        may never have been answered (the pilot went first, or the ask was never sent): its
        units not final here are settled now, as if their partition had ended with it (only
        sent: routed again; any other FAILED, its outcome unknown).  A unit whose output
        files come here (`staging_out`) is left to its transfer, which ends it."""
        if pilot.final:
            now = time.time()
            for unit in self.units.active():
                if unit.final or unit.part is None or unit.staging_out:
                    continue
                part = pilot.parts.get(unit.part)
                if part is None:  # (another pilot's)
                    continue
                part.outstanding = max(0, part.outstanding - 1)
                self._never_reached(unit, _lost_with(part), now, front=True)
        self.routing.route()
        if self.hooks is not None:
            self.hooks.on_pilot_changed(pilot)

    def on_synced(self, part_uid: str, unknown: list, started: Collection[str] = ()) -> None:
        """After an attach, the agent of `part_uid` does not know these units: one that was
        only sent (SCHEDULING) never reached it and is routed again; any other is lost.
        `started`: units the start journal of that partition's gone agent has: they may have
        run, whatever the store says of them, and are lost (run again only if restartable)."""
        now = time.time()
        started = set(started)
        for uid in (*unknown, *started):
            self.unsure.discard(uid)  # (its pilot answered for it)
            unit = self.units.live.get(uid)
            if unit is None or unit.final or unit.part != part_uid:
                continue
            part = unit.pilot.parts.get(part_uid)
            if part is not None:
                part.outstanding = max(0, part.outstanding - 1)
            if part is not None and part.final:
                why = _lost_with(part)
            elif uid in started:
                why = (
                    f"lost: it started in partition {part_uid}, whose agent is gone; "
                    "its outcome is unknown"
                )
            else:
                why = f"lost: partition {part_uid} does not know it (found when a client attached)"
            if uid not in started:
                self._never_reached(unit, why, now, front=part is not None and part.final)
            elif self._may_restart(unit, why):  # (started there: run again only if it may)
                self._route_again(unit, now, front=True)
            else:
                unit.advance(S.FAILED, now, why)
        self.routing.route()


def _lost_with(part) -> str:
    return f"lost with partition {part.uid} ({part.state}: {part.reason}); its outcome is unknown"
