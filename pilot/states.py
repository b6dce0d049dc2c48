"""State names and the three state machines (pilot, partition, unit).

The machines are built once per kind with `transitions`: they are the one definition of the
states and of the legal moves.  Objects are not bound to them (binding a Machine to an object
costs ~170 us per object) and do not move through `Event.trigger` (20-30 us a call: it built an
EventData and resolved callbacks for every move, 35% of the client's CPU at 1,000 units/s).
Instead `check_transition` looks each move up in the machine's own transition table, read out of
the Machine once (`legal_moves`), and raises `IllegalTransition` for a move it does not hold.

    Pilot:     NEW -> LAUNCHING -> PENDING -> ACTIVE -> DONE | FAILED | CANCELED
    Partition: NEW -> PENDING -> STARTING -> ACTIVE -> DONE | FAILED | CANCELED
    Unit:      NEW -> SCHEDULING -> QUEUED -> EXECUTING -> DONE | FAILED | CANCELED
               QUEUED -> SCHEDULING (a unit handed back by a stopped partition is routed again)
               EXECUTING -> SCHEDULING (a `restartable` unit whose partition or node was lost
                                        is routed again: the client only, never an agent)

Any non-final state may go straight to FAILED or CANCELED.  Final states are final.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transitions import Machine, MachineError

logging.getLogger("transitions").setLevel(logging.WARNING)  # it logs every callback at INFO

NEW = "NEW"
LAUNCHING = "LAUNCHING"
PENDING = "PENDING"
STARTING = "STARTING"
ACTIVE = "ACTIVE"
SCHEDULING = "SCHEDULING"
QUEUED = "QUEUED"
EXECUTING = "EXECUTING"
DONE = "DONE"
FAILED = "FAILED"
CANCELED = "CANCELED"

FINAL = frozenset((DONE, FAILED, CANCELED))


class IllegalTransition(MachineError):
    """A state change the object's state model does not allow."""


def _machine(name: str, path: list[str], extra: Sequence[tuple[str, str]] = ()) -> Machine:
    states = path + [DONE, FAILED, CANCELED]
    transitions: list[dict[str, str | list[str]]] = []
    for src, dst in zip(path, path[1:] + [DONE]):
        transitions.append({"trigger": "to_" + dst, "source": src, "dest": dst})
    for src, dst in extra:
        transitions.append({"trigger": "to_" + dst, "source": src, "dest": dst})
    for dst in (FAILED, CANCELED):
        transitions.append({"trigger": "to_" + dst, "source": list(path), "dest": dst})
    m = Machine(
        model=None,
        states=states,
        transitions=transitions,
        initial=NEW,
        auto_transitions=False,
        name=name,
    )
    return m


PILOT_MACHINE = _machine("pilot", [NEW, LAUNCHING, PENDING, ACTIVE])
PARTITION_MACHINE = _machine("partition", [NEW, PENDING, STARTING, ACTIVE])
UNIT_MACHINE = _machine(
    "unit",
    [NEW, SCHEDULING, QUEUED, EXECUTING],
    extra=[(QUEUED, SCHEDULING), (EXECUTING, SCHEDULING)],
)

PILOT_STATES = tuple(PILOT_MACHINE.states)
UNIT_ORDER = {s: i for i, s in enumerate((NEW, SCHEDULING, QUEUED, EXECUTING))}
PARTITION_STATES = tuple(PARTITION_MACHINE.states)
UNIT_STATES = tuple(UNIT_MACHINE.states)


def waited(state, machine: Machine, where: str) -> frozenset[str]:
    """The states a wait for `state` (one, a list of them, or None: a final one) ends in, the
    final ones with them; ValueError naming `where` and the accepted states for any other (a
    wait for a state its object never takes would only end at its timeout)."""
    if state is None:
        return FINAL
    known = list(machine.states)
    try:  # (once: a generator is read here, and only here)
        if isinstance(state, (bytes, bytearray)):  # (iterable, but of ints: no state)
            raise TypeError
        asked = [state] if isinstance(state, str) else list(state)
        bad = [s for s in asked if s not in known]
    except TypeError:  # (not a state, nor a list of them)
        asked, bad = [], [state]
    if bad or not asked:
        raise ValueError(
            f"{where}: state={(bad or [state])[0]!r} must be one of {known}, a list of them, "
            "or None (a final one)"
        )
    return frozenset(asked) | FINAL


def legal_moves(machine: Machine) -> frozenset[tuple[str, str | None]]:
    """Every (source, dest) pair the machine's transitions allow (dest None: an internal
    transition, which these machines have none of)."""
    return frozenset(
        (src, t.dest)
        for event in machine.events.values()
        for src, ts in event.transitions.items()
        for t in ts
    )


_MOVES = {id(m): legal_moves(m) for m in (PILOT_MACHINE, PARTITION_MACHINE, UNIT_MACHINE)}


def check_move(machine: Machine, uid: str, src: str, dst: str) -> None:
    """IllegalTransition naming the object unless `machine` allows src -> dst."""
    if (src, dst) not in _MOVES[id(machine)]:
        raise IllegalTransition(
            f"{machine.name.rstrip(': ')} {uid}: illegal transition {src} -> {dst}"
        )


def check_transition(machine: Machine, obj, state: str) -> None:
    """Move `obj.state` to `state` as `machine` allows, or raise IllegalTransition."""
    check_move(machine, getattr(obj, "uid", "?"), obj.state, state)
    obj.state = state


def reachable(machine: Machine, src: str, dst: str) -> bool:
    """Whether every step of `path_to(machine, src, dst)` is a legal move."""
    return legal_path(machine, src, dst) is not None


_LEGAL_PATHS: dict = {}  # (id(machine), src, dst) -> legal_path's answer (few: states are few)


def legal_path(machine: Machine, src: str, dst: str) -> tuple[str, ...] | None:
    """`path_to(machine, src, dst)` when each of its steps is a legal move, else None (looked
    up once per pair: a client applies several state changes per unit)."""
    key = (id(machine), src, dst)
    try:
        return _LEGAL_PATHS[key]
    except KeyError:
        pass
    if src not in machine.states or dst not in machine.states:
        return None  # (not kept: a hostile name must not grow the table)
    moves = _MOVES[id(machine)]
    steps = path_to(machine, src, dst)
    legal = all(move in moves for move in zip([src, *steps], steps))
    _LEGAL_PATHS[key] = path = tuple(steps) if legal else None
    return path


def path_to(machine: Machine, src: str, dst: str) -> list[str]:
    """The states between src (exclusive) and dst (inclusive) along the main path.

    A remote component may report only the newest of several states when messages are coalesced
    (e.g. a unit that went QUEUED -> EXECUTING -> DONE in one batch is always sent in full, but a
    partition that failed before the client saw STARTING is not).  The client uses this to fill the
    legal intermediate states; it returns [dst] when dst is directly reachable.  DONE is
    reached along the main path (a unit the client has QUEUED that reports DONE went through
    EXECUTING); FAILED and CANCELED are reachable from every state that is not final.
    """
    if (src, dst) in _MOVES[id(machine)]:
        return [dst]
    order = [s for s in machine.states if s not in FINAL]
    if src not in order:
        return [dst]
    i = order.index(src)
    if dst == DONE:
        return order[i + 1 :] + [DONE]
    if dst in FINAL or dst not in order:
        return [dst]
    j = order.index(dst)
    return order[i + 1 : j + 1] if j > i else [dst]
