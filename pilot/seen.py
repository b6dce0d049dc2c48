"""Which units ended here: one bit per unit number for the uids the client generates
(`unit.NNNNNN`, `task.NNNNNN`: one bitmap per prefix), a set for any other uid.

An agent must never run a unit twice, also one sent again after it ended; remembering each
finished uid as a string cost ~100 bytes a unit (10 M units: 1 GB), a bit costs 1/8 byte.  Only
a uid in the generated form (six digits or more, no leading zero beyond six) takes a bit, so no
two uids share one (task.07, a user's, is a string: task.000007 may be another unit).
"""

from __future__ import annotations

PREFIXES = ("unit", "task")  # the prefixes of the uids the client numbers (pmgr UID_PREFIX)


class SeenUnits:
    def __init__(self) -> None:
        self.bits: dict[str, bytearray] = {p: bytearray() for p in PREFIXES}
        self.others: set[str] = set()

    def add(self, uid: str) -> None:
        prefix, n = uid_number(uid)
        if n is None:
            self.others.add(uid)
            return
        bits = self.bits[prefix]
        byte = n >> 3
        if byte >= len(bits):
            bits.extend(bytes(max(byte + 1 - len(bits), len(bits))))
        bits[byte] |= 1 << (n & 7)

    def __contains__(self, uid: str) -> bool:
        prefix, n = uid_number(uid)
        if n is None:
            return uid in self.others
        bits = self.bits[prefix]
        byte = n >> 3
        return byte < len(bits) and bool(bits[byte] & (1 << (n & 7)))


def uid_number(uid: str) -> tuple[str, int | None]:
    """(prefix, number) of a generated uid in its canonical form; (prefix, None) for any other."""
    prefix, _, digits = uid.partition(".")
    if prefix in PREFIXES and 6 <= len(digits) <= 12 and digits.isdigit():
        if len(digits) == 6 or digits[0] != "0":
            return prefix, int(digits)
    return prefix, None
