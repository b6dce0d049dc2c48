"""A file system whose writes block while a file says so: FUSE (fusepy over libfuse2, root).

    python -m tests.blocking_fs BACKING MOUNTPOINT HOLD

MOUNTPOINT shows BACKING (a pass-through); while the file HOLD exists (outside the mount),
every call that writes (create, mkdir, write, truncate, rename, unlink, chmod, ...) waits
until it is removed: a shared file system stuck under load, as the kernel sees one (the
caller sleeps in the syscall; SIGSTOP-free).  Reads go on.  Runs in the foreground, one
thread per request; ends when unmounted (`umount -l MOUNTPOINT`) or killed.
`unavailable()` says why it cannot run here (no /dev/fuse, no libfuse2 or fusepy, not root).
"""

from __future__ import annotations

import errno
import os
import sys
import time


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "a FUSE mount needs root here"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    try:
        import fuse  # noqa: F401 (fusepy: loads libfuse2)
    except (ImportError, OSError) as exc:
        return f"fusepy over libfuse2 is needed (apt install libfuse2; pip install fusepy): {exc}"
    return None


def serve(backing: str, mount: str, hold: str) -> None:
    from fuse import FUSE, FuseOSError, Operations

    def held() -> None:
        while os.path.exists(hold):
            time.sleep(0.02)

    class Blocking(Operations):
        def _p(self, path: str) -> str:
            return os.path.join(backing, path.lstrip("/"))

        def access(self, path, mode):
            if not os.access(self._p(path), mode):
                raise FuseOSError(errno.EACCES)

        def getattr(self, path, fh=None):
            st = os.lstat(self._p(path))
            keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink")
            return {k: getattr(st, k) for k in keys + ("st_size", "st_uid")}

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(self._p(path))]

        def readlink(self, path):
            return os.readlink(self._p(path))

        def statfs(self, path):
            st = os.statvfs(self._p(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
            return {k: getattr(st, k) for k in keys + ("f_files", "f_flag", "f_frsize")}

        def open(self, path, flags):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC):
                held()
            return os.open(self._p(path), flags)

        def create(self, path, mode, fi=None):
            held()
            return os.open(self._p(path), os.O_WRONLY | os.O_CREAT, mode)

        def read(self, path, size, offset, fh):
            return os.pread(fh, size, offset)

        def write(self, path, data, offset, fh):
            held()
            return os.pwrite(fh, data, offset)

        def truncate(self, path, length, fh=None):
            held()
            os.truncate(self._p(path), length)

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            os.close(fh)

        def fsync(self, path, datasync, fh):
            held()
            os.fsync(fh)

        def mkdir(self, path, mode):
            held()
            os.mkdir(self._p(path), mode)

        def rmdir(self, path):
            held()
            os.rmdir(self._p(path))

        def unlink(self, path):
            held()
            os.unlink(self._p(path))

        def rename(self, old, new):
            held()
            os.rename(self._p(old), self._p(new))

        def symlink(self, name, target):
            held()
            os.symlink(target, self._p(name))

        def chmod(self, path, mode):
            held()
            os.chmod(self._p(path), mode)

        def chown(self, path, uid, gid):
            held()
            os.chown(self._p(path), uid, gid)

        def utimens(self, path, times=None):
            os.utime(self._p(path), times)

    FUSE(Blocking(), mount, foreground=True, nothreads=False, allow_other=True)


if __name__ == "__main__":
    serve(*sys.argv[1:4])
