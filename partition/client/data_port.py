"""The pilot's end of data staging: files from and to the client over the pilot link, in chunks.

Protocol (client -> bootstrap on the pilot link, answered on it; pmgr/core/transfers.py is the
other end).  One chunk is in flight per transfer: the client sends the next when the last is
answered, so a 1 GB file never sits in memory or in a socket queue, on either side.
    -> put  {id, target, unit, sandbox, offset, last, tar}  + a chunk of bytes
            written at `offset` of the target (created, parents made, truncated at offset 0);
            on the last chunk of a tar, unpacked so that the target ends as a COPY of the
            source leaves it (pilot/staging.py untar_as_copy) and removed
    <- put_ack {id, offset, error}
    -> get  {id, source, unit, sandbox, offset, tar}
            at offset 0 of a tar: the source (file or directory) is packed first; a directory
            asked for without `tar` (a TRANSFER) is packed all the same, and its first reply
            says `tar`: the client unpacks it (pilot/staging.py untar_as_copy)
    <- got  {id, offset, last, error, tar}  + the chunk read at `offset` (CHUNK bytes at most)
`target` / `source` are pilot-side URLs (pilot/staging.py); `unit` and `sandbox` name the
unit whose sandbox unit:// means.  Errors (a missing source, a full disk) come back as text;
the client fails the unit with the directive.  Only the client holds the session's keys, so
only it can reach this; paths are the user's own.
"""

from __future__ import annotations

import os
import tarfile
import time

from pilot import staging, validate
from pilot.sandbox import sandbox_of
from pilot.wire import checks

CHUNK = 1 << 20  # bytes per message
IDLE = 600.0  # seconds after which a transfer nobody continues is dropped


class DataPort:
    def __init__(self, pilot_sandbox: str) -> None:
        self.root = pilot_sandbox
        self.open: dict[str, dict] = {}  # transfer id -> {fd, path, tar, at}

    def _path(self, hdr: dict, key: str) -> str:
        url = validate.text(key, hdr.get(key), optional=False)
        unit = {"uid": checks.uid("unit", hdr.get("unit")), "sandbox": hdr.get("sandbox")}
        validate.text("sandbox", unit["sandbox"])
        return staging.resolve(url, self.root, sandbox_of(self.root, unit))

    def put(self, hdr: dict, chunk: bytes) -> dict:
        tid = validate.text("id", hdr.get("id"), optional=False)
        offset = hdr.get("offset")
        reply = {"id": tid, "offset": offset, "error": None}
        try:
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"offset={offset!r} must be a whole number >= 0")
            t = self.open.get(tid)
            if offset == 0:
                self._close(tid)
                path = self._path(hdr, "target")
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                tar = bool(hdr.get("tar"))
                into = path + f".{tid}.tar" if tar else path
                fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
                t = self.open[tid] = {"fd": fd, "path": path, "file": into, "tar": tar}
            if t is None:
                raise ValueError(f"transfer {tid!r} is not open (offset {offset} without 0)")
            t["at"] = time.monotonic()
            os.pwrite(t["fd"], chunk, offset)
            if hdr.get("last"):
                os.close(t.pop("fd"))
                del self.open[tid]
                if t["tar"]:
                    try:
                        staging.untar_as_copy(t["file"], t["path"])
                    finally:
                        os.unlink(t["file"])
        except (OSError, ValueError, tarfile.TarError) as exc:
            self._close(tid)
            reply["error"] = str(exc)
        return reply

    def get(self, hdr: dict) -> tuple[dict, bytes]:
        tid = validate.text("id", hdr.get("id"), optional=False)
        offset = hdr.get("offset")
        reply = {"id": tid, "offset": offset, "last": True, "error": None}
        try:
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"offset={offset!r} must be a whole number >= 0")
            if offset == 0:
                self._close(tid)
                path = self._path(hdr, "source")
                if not hdr.get("tar") and os.path.isdir(path):  # (a directory to TRANSFER:
                    hdr = dict(hdr, tar=True)  # packed, and the reply says so)
                    reply["tar"] = True
                if hdr.get("tar"):
                    packed = os.path.join(self.root, f".{tid}.tar")
                    with tarfile.open(packed, "w") as tf:
                        tf.add(path, arcname=os.path.basename(path.rstrip("/")) or ".")
                    path = packed
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                self.open[tid] = {"fd": fd, "file": path, "tar": bool(hdr.get("tar"))}
            t = self.open.get(tid)
            if t is None:
                raise ValueError(f"transfer {tid!r} is not open (offset {offset} without 0)")
            t["at"] = time.monotonic()
            chunk = os.pread(t["fd"], CHUNK, offset)
            reply["last"] = len(chunk) < CHUNK
            if reply["last"]:
                self._close(tid)
            return reply, chunk
        except (OSError, ValueError, tarfile.TarError) as exc:
            self._close(tid)
            reply["error"] = str(exc)
            return reply, b""

    def _close(self, tid: str) -> None:
        t = self.open.pop(tid, None)
        if t is None:
            return
        if "fd" in t:
            os.close(t["fd"])
        if t["tar"] and os.path.exists(t["file"]):
            os.unlink(t["file"])

    def expire(self) -> None:
        now = time.monotonic()
        for tid in [k for k, t in self.open.items() if now - t.get("at", now) > IDLE]:
            self._close(tid)
