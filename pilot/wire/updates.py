"""Unit state updates on the wire, in columns: agent -> bootstrap -> client (`ustates`).

A unit moves three times at its agent (QUEUED, EXECUTING, a final state); at 20,000 units a
second a record per move, a JSON row [kind, uid, state, ts, {info}] each, cost every hop ~1.5 us
to encode and ~1.7 us to decode a move (measured: 100,000 rows).  So the moves of a batch travel
as columns, one group per state:

    [b"ustates", HEAD, TIMES, DATA...]
    HEAD   JSON: [[state, uids, same, cols], ...], one group per state, in the order of the unit
           state machine (QUEUED, EXECUTING, then the final ones): a unit's moves in one batch
           are applied in its own order, whatever order they were recorded in
             state  the state the units of the group moved to
             uids   [uid, ...]
             same   {key: value}: what every unit of the group carries (DONE: exit_code 0;
                    EXECUTING on one node: the node)
             cols   {key: [value | null, ...]}: what differs, one value per uid (null: that unit
                    has none: no key)
    TIMES  little-endian float64, one per uid, the groups' uids in order: when each moved
    DATA   the bytes values of HEAD (a function's large return value), a frame each, referred
           to from HEAD (pilot/wire/framed.py); none in the usual batch

Info keys (what a move carries, as before): exit_code, reason, node, slots, lost, stdout,
stderr, value, exception; and `part`, in `same`: the partition whose agent said it
(`frames(part=...)`), so that the client drops a move of a partition the unit has left
(routed again since: pmgr/core/unit_events.py).  `Moves` builds a batch (the agent, the
bootstrap's outbox when it answers a sync); `read` checks one that arrived (every group's
shape, every uid's form in one regular-expression pass, the times' count and finiteness) and
gives its `Group`s; a batch that does not pass is a bad message (validate.Invalid) and nothing
of it is applied.
"""

from __future__ import annotations

import array
import math
import re
import sys

from pilot import validate
from pilot.states import CANCELED, DONE, EXECUTING, FAILED, QUEUED, SCHEDULING
from pilot.wire import checks, framed
from pilot.wire.protocol import ProtocolError, pack, unpack

ORDER = (SCHEDULING, QUEUED, EXECUTING, DONE, FAILED, CANCELED)  # groups go in this order
_RANK = {s: i for i, s in enumerate(ORDER)}
_MISSING = object()
GROUP_MAX = 1_000_000  # uids a batch may carry
# every uid of a group checked at once: uids joined by newlines, one pass of the uid form
_UIDS = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}\n)*[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}\Z")
_LITTLE = sys.byteorder == "little"


class Group:
    """The moves of a batch to one state: uids, their times, what they carry."""

    __slots__ = ("state", "uids", "ts", "same", "cols")

    def __init__(self, state: str, uids: list, ts: list, same: dict, cols: dict) -> None:
        self.state, self.uids, self.ts, self.same, self.cols = state, uids, ts, same, cols

    def info(self, i: int) -> dict:
        """What the i-th unit's move carries, as one mapping (a new dict)."""
        out = dict(self.same)
        for key, values in self.cols.items():
            v = values[i]
            if v is not None:
                out[key] = v
        return out

    def column(self, key: str) -> list | None:
        """The values of `key` for every unit (None where a unit has none); None when no unit
        of the group has it."""
        if key in self.same:
            return [self.same[key]] * len(self.uids)
        return self.cols.get(key)

    def __len__(self) -> int:
        return len(self.uids)


