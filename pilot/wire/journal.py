"""The start journal: what an agent has started, for the bootstrap to read once the agent is gone.

Protocol (agent -> bootstrap, through the pilot sandbox, never over a socket): before an agent
starts units it appends their uids, one a line, to PILOT_SANDBOX/<partition uid>.started, in one
write (the agent's loop, or a lane's thread for what it starts on its own: agent/runners/lanes.py).
When the agent dies, or a client asks about its units after (`sync`), the bootstrap opens the
file anew and reads it (partition/agents/channel.py, partition/control.py): a unit in it may have
run and is never started again (FAILED "outcome unknown" unless restartable); one not in it never
ran and goes elsewhere.  So a line must be where the bootstrap reads it before its unit can start.

On this host's own disk a write the kernel has taken is what every later reader sees, whatever
happens to the agent's process: nothing more is needed.  On a shared file system (NFS, Lustre,
GPFS, ...: the agent on a compute node, the bootstrap on another) the write may wait in the
agent's node's page cache; if that node crashes, the line never reaches the server, and a unit
that had started there, and perhaps written its outputs, would be taken for one that never ran
and run again.  There the agent syncs (fdatasync) each write before it starts its units: one a
batch of up to 32 units, not one a unit, and the agent's lanes, which write on their own, are
not used.  The resource key `journal_sync` chooses: `auto` (sync unless the journal's file system,
read from /proc/self/mountinfo, is one of LOCAL_FS: every shared one, NFS, Lustre, GPFS, Cray's
DVS, ceph-fuse, BeeGFS ..., and one that cannot be told, is synced), `always` or `never`.  The
reader's fresh open is NFS's close-to-open revalidation: it sees what was synced.
"""

from __future__ import annotations

import os

SYNC_CHOICES = ("auto", "always", "never")

# file systems that are this host's own: a write the kernel has taken is what every reader
# sees, whatever becomes of the writer's process (any other type, or one not told: synced)
LOCAL_FS = frozenset(
    "ext2 ext3 ext4 xfs btrfs zfs f2fs jfs reiserfs bcachefs nilfs2 tmpfs ramfs overlay "
    "vfat exfat hfsplus apfs".split()
)


def journal_path(pilot_sandbox: str, part_uid: str) -> str:
    """Where the agent of `part_uid` records the units it starts (one uid a line)."""
    return f"{pilot_sandbox}/{part_uid}.started"


def fs_type(path: str, mountinfo: str | None = None, device: str | None = None) -> str | None:
    """The type of the file system `path` (or the directory it would be made in) is on, from
    /proc/self/mountinfo; None when it cannot be told.  The mount of the nearest existing
    directory's device (st_dev: what is mounted there now, however the mounts were stacked),
    else the longest mount point that holds the path.  (`mountinfo` and `device`, "major:minor",
    given instead: what a test says.)"""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo") as f:
                mountinfo = f.read()
        except OSError:
            return None
        device = _device_of(path)
    where = os.path.realpath(path)
    best, found, by_device = -1, None, None
    for line in mountinfo.splitlines():
        fields = line.split()
        try:  # id parent major:minor root MOUNT options [optional...] - TYPE source super
            mount = _unescape(fields[4])
            kind = fields[fields.index("-", 6) + 1]
        except (IndexError, ValueError):
            continue
        inside = where == mount or where.startswith(mount.rstrip("/") + "/")
        if inside and fields[2] == device:
            by_device = kind  # (the last one: mounted over the others)
        if inside and len(mount) >= best:  # (the last of equal ones: mounted over the others)
            best, found = len(mount), kind
    return by_device or found


def _device_of(path: str) -> str | None:
    """ "major:minor" of the nearest existing directory of `path`, as mountinfo writes it."""
    probe = os.path.realpath(path)
    while True:
        try:
            st = os.stat(probe)
            return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        except OSError:
            if probe == os.path.dirname(probe):
                return None
            probe = os.path.dirname(probe)


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are octal escapes there."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


class StartJournal:
    """The agent's side: `append(uids)` returns once they are where the bootstrap reads them."""

    def __init__(self, pilot_sandbox: str, part_uid: str, sync: str = "auto") -> None:
        if sync not in SYNC_CHOICES:
            raise ValueError(f"journal_sync={sync!r} must be one of {SYNC_CHOICES}")
        self.path = journal_path(pilot_sandbox, part_uid)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.fs = fs_type(self.path)
        if sync != "auto":
            self.why = sync
        elif self.fs in LOCAL_FS:
            self.why = "auto, a local file system"
        else:
            self.why = "auto, a file system another host may read"
        self.sync = sync == "always" or (sync == "auto" and self.fs not in LOCAL_FS)
        self.torn = False

    def describe(self) -> str:
        how = "synced after each write" if self.sync else "not synced"
        fs = self.fs or "a file system not told"
        return f"start journal {self.path} on {fs}: {how} (journal_sync: {self.why})"

    def append(self, uids: list[str]) -> None:
        """Journal `uids`, in one write (OSError: not journaled, or not surely)."""
        data = "".join([f"{u}\n" for u in uids]).encode()
        if self.torn:  # (a write that failed part way left a line without its end: ended
            data = b"\n" + data  # here, so that it does not run into the next uid)
        self.torn = True
        while data:  # (a regular file takes it all at once; a short write is written on)
            data = data[os.write(self.fd, data) :]
        self.torn = False
        if self.sync:
            os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
