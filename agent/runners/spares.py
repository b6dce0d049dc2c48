"""Empty unit sandboxes kept for reuse, and the checks that keep reuse from leaking anything.

Why: a new directory costs a new inode, 100-700 us of kernel time on the disks measured here
(as much as starting /bin/true); renaming one that exists costs about 20 us.  So a sandbox its
unit left empty stays where it is as a spare, and a later unit's sandbox is such a spare renamed
(one rename), once it is known to be safe:
    quarantine   a spare waits until a scan of every process's working directory that started
                 after it arrived finds none inside it (a detached process the unit left behind,
                 working there, would otherwise write into a stranger's sandbox).  A spare
                 something works in is removed instead (rmdir works under a process's feet;
                 what it writes later fails).  Scans run at most every SCAN_EVERY seconds
                 (one costs about 0.3 ms: scanning sooner when none is ready made 40 fewer
                 new directories for 5,000 units, and cost as much in 38 more scans).
    at reuse     it must still be empty, with no subdirectory and the mode a new one gets (a
                 unit may have made its sandbox read-only); otherwise it is left as it is, with
                 whatever was put there, and is no longer a spare.
    idle         `trim` removes the spares (only empty directories go): a unit that wrote
                 nothing leaves no directory once the partition is idle or stops.
                 `add` costs no system call: the checks are paid only by a spare reused.
What this cannot see: a process that holds an open descriptor of the directory (not its working
directory) and writes through it with openat().
All calls come from the agent's main thread (agent/runners/stager.py).
"""

from __future__ import annotations

import errno
import os
import time
from collections import deque

from pilot.agent import native

# agent/_spawn-src/take_dir.c's, or None (not built): os.stat, os.listdir and os.rename
take_dir = getattr(native.spawn, "take_dir", None)

SCAN_EVERY = 0.05
MOST = 4096  # spares kept at once; more are removed


def working_dirs_under(folder: str) -> set[str]:
    """The working directories of this host's processes that lie in `folder` (canonical
    paths; this process's own is left out: the agent works in the last unit it started)."""
    prefix = folder + os.sep
    out = set()
    me = str(os.getpid())
    for name in os.listdir("/proc"):
        if name.isdigit() and name != me:
            try:
                cwd = os.readlink(f"/proc/{name}/cwd")
            except OSError:
                continue  # gone, or not ours to read
            if cwd.startswith(prefix):
                out.add(cwd)
    return out


class SparePool:
    def __init__(self, root: str) -> None:
        self.root = root
        self.real = os.path.realpath(root)  # (/proc shows canonical paths)
        self.quarantine: deque[tuple[float, str]] = deque()
        self.ready: deque[str] = deque()
        self.last_scan = 0.0
        self.scans = 0
        self.mode: int | None = None  # the mode a new sandbox gets (learned from one)

    def add(self, sandbox: str) -> None:
        """The sandbox of a unit that ended, found empty: a spare (or removed)."""
        if len(self.quarantine) + len(self.ready) >= MOST:
            remove_empty(sandbox)
            return
        self.quarantine.append((time.monotonic(), sandbox))

    def take(self, sandbox: str) -> bool:
        """Rename a safe spare to `sandbox`; False when there is none.  FileExistsError when
        `sandbox` is there already, not empty (the spare is kept)."""
        if not self.ready:
            self._release()
        while self.ready:
            spare = self.ready.popleft()
            if take_dir is not None:  # (the same checks and rename, in one call)
                got = take_dir(spare, sandbox, -1 if self.mode is None else self.mode)
                if got == 0:
                    return True
                if got == 1:
                    remove_empty(spare)
                elif got in (-errno.EEXIST, -errno.ENOTEMPTY):
                    self.ready.appendleft(spare)
                    raise FileExistsError(sandbox)
                continue  # 2: something was put there after its unit ended; < 0: gone
            try:
                st = os.stat(spare)
                if st.st_nlink != 2 or (self.mode is not None and st.st_mode & 0o7777 != self.mode):
                    remove_empty(spare)
                elif not os.listdir(spare):
                    os.rename(spare, sandbox)
                    return True
                # else: something was put there after its unit ended; it stays as it is
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    self.ready.appendleft(spare)
                    raise FileExistsError(sandbox) from None
        return False

    def _release(self) -> None:
        now = time.monotonic()
        if not self.quarantine or now - self.last_scan < SCAN_EVERY:
            return
        self.last_scan = now
        self.scans += 1
        held = working_dirs_under(self.real)
        cut = len(self.root)
        while self.quarantine and self.quarantine[0][0] < now:
            _, spare = self.quarantine.popleft()
            real = self.real + spare[cut:]
            if real in held or any(h.startswith(real + os.sep) for h in held):
                remove_empty(spare)  # something works in it: never anyone else's
            else:
                self.ready.append(spare)

    def forget(self, spare: str) -> None:
        """`spare` is not one any more (a unit names it as its sandbox): left as it is."""
        self.quarantine = deque((t, s) for t, s in self.quarantine if s != spare)
        self.ready = deque(s for s in self.ready if s != spare)

    def trim(self) -> int:
        """Remove every spare (empty directories only); how many there were."""
        spares = [s for _, s in self.quarantine] + list(self.ready)
        for spare in spares:
            remove_empty(spare)
        self.quarantine.clear()
        self.ready.clear()
        return len(spares)


def remove_empty(path: str) -> bool:
    try:
        os.rmdir(path)  # only when empty: what anything put there stays
        return True
    except OSError:
        return False