class Moves:
    """A batch being built: `add` each move, `frames()` the message (empty: nothing to send)."""

    __slots__ = ("groups", "n")

    def __init__(self) -> None:
        self.groups: dict[str, tuple[list, list, list]] = {}  # state -> (uids, ts, infos)
        self.n = 0

    def add(self, uid: str, state: str, ts: float, info: dict | None) -> None:
        g = self.groups.get(state)
        if g is None:
            g = self.groups[state] = ([], [], [])
        g[0].append(uid)
        g[1].append(ts)
        g[2].append(info)
        self.n += 1

    def __len__(self) -> int:
        return self.n

    def frames(self, kind: bytes = b"ustates", part: str | None = None) -> list[bytes]:
        """The message; `part`: the partition whose agent says these moves (in each group's
        `same`)."""
        head = []
        times = array.array("d")
        for state in sorted(self.groups, key=_RANK.__getitem__):
            uids, ts, infos = self.groups[state]
            same, cols = _columns(infos)
            if part is not None:
                same["part"] = part
                cols.pop("part", None)
            head.append([state, uids, same, cols])
            times.extend(ts)
        if not _LITTLE:
            times.byteswap()
        try:
            return [kind, pack(head), times.tobytes()]
        except TypeError:  # bytes in it (a large value): each goes as a frame of its own
            text, data = framed.dumps(head)
            return [kind, text.encode(), times.tobytes(), *data]


def _columns(infos: list) -> tuple[dict, dict]:
    """(same, cols) of the infos of a group (see the module's header)."""
    first = infos[0]
    if all(i is first for i in infos):  # (one shared info, or none at all: the usual case)
        return (dict(first) if first else {}), {}
    keys: dict = {}
    for info in infos:
        if info:
            keys.update(dict.fromkeys(info))
    same, cols = {}, {}
    for key in keys:
        values = [(info.get(key, _MISSING) if info else _MISSING) for info in infos]
        v0 = values[0]
        if v0 is not _MISSING and all(v == v0 and type(v) is type(v0) for v in values):
            same[key] = v0
        else:
            cols[key] = [None if v is _MISSING else v for v in values]
    return same, cols


def read(head: bytes, times: bytes, data=()) -> list[Group]:
    """The groups of a `ustates` message, checked (validate.Invalid naming what is wrong);
    `data`: the frames after TIMES."""
    body = framed.loads(head, data) if data else unpack(head)
    if not isinstance(body, list) or len(body) > len(ORDER):
        raise ProtocolError("ustates: the head must be a list of at most one group per state")
    if len(times) % 8:
        raise ProtocolError(f"ustates: times of {len(times)} bytes (a float64 per uid)")
    ts = array.array("d")
    ts.frombytes(times)
    if not _LITTLE:
        ts.byteswap()
    out = []
    at = 0
    seen = set()
    for k, group in enumerate(body):
        where = f"ustates[{k}]"
        if not isinstance(group, list) or len(group) != 4:
            raise validate.bad(where, group, "[state, uids, same, cols]")
        state, uids, same, cols = group
        if state not in _RANK or state in seen:
            raise validate.bad(f"{where}.state", state, f"one of {ORDER}, once")
        seen.add(state)
        validate.items(f"{where}.uids", uids, GROUP_MAX)
        if not uids or not all(type(u) is str for u in uids):
            raise validate.bad(f"{where}.uids", uids, "a non-empty list of uids")
        joined = "\n".join(uids)  # (a uid holding a newline would pass as two: counted)
        if joined.count("\n") != len(uids) - 1 or not _UIDS.match(joined):
            bad = next(u for u in uids if not checks.UID.match(u))
            raise validate.bad(f"{where}.uids", bad, "uids (letters, digits, _ . -; at most 128)")
        validate.mapping(f"{where}.same", same)
        validate.mapping(f"{where}.cols", cols)
        for key, values in cols.items():
            if not isinstance(values, list) or len(values) != len(uids):
                raise validate.bad(f"{where}.cols.{key}", values, f"a list of {len(uids)} values")
        n = len(uids)
        if at + n > len(ts):
            raise ProtocolError(f"ustates: {len(ts)} times for more uids")
        span = ts[at : at + n].tolist()
        if not math.isfinite(sum(span)) and not all(math.isfinite(t) for t in span):
            raise ProtocolError(f"{where}: a time that is not a finite number")
        at += n
        out.append(Group(state, uids, span, same, cols))
    if at != len(ts):
        raise ProtocolError(f"ustates: {len(ts)} times for {at} uids")
    return out


def of_records(records) -> Moves:
    """A batch of kept moves [(uid, state, ts, info), ...] (the outbox's answer to a sync)."""
    moves = Moves()
    for uid, state, ts, info in records:
        moves.add(uid, state, ts, info)
    return moves
