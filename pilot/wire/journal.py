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
not used.  The resource key `journal_sync` chooses: `auto` (sync where the pilot sandbox's file
system is one of SHARED_FS, read from /proc/self/mountinfo), `always` or `never`.  The reader's
fresh open is NFS's close-to-open revalidation: it sees what was synced.
"""

from __future__ import annotations

import os

SYNC_CHOICES = ("auto", "always", "never")

# file systems whose writes another host reads (a client's page cache between them)
SHARED_FS = frozenset(
    "nfs nfs4 lustre gpfs beegfs cifs smb3 smbfs ceph fuse.ceph glusterfs fuse.glusterfs panfs "
    "wekafs gfs2 ocfs2 orangefs pvfs2 afs fuse.sshfs 9p virtiofs".split()
)


def journal_path(pilot_sandbox: str, part_uid: str) -> str:
    """Where the agent of `part_uid` records the units it starts (one uid a line)."""
    return f"{pilot_sandbox}/{part_uid}.started"


def fs_type(path: str, mountinfo: str | None = None) -> str | None:
    """The type of the file system `path` (or the directory it would be made in) is on, from
    `mountinfo` (the text of /proc/self/mountinfo by default); None when it cannot be told."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo") as f:
                mountinfo = f.read()
        except OSError:
            return None
    where = os.path.realpath(path)
    best, found = -1, None
    for line in mountinfo.splitlines():
        fields = line.split()
        try:  # id parent major:minor root MOUNT options [optional...] - TYPE source super
            mount = _unescape(fields[4])
            kind = fields[fields.index("-", 6) + 1]
        except (IndexError, ValueError):
            continue
        inside = where == mount or where.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= best:  # (the last of equal ones: mounted over the others)
            best, found = len(mount), kind
    return found


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
        self.sync = sync == "always" or (sync == "auto" and self.fs in SHARED_FS)
        self.torn = False

    def describe(self) -> str:
        how = "synced after each write" if self.sync else "not synced (a local disk)"
        return f"start journal {self.path} on {self.fs or 'an unknown file system'}: {how}"

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
