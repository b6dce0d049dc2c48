"""Which units ended here: one bit per unit number (`unit.NNNNNN` uids), a set for any other.

An agent must never run a unit twice, also one sent again after it ended; remembering each
finished uid as a string cost ~100 bytes a unit (10 M units: 1 GB), a bit costs 1/8 byte.
"""

from __future__ import annotations

_PREFIX = "unit."


class SeenUnits:
    def __init__(self) -> None:
        self.bits = bytearray()
        self.others: set[str] = set()

    def add(self, uid: str) -> None:
        n = _number(uid)
        if n is None:
            self.others.add(uid)
            return
        byte = n >> 3
        if byte >= len(self.bits):
            self.bits.extend(bytes(max(byte + 1 - len(self.bits), len(self.bits))))
        self.bits[byte] |= 1 << (n & 7)

    def __contains__(self, uid: str) -> bool:
        n = _number(uid)
        if n is None:
            return uid in self.others
        byte = n >> 3
        return byte < len(self.bits) and bool(self.bits[byte] & (1 << (n & 7)))


def _number(uid: str) -> int | None:
    if uid.startswith(_PREFIX):
        digits = uid[len(_PREFIX) :]
        if digits.isdigit() and len(digits) <= 12:
            return int(digits)
    return None
