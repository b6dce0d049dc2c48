"""A unit's stdout and stderr, through pipes into files made only when the unit writes.

Making a file costs an inode; on the disks measured here one costs 100-700 us of kernel time,
as much as starting /bin/true.  So a unit does not get its output files up front: its ranks
write into two pipes (shared by its ranks) whose read ends the agent polls, and the agent makes
the file in the unit's sandbox at the first byte that arrives.  A unit that writes nothing has
no STDOUT / STDERR file; `unit.stdout` reads "" either way.

Protocol, all on the agent's loop:
    open(sandbox, names)   -> Streams: the two write ends go to the spawn, closed after it
    on_readable(fd)        copy what the pipe holds into its file (made on first data)
    finish(streams)        the unit ended: copy what is left; True when both pipes reached
                           end-of-file (no process of the unit holds them any more).  A pipe
                           still held by something the unit left running stays polled and
                           its data keeps going to the file until end-of-file.
    streams.made           whether a file was made
    streams.lost           what could not be written (a full disk: the file, the error, the
                           bytes lost), or None; the pipe is read on regardless, and logged
    sweep()                look at the quiet pipes (below) without waiting; every SWEEP_EVERY
    make_files(streams)    make the files that were not made (empty): a unit whose staging
                           directives name them
Quiet pipes: the pipes of a unit started by a lane (agent/runners/lanes.py) are not
polled at first.  Most such units write nothing, and a polled pipe woke the agent at each one's
exit (end-of-file) only to be unregistered: two registrations, two wake-ups and a read per unit
for nothing.  `sweep()` reads them every SWEEP_EVERY seconds instead: a pipe found holding data
is polled from then on; the unit's end reads the rest (`finish`).  A unit that fills its pipe
(64 KB) before the first sweep waits for it once, at most SWEEP_EVERY.
A file is written by the agent alone (no O_APPEND needed); a rank's write into the pipe is
atomic up to PIPE_BUF bytes, as it was into an O_APPEND file.  stdout and stderr named the same
file share one pipe.  At most LINGER_MAX ended units' pipes stay open for what they left
running; beyond that the oldest is closed (what its process writes later is lost).
"""

from __future__ import annotations

import logging
import os
from collections import deque

log = logging.getLogger("agent")
_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_MADE = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC  # (make_files: never truncates what is there)
CHUNK = 1 << 16
LINGER_MAX = 64
SWEEP_EVERY = 0.02


class Stream:
    __slots__ = ("fd", "where", "name", "out", "polled", "lost")

    def __init__(self, fd: int, where: str, name: str) -> None:
        self.fd, self.where, self.name, self.out = fd, where, name, -1
        self.polled = False
        self.lost: list | None = None  # [what failed first, bytes lost]: a full disk

    @property
    def path(self) -> str:  # (asked only when its file is made: most units make none)
        return os.path.join(self.where, self.name)


class Streams:
    __slots__ = ("pair", "write_ends", "made")

    def __init__(self, pair: tuple, write_ends: tuple[int, ...]) -> None:
        self.pair = pair
        self.write_ends = write_ends
        self.made = False

    @property
    def lost(self) -> str | None:
        """What of the unit's output could not be written, and why (a full disk), or None."""
        said = [f"{s.lost[0]} ({s.lost[1]} bytes lost)" for s in self.pair if s.lost]
        return "; ".join(said) or None


