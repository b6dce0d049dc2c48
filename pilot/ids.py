"""Uids and the names users give for them.

Uids end in a zero-padded counter: `pilot.0000`, `pilot.0000.part.0002`, `unit.000042`.
`uid_index` reads that counter back (a process that attaches to a session, or learns of a
partition started from a shell, continues the count after it).  `resolve_partitions` turns
what a user gives as `stop=` (a uid, its short form `part.0001`, a list of them, or ALL, in any
case) into
full partition uids, with one error for a name that is not known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ALL = "ALL"  # every live partition (reconfig stop=)


def uid_index(uid: str) -> int | None:
    """The counter at the end of `uid`, or None when it has none."""
    tail = uid.rsplit(".", 1)[-1]
    return int(tail) if tail.isascii() and tail.isdigit() else None


def next_index(current: int, uid: str) -> int:
    """The next free counter value once `uid` exists."""
    index = uid_index(uid)
    return current if index is None else max(current, index + 1)


def resolve_partitions(stop, pilot_uid: str, live: Mapping[str, bool]) -> list[str]:
    """Full uids of the live partitions `stop` names, in order, without repeats.

    `live` maps every partition uid of the pilot to whether it is live (not final); naming a
    final one is no error (it is already stopped) but yields nothing.  ValueError names the
    first uid that is not a partition of the pilot."""
    if stop is None or (isinstance(stop, (list, tuple)) and not stop):
        return []
    if isinstance(stop, str) and stop.upper() == ALL and stop not in live:  # ("all" too, as
        return [uid for uid, alive in live.items() if alive]  # the CLI's --stop all)
    names: Iterable = [stop] if isinstance(stop, str) else stop
    if not isinstance(names, (list, tuple)):
        raise ValueError(f"stop={stop!r} must be a partition uid, a list of them, or ALL")
    out = []
    for name in names:
        full = name if name in live else f"{pilot_uid}.{name}"
        if not isinstance(name, str) or full not in live:
            raise ValueError(
                f"stop={name!r}: no such partition in {pilot_uid}; known: {sorted(live)}, "
                "or ALL for every one"
            )
        if live[full] and full not in out:
            out.append(full)
    return out
