"""The client's end of data staging: TRANSFER and TARBALL directives over the pilot link.

A unit with client-side input steps is routed as any other, then, before it is sent, its files
are pushed to its pilot (`put`); one with client-side output steps stays EXECUTING after its
agent says DONE until its files are pulled (`get`).  partition/client/data_port.py has the protocol;
chunks of CHUNK bytes, one in flight per transfer, so memory stays flat for any file size and
the client may be on another host than the pilot.  One worker thread does the transfers in
order; `then(error)` is called on it when a unit's steps are done (error: the first failed
directive and why, or None).  A step marked SKIP_FAILED / NON_FATAL that fails is logged.
"""

from __future__ import annotations

import logging
import os
import queue
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence

from pilot import staging
from pilot.wire.protocol import ProtocolError, pack, unpack

log = logging.getLogger("pmgr.transfers")
CHUNK = 1 << 20
REPLY_TIMEOUT = 60.0


class TransferError(Exception):
    pass


class Transfers:
    def __init__(self, session) -> None:
        self.session = session
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.waiting: dict[str, queue.SimpleQueue] = {}  # transfer id -> its replies
        self.lock = threading.Lock()
        self.count = 0
        self.thread: threading.Thread | None = None

    # -- called by the UnitManager (lock held) ------------------------------------------------
    def stage(self, unit, pilot, steps: Sequence[dict], then) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._work, name="transfers", daemon=True)
            self.thread.start()
        self.jobs.put((unit.uid, unit.description.sandbox, pilot, steps, then))

    # -- called by the channel thread ---------------------------------------------------------
    def on_reply(self, frames: list[bytes]) -> None:
        try:
            hdr = unpack(frames[1])
            box = self.waiting.get(hdr.get("id") or "") if isinstance(hdr, dict) else None
        except (ProtocolError, IndexError):
            box = None
        if box is None:
            self.session.channel.bad.report(f"a transfer reply nobody waits for: {frames[:1]!r}")
            return
        box.put((hdr, frames[2] if len(frames) > 2 else b""))

    def close(self) -> None:
        if self.thread is not None:
            self.jobs.put(None)
            self.thread.join(5.0)

    # -- the worker -----------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            uid, sandbox, pilot, steps, then = job
            error = None
            for d in steps:
                try:
                    self._one(uid, sandbox, pilot, d)
                except (OSError, TransferError, tarfile.TarError) as exc:
                    why = f"{staging.describe(d)} failed: {exc}"
                    if staging.SKIP_FAILED in d["flags"] or staging.NON_FATAL in d["flags"]:
                        log.warning("%s: staging skipped: %s", uid, why)
                        continue
                    error = why
                    break
            try:
                then(error)
            except Exception:
                log.exception("%s: after staging", uid)

    def _one(self, uid: str, sandbox, pilot, d: dict) -> None:
        to_pilot = staging.split(d["source"])[0] == "client"
        # a TARBALL, or a directory to TRANSFER: a tar crosses (unpacked as COPY leaves it)
        tar = d["action"] == staging.TARBALL or (
            to_pilot and os.path.isdir(staging.split(d["source"])[1])
        )
        with self.lock:
            self.count += 1
            tid = f"{uid}.{self.count}"
        box: queue.SimpleQueue = queue.SimpleQueue()
        self.waiting[tid] = box
        hdr = {"id": tid, "unit": uid, "sandbox": sandbox, "tar": tar}
        try:
            if to_pilot:
                self._put(pilot, box, hdr, staging.split(d["source"])[1], d["target"], tar)
            else:
                self._get(pilot, box, hdr, d["source"], staging.split(d["target"])[1], tar, d)
        finally:
            del self.waiting[tid]

    def _ask(self, pilot, box, frames: list[bytes]) -> tuple[dict, bytes]:
        self.session.channel.send(pilot.uid, frames)
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            try:
                hdr, chunk = box.get(timeout=0.5)
            except queue.Empty:
                if pilot.final:
                    raise TransferError(f"{pilot.uid} ended ({pilot.state})") from None
                if pilot.released:  # (another client owns it now: its transfers are its own)
                    raise TransferError(f"{pilot.uid}: {pilot.released}") from None
                if time.monotonic() > deadline:
                    raise TransferError(
                        f"no answer from {pilot.uid} in {REPLY_TIMEOUT:g} s"
                    ) from None
                continue
            if hdr.get("error"):
                raise TransferError(hdr["error"])
            return hdr, chunk

    def _put(self, pilot, box, hdr: dict, path: str, target: str, tar: bool) -> None:
        packed = None
        if tar:
            fd, packed = tempfile.mkstemp(suffix=".tar", dir=self.session.dir)
            os.close(fd)
            with tarfile.open(packed, "w") as tf:
                tf.add(path, arcname=os.path.basename(path.rstrip("/")) or ".")
            path = packed
        try:
            with open(path, "rb") as f:
                offset = 0
                while True:
                    chunk = f.read(CHUNK)
                    last = len(chunk) < CHUNK
                    head = dict(hdr, target=target, offset=offset, last=last)
                    self._ask(pilot, box, [b"put", pack(head), chunk])
                    offset += len(chunk)
                    if last:
                        return
        finally:
            if packed:
                os.unlink(packed)

    def _get(self, pilot, box, hdr: dict, source: str, path: str, tar: bool, d: dict) -> None:
        if staging.CREATE_PARENTS in d["flags"]:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        target = path  # (a tar is unpacked as COPY leaves its target: untar_as_copy)
        if not tar:
            path = staging.into(path, staging.split(source)[1])
        # into a file of its own beside the target, which takes its place once whole (and only
        # while this client still acts on the pilot): a transfer cut short, or one of a client
        # deposed meanwhile, leaves the target as it was (was: truncated at its start)
        into = f"{path.rstrip('/')}.part.{os.getpid()}.{hdr['id']}"
        try:
            with open(into, "wb") as f:
                offset = 0
                while True:
                    head = dict(hdr, source=source, offset=offset)
                    reply, chunk = self._ask(pilot, box, [b"get", pack(head)])
                    if offset == 0 and reply.get("tar") and not tar:  # (a directory: the
                        tar = True  # pilot packed it)
                    f.write(chunk)
                    offset += len(chunk)
                    if reply.get("last"):
                        break
            if pilot.released:
                raise TransferError(f"{pilot.uid}: {pilot.released}")
            if tar:
                staging.untar_as_copy(into, target)  # the target as COPY leaves it
            else:
                os.replace(into, path)
        finally:
            if os.path.exists(into):
                os.unlink(into)