class StreamSet:
    """Every unit's output pipes in one agent; `poller` is the agent's zmq.Poller."""

    def __init__(self, poller=None) -> None:
        self.poller = poller
        self.by_fd: dict[int, Stream] = {}
        self.owner: dict[int, Streams] = {}
        self.lingering: deque[Streams] = deque()  # ended units' pipes something still holds
        self.quiet: dict[int, Stream] = {}  # pipes read by `sweep` only

    def open(self, sandbox: str, names: tuple[str, str]) -> Streams:
        pair, ends = [], []
        try:
            for name in dict.fromkeys(names):  # one pipe when both name the same file
                r, w = os.pipe2(os.O_CLOEXEC)
                ends.append(w)
                os.set_blocking(r, False)
                pair.append(Stream(r, sandbox, name))
        except OSError:
            for fd in ends + [s.fd for s in pair]:
                os.close(fd)
            raise
        return self._watch(Streams(tuple(pair), (ends[0], ends[-1])))

    def adopt(self, sandbox: str, names: tuple[str, str], read_ends: tuple[int, int]) -> Streams:
        """Streams of pipes made elsewhere (agent/runners/lanes.py: by the lane thread, which
        has closed its write ends): their non-blocking read ends, the same one twice when both
        names are one file.  They are quiet: `sweep` reads them until one holds data."""
        out, err = read_ends
        if out == err:
            pair: tuple = (Stream(out, sandbox, names[0]),)
        else:
            pair = (Stream(out, sandbox, names[0]), Stream(err, sandbox, names[1]))
        return self._watch(Streams(pair, ()), quiet=True)

    def _watch(self, streams: Streams, quiet: bool = False) -> Streams:
        for s in streams.pair:
            self.by_fd[s.fd] = s
            self.owner[s.fd] = streams
            if quiet:
                self.quiet[s.fd] = s
            else:
                self._poll(s)
        return streams

    def _poll(self, s: Stream) -> None:
        self.quiet.pop(s.fd, None)
        if self.poller is not None and not s.polled:
            self.poller.register(s.fd, 1)  # zmq.POLLIN
            s.polled = True

    def sweep(self) -> None:
        for s in list(self.quiet.values()):
            self._copy(s)  # (data: polled from now on; end-of-file: closed)

    @staticmethod
    def spawned(streams: Streams) -> None:
        """The ranks have their copies of the write ends: the agent's go."""
        for w in set(streams.write_ends):
            os.close(w)
        streams.write_ends = ()

    def on_readable(self, fd: int) -> None:
        s = self.by_fd.get(fd)
        if s is not None:
            self._copy(s)

    def finish(self, streams: Streams) -> bool:
        if streams.write_ends:
            self.spawned(streams)
        done = True
        for s in streams.pair:
            if s.fd >= 0:
                self._copy(s)
            done = done and s.fd < 0
        if not done:
            for s in streams.pair:
                if s.fd >= 0:
                    self._poll(s)  # what it left running may write on
            self.lingering.append(streams)
            while len(self.lingering) > LINGER_MAX:
                for s in self.lingering.popleft().pair:
                    if s.fd >= 0:
                        self._copy(s)
                        if s.fd >= 0:
                            self._end(s)
        return done

    def make_files(self, streams: Streams) -> None:
        for s in streams.pair:
            if s.out < 0 and s.fd < 0:
                try:
                    os.close(os.open(s.path, _MADE, 0o666))
                    streams.made = True
                except OSError:
                    pass

    def close(self) -> None:
        for s in list(self.by_fd.values()):
            self._copy(s)
            if s.fd >= 0:
                self._end(s)

    def _copy(self, s: Stream) -> None:
        """Move what the pipe holds now into the file; at end-of-file, close both."""
        while True:
            try:
                data = os.read(s.fd, CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._end(s)
                return
            if s.out < 0:
                if not s.polled:
                    self._poll(s)  # it writes: its pipe is polled from now on
                try:
                    s.out = os.open(s.path, _FILE, 0o666)  # the umask decides
                    self.owner[s.fd].made = True
                except OSError as exc:
                    self._lost(s, f"making {s.path}", exc, 0)
                    s.out = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(s.out, view) :]
                except OSError as exc:  # a full disk: what does not fit is counted, and named
                    self._lost(s, f"writing {s.path}", exc, len(view))
                    break  # (the pipe is still read: the unit never blocks on it)

    def _lost(self, s: Stream, what: str, exc: OSError, n: int) -> None:
        if s.lost is None:
            s.lost = [f"{what}: {exc.strerror or exc}", 0]
            log.error("%s failed: %s", what, exc.strerror or exc)
        s.lost[1] += n

    def _end(self, s: Stream) -> None:
        if s.polled:
            self.poller.unregister(s.fd)
            s.polled = False
        else:
            self.quiet.pop(s.fd, None)
        self.by_fd.pop(s.fd, None)
        self.owner.pop(s.fd, None)
        os.close(s.fd)
        if s.out >= 0:
            os.close(s.out)
        s.fd = s.out = -1
