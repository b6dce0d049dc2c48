"""Outcomes the pilot keeps until its client has them (docs/guarantees.md).

A unit's final state reaches the bootstrap from its agent (a `ustates` batch, on its way to the
client: pilot/wire/updates.py); the bootstrap keeps that record here until the client acknowledges
that its store has it (`ack {uids}` on the pilot link, which the client sends once its store
writer has written those states). So an outcome outlives the agent that reported it (a
partition stopped by a reconfig, an agent that died after reporting) and the client's absence:
a client that attaches asks with `sync` (partition/control.py), and the records here answer
first; an agent's `synced` answer that names units it no longer knows (they ended) is answered
from here too. A unit is "outcome unknown" at the client only when no record of it is left
anywhere that outlived it. Memory: one entry per unit that ended and was not acknowledged yet
(with a client attached, about the last second's worth: its group of the batch that said it,
and its place there; a group is let go of with its last unit), and one bit per unit
acknowledged (pilot/seen.py; a uid of the user's own, not numbered, is not remembered and stays
named, which is only cautious): when an agent dies, its start journal holds every unit it ever
started (10^7 lines after 10^7 units), and `not_acknowledged` streams it down to the units
whose outcome the client may not have (in flight, or ended and not acknowledged), the only ones
the `lost` message needs to name.

Units handed back (a partition stopped, or asked to give back, before they ran: `back`, on its
way to the client) are kept too, by uid with the partition that handed them back (`back`, the
last BACK_KEPT; a unit's entry goes when its outcome comes here, or, when it ends elsewhere
(another pilot, canceled at the client), with the oldest once BACK_KEPT are kept): a client
that died before the `back` reached it left them in its store as sent there, and the next
client's `sync` of that partition is answered `back` for them (partition/control.py,
agents/channel.py), so they are routed again, not failed as lost. An entry says "never ran
there" only while that partition's agent does not know the unit again: a live agent that does
answers for it. (A partition whose agent is gone answers from its start journal alone:
partition/control.py `sync`.)
"""

from __future__ import annotations

from pilot.seen import SeenUnits, uid_number
from pilot.states import FINAL
from pilot.wire.checks import UID

BACK_KEPT = 100_000  # handed-back units remembered, at most (the oldest go first)


class Outbox:
    def __init__(self) -> None:
        self.kept: dict[str, tuple] = {}  # uid -> (its Group of final moves, its place there)
        self.acked = 0
        self.acknowledged = SeenUnits()  # a bit per unit whose outcome the client's store has
        self.back: dict[str, str] = {}  # uid -> the partition that handed it back (header)

    def add(self, groups: list) -> None:
        """Keep the final moves of an agent's `ustates` batch (its Groups, checked)."""
        kept, back = self.kept, self.back
        for g in groups:
            if g.state in FINAL:
                for i, uid in enumerate(g.uids):
                    kept[uid] = (g, i)
                    if back:  # (it ran, or was canceled, somewhere: not back)
                        back.pop(uid, None)

    def handed_back(self, part: str, units: list) -> None:
        """These units (a `back` message's: {uid, ...} each; anything else, or a uid no unit
        can have, is passed over) were handed back by partition `part`, not run there."""
        back = self.back
        for u in units:
            uid = u.get("uid") if type(u) is dict else None
            if type(uid) is not str or not UID.match(uid):  # (no unit has such a uid)
                continue
            back.pop(uid, None)  # (its latest hand-back, newest in the order)
            back[uid] = part
        while len(back) > BACK_KEPT:
            del back[next(iter(back))]

    def back_of(self, part: str, uids: list[str]) -> tuple[list[str], list[str]]:
        """(those of `uids` that partition `part` handed back, the others)."""
        if not self.back:
            return [], uids
        back = self.back
        given = [u for u in uids if back.get(u) == part]
        if not given:
            return [], uids
        mine = set(given)
        return given, [u for u in uids if u not in mine]

    def ack(self, uids: list[str]) -> None:
        """The client's store has these: they are let go of."""
        for uid in uids:
            if self.kept.pop(uid, None) is not None:
                self.acked += 1
                if uid_number(uid)[1] is not None:  # (a user's own uid would be a string
                    self.acknowledged.add(uid)  # kept per unit: it stays named, harmlessly)

    def not_acknowledged(self, lines):
        """The uids of a start journal's `lines` whose outcome the client's store may not have
        (a unit the client acknowledged is final there: its journal line says nothing new)."""
        acknowledged = self.acknowledged
        for line in lines:
            uid = line.strip()
            if uid and uid not in acknowledged:
                yield uid

    def answer(self, uids: list[str]) -> tuple[list, list[str]]:
        """(the kept moves of these units as (uid, state, ts, info), the uids it has none of)."""
        found, rest = [], []
        for uid in uids:
            kept = self.kept.get(uid)
            if kept is None:
                rest.append(uid)
            else:
                g, i = kept
                found.append((uid, g.state, g.ts[i], g.info(i)))
        return found, rest
