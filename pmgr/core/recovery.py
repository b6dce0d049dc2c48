"""Attaching a new client process to a running session (`rp.Session(uid=..., ...)`).

The store says what the session had: pilots, partitions, units, their histories.  The first
PilotManager of the attached session takes the pilots back, the first UnitManager the units.

    attach  for each pilot not final: its bootstrap's control endpoint (kept in the store) gets
            {op: attach, client: <this process's pilot link>, owner, take_over}; the bootstrap
            points its link here, says hello and sends every partition's state again.  A
            pilot whose owner is alive refuses it (rp.PilotOwned, naming the owner) unless
            take_over (the old owner is told and stops acting on it).  A pilot that does not
            answer is asked again (every ATTACH_RETRY s) while its batch job lives (followed by
            its id: pmgr/batch/), never failed for its silence alone.  The request names this
            client's owner epoch (pmgr/core/ownership.py): the bootstrap refuses an older one.
            Once the pilots took it, the epoch is installed in the store: an old owner that did
            not hear of the take-over has its writes refused there, and learns it there.
    sync    for each unit whose last persisted state was not final and that was sent to a
            partition: the partition's agent is asked (`sync`) and says again what it knows
            (state updates) and which uids it never had (`on_synced`).  Nothing is guessed: a unit
            no agent knows is routed again if it was only sent or handed back (`back`), else
            FAILED as lost.  A partition whose agent is gone answers from its start journal:
            a unit there (`started`) is FAILED, any other is `back` (it never started, QUEUED
            or not).  A unit whose pilot ends before it answered for it is FAILED
            (UnitEvents.unsure: the store says only that it was sent; it may have started).
    cancel  for each such unit whose cancel the client before asked (UnitManager.cancel_units
            keeps its reason with the unit's doc, `kept`): asked again, after the sync (that
            client may have died before its cancel left); should it come back unrun, it ends
            CANCELED, as it would have for that client.
Units still at the client (SCHEDULING, no partition) are simply routed again (CANCELED if their
cancel was asked).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import cast

import zmq

from pilot import states as S
from pilot.config import resource_config
from pilot.descriptions import (
    ComputePartitionDescription,
    ComputePilotDescription,
)
from pilot.errors import PilotIncompatible, PilotOwned
from pilot.pmgr import batch
from pilot.pmgr.core import ownership
from pilot.pmgr.core.handles import CANCEL_KEY, Partition
from pilot.pmgr.core.pilot import ATTACHING
from pilot.pmgr.store import data_files
from pilot.wire import peer_version
from pilot.wire.protocol import pack, unpack

log = logging.getLogger("pmgr.recovery")
ATTACH_TIMEOUT = 10.0
ATTACH_RETRY = 5.0  # seconds between attaches of a pilot that did not answer


class Recovery:
    def __init__(self, session) -> None:
        self.session = session
        store = session.store
        self.pilot_docs = store.find("pilots", session=session.uid)
        self.pilots: dict = {}
        self.units_adopted = False

    def _restore(self, obj, doc: dict, rows: list[dict] | None = None) -> None:
        obj.state = doc["state"]
        if rows is None:  # (its own: never the session's all)
            rows = self.session.store.history(uid=obj.uid)
        obj.history = [(h["state"], h["ts"]) for h in rows]
        obj.reason = doc.get("reason")
        obj.stored = True
        self._fill_history(obj)

    def _fill_history(self, obj) -> None:
        """The states between the last history row the store has and the state its doc
        says, added now and written (one row each, at this time): a client that died after it
        wrote a unit's doc (written ahead of its rows, so that the unit could be sent) and
        before its NEW and SCHEDULING rows left them out.  Then the store's history and this
        client's agree row for row, and the next state's row gets the next seq."""
        last = obj.history[-1][0] if obj.history else None
        if last == obj.state:
            return
        steps = S.legal_path(obj.MACHINE, last or S.NEW, obj.state)
        if steps is None:  # (a doc behind its rows: left as it was)
            return
        now = time.time()
        for step in ([S.NEW] if last is None else []) + list(steps):
            obj.history.append((step, now))
            self.session.changes.record(obj, step, now, fire=False)
        log.info("%s: %s, as its doc says, added to its history", obj.uid, obj.state)

    def adopt_pilots(self, pmgr) -> list:
        if self.pilots:
            return []
        session = self.session
        for doc in self.pilot_docs:
            desc = ComputePilotDescription.from_stored(doc["description"])
            config = resource_config.load(desc.resource, desc.access_schema)
            pilot = pmgr.PILOT(session, doc["uid"], desc, pmgr, doc["size"], config)
            self._restore(pilot, doc)
            pilot.control = doc.get("control")
            pilot.job_id = doc.get("job")
            pilot.job = self._follow(pilot, config)
            if pilot.history:  # (its runtime counts from its submit, not this attach)
                pilot.born = time.monotonic() - max(0.0, time.time() - pilot.history[0][1])
            pilot.last_heard = time.monotonic()
            for pdoc in session.store.find("partitions", pilot=pilot.uid):
                part = Partition(
                    session,
                    pdoc["uid"],
                    ComputePartitionDescription.from_stored(pdoc["description"]),
                    pilot,
                )
                self._restore(part, pdoc)
                part.resources = pdoc.get("resources")
                part.started_by, part.stopped_by = pdoc.get("started_by"), pdoc.get("stopped_by")
                pilot.parts[part.uid] = part
                session.ids.seen_uid(f"{pilot.uid}.part", part.uid)
            session.ids.seen_uid("pilot", pilot.uid)
            session.pilots[pilot.uid] = pilot
            self.pilots[pilot.uid] = pilot
        for pilot in self.pilots.values():
            if not pilot.final:
                self._attach(pilot)
        ownership.install(session)  # (every pilot took it, or is not reachable now)
        return list(self.pilots.values())

    def _follow(self, pilot, config):
        """The pilot's batch job, followed by its id (pmgr/batch/: a Follower), or None."""
        try:
            return batch.follower(config.batch_system)(
                pilot.job_id, pilot.sandbox, self.session.uid, config
            )
        except (OSError, ValueError) as exc:  # (no psij here; an id it cannot follow)
            log.warning("%s: its job %s cannot be followed: %s", pilot.uid, pilot.job_id, exc)
            return None

    def _attach(self, pilot) -> None:
        pilot.released = ATTACHING  # (not acted on, nor failed on silence, until then)
        reply = self._ask_attach(pilot, self.session.take_over)
        owner = (reply or {}).get("owner")
        if owner is not None and not self.session.take_over:
            if self._owner_is_gone(owner):  # (dead on this very host: nothing to tell)
                reply = self._ask_attach(pilot, True)
            else:  # silent for a moment, maybe gone: asked again once it would count as gone
                time.sleep(min(max(float(owner.get("live_for") or 0), 0.0), 5.0) + 0.5)
                reply = self._ask_attach(pilot, False)
            owner = (reply or {}).get("owner")
        if owner is not None:  # (one owner per pilot: partition/control.py attach)
            assert reply is not None  # (the owner is the reply's)
            pilot.released = f"not attached: {reply['error']}"  # (this client never acts on it)
            raise PilotOwned(pilot.uid, f"{reply['error']} (rp.Session(uid=..., take_over=True))")
        if _incompatible(reply):  # (refused before it changed owner: pilot/wire/peer_version.py)
            assert reply is not None  # (the refusal is the reply's)
            pilot.released = f"not attached: {reply['error']}"
            raise PilotIncompatible(pilot.uid, reply["error"])
        if pilot.released == ATTACHING:  # (its hello may have come first: one of another
            pilot.released = None  # protocol let go of it then: pmgr/core/pilot.py)
        if reply and reply.get("ok"):
            with self.session.locked():
                pilot.last_heard = time.monotonic()
            log.info("%s: attached (%s)", pilot.uid, reply.get("result"))
            return
        self._not_attached(pilot, reply)

    def _not_attached(self, pilot, reply: dict | None) -> bool:
        """An attach not taken: no answer (a pilot stalled, its link cut) is no death, nor
        a refusal for a passing reason.  The pilot is lost only when its job is known to have
        ended; refused for a newer owner, it is that owner's; else this client asks again
        (`_attach_again`, every ATTACH_RETRY s) while its job lives, and meanwhile fails
        nothing on its silence (pmgr/core/pilot.py `tick`).  True when it is settled."""
        # (a reply not ok says why: partition/control.py)
        why = cast(str, reply.get("error")) if reply else f"no answer within {ATTACH_TIMEOUT:g} s"
        job = pilot.job
        with self.session.locked():
            if pilot.final or pilot.released:
                return True
            if _incompatible(reply):  # (it will not take this client, ever)
                pilot.released = f"not attached: {why}"
                log.error("%s: %s", pilot.uid, pilot.released)
                return True
            if job is not None and job.poll() is not None:
                pilot.lost(f"lost: its job ended ({job.describe()}) before it took this client")
                return True
            if "an older owner's request" in why:  # (a newer client attached meanwhile)
                pilot.release_to({}, f" (it refused this client's attach: {why})")
                return True
        if not pilot.reattaching:
            pilot.reattaching = True
            log.warning("%s: not attached (%s); asked again every %g s", pilot.uid, why,
                        ATTACH_RETRY)  # fmt: skip
            threading.Thread(
                target=self._attach_again, args=(pilot,), name="pmgr-attach", daemon=True
            ).start()
        return False

    def _attach_again(self, pilot) -> None:
        """(a thread of its own) Attach again until the pilot takes this client, is settled
        (`_not_attached`) or the session closes."""
        try:
            while not self.session.closed and not pilot.linked:
                time.sleep(ATTACH_RETRY)
                if self.session.closed or pilot.linked:
                    return
                reply = self._ask_attach(pilot, True)  # (it owned the session before: ours)
                if reply and reply.get("ok"):
                    with self.session.locked():
                        pilot.last_heard = time.monotonic()
                    log.warning("%s: attached at last (%s)", pilot.uid, reply.get("result"))
                    return
                if self._not_attached(pilot, reply):
                    return
        finally:
            pilot.reattaching = False

    def _ask_attach(self, pilot, take_over: bool) -> dict | None:
        """The bootstrap's answer to `attach` (None: no answer)."""
        if not pilot.control:
            return None
        ctx: zmq.Context = zmq.Context.instance()
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(ATTACH_TIMEOUT * 1000))
        self.session.keys.client(sock)
        try:
            sock.connect(pilot.control)
            args = {
                "client": pilot.client_endpoint(),
                "owner": self.session.owner,
                "epoch": self.session.epoch,
                "take_over": take_over,
                **peer_version.mine(),  # (refused if the pilot speaks another)
                # (this client's data directory: the pilot's workers write large values
                # where it reads them, or send the bytes: pilot/functions.py)
                "data": data_files.for_pilot(
                    self.session.store.data, pilot.resource.batch_system == "local"
                ),
            }
            sock.send(pack({"cid": f"attach.{os.getpid()}", "op": "attach", "args": args}))
            return unpack(sock.recv())
        except zmq.ZMQError as exc:
            log.error("%s: attach failed: %s", pilot.uid, exc)
            return None
        finally:
            sock.close()

    @staticmethod
    def _owner_is_gone(owner: dict) -> bool:
        """Whether the owning client was on this host and its process is gone."""
        if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
            return False
        try:
            os.kill(owner["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def adopt_units(self, umgr) -> None:
        """The session's units come back to `umgr`: those not final as objects (reconciled
        with their agents: `sync`), the final ones as their state only (pmgr/core/unit_table.py;
        made again from the store when asked for), so an attach to a session of 10^7 units
        holds no object of a finished one."""
        if self.units_adopted:
            return
        self.units_adopted = True
        session = self.session
        n = 0
        for uid, state in session.store.unit_states(session.uid):
            n += 1
            session.ids.seen_uid(umgr.UID_PREFIX, uid)
            if state in S.FINAL:
                umgr.units.know_final(uid, state)
        self._rows_behind_final_docs()
        docs = session.store.open_units(session.uid)
        rows = session.store.histories([d["uid"] for d in docs], session.uid)
        ask: dict = {}
        cancels: dict = {}
        with session.locked():
            for p in self.pilots.values():
                if p.umgr is None:
                    p.umgr = umgr
                    umgr.pilots.append(p)
            for doc in docs:
                self._adopt(umgr, doc, ask, cancels, rows[doc["uid"]])
            for p in self.pilots.values():
                if p.umgr is umgr:
                    p.hand_orphans()
            for pilot, units in ask.items():
                pilot.command(
                    {"cid": session.ids.next_cid(pilot.uid), "op": "sync", "args": {"units": units}}
                )
            for pilot, by_reason in cancels.items():  # (after the sync: asked again, as the
                for reason, pairs in by_reason.items():  # client that died may not have)
                    pilot.command(
                        {"cid": None, "op": "cancel_units",
                         "args": {"units": pairs, "reason": reason}}
                    )  # fmt: skip
            umgr.routing.route()
        log.info(
            "%s: %d units recovered, %d being reconciled with their agents",
            session.uid,
            n,
            sum(len(u) for p in ask.values() for u in p.values()),
        )

    def _rows_behind_final_docs(self) -> None:
        """Units whose final doc a client before this one wrote without living to write its
        history rows (MongoDB writes a batch's docs, then its rows: the store records such units,
        pmgr/store/mongo.py): the rows their docs' own histories (`times`) have and the store
        lacks are written now (a row stored already is not stored again), then the records go.
        Their outcome is the doc's: nothing is asked of an agent."""
        session = self.session
        docs = session.store.rows_pending(session.uid)
        if not docs:  # (records of units whose docs are not final, if any: gone too)
            session.store.clear_rows_pending(session.uid)
            return
        for doc in docs:
            uid = doc["uid"]
            have = {h["seq"] for h in session.store.history(uid=uid)}
            for seq, (state, ts) in enumerate(doc.get("times") or ()):
                if seq not in have:
                    reason = doc.get("reason") if state in S.FINAL else None
                    session.writer.hist((session.uid, "units", uid, state, ts, reason, seq))
        session.writer.then(lambda: session.store.clear_rows_pending(session.uid), urgent=False)
        log.info("%s: history rows of %d final units written after their docs", session.uid,
                 len(docs))  # fmt: skip

    def _adopt(self, umgr, doc: dict, ask: dict, cancels: dict, rows: list[dict]) -> None:
        """(lock held) A unit not final in the store, made again: routed again if it never
        reached a partition, FAILED if its pilot ended, else asked for (`ask`); one whose
        cancel its client asked (kept with its doc) is CANCELED if it is nowhere else, else
        its cancel is asked again (`cancels`: {pilot: {reason: [[uid, partition], ...]}})."""
        session = self.session
        desc = umgr.DESCRIPTION.from_stored(doc["description"])
        unit = umgr.UNIT(session, doc["uid"], desc, umgr)
        self._restore(unit, doc, rows)
        unit.part, unit.exit_code = doc.get("partition"), doc.get("exit_code")
        unit.value = doc.get("return_value")
        unit.node, unit.slots = doc.get("node"), doc.get("slots")
        unit.pilot = self.pilots.get(doc.get("pilot"))
        kept = doc.get("kept")
        if isinstance(kept, dict):
            unit.kept = dict(kept)
            reason = kept.get(CANCEL_KEY)
            unit.cancel_asked = reason if isinstance(reason, str) else None
        umgr.units[unit.uid] = unit
        if unit.final:
            return
        if unit.cancel_asked is not None and (unit.part is None or unit.pilot is None):
            unit.advance(S.CANCELED, time.time(), unit.cancel_asked)  # (nowhere to ask it)
        elif unit.part is None or unit.pilot is None:
            unit.part = None
            umgr.pending.append(unit)
        elif unit.pilot.final:
            reason = f"lost with pilot {unit.pilot.uid} ({unit.pilot.state})"
            unit.advance(S.FAILED, time.time(), reason)
        else:
            part = unit.pilot.parts.get(unit.part)
            if part is not None:
                part.outstanding += 1
            ask.setdefault(unit.pilot, {}).setdefault(unit.part, []).append(unit.uid)
            if unit.state == S.SCHEDULING:  # (sent: it may have reached its partition)
                umgr.events.unsure.add(unit.uid)
            if unit.cancel_asked is not None:
                cancels.setdefault(unit.pilot, {}).setdefault(unit.cancel_asked, []).append(
                    [unit.uid, unit.part]
                )


def _incompatible(reply: dict | None) -> bool:
    """An attach refused because the pilot speaks another protocol (its reply says which)."""
    return reply is not None and not reply.get("ok") and "protocol" in reply
