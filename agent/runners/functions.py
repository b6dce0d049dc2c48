"""Function units on a single-node partition: persistent Python workers, one call at a time each.

The agent places a function unit like any unit (cores, GPUs, policies: agent/scheduler.py), then
hands it here instead of spawning a process: an idle worker gets the call
(agent/workers/function_worker.py has the protocol).  Workers are started when needed, at most one
per core of the partition (a unit holds at least one core, so an idle worker is always there or may
be started), and live as long as the agent; they work in PILOT_SANDBOX/<partition>.functions, and
what they write outside a call goes to PILOT_SANDBOX/<partition>.functions.log.

A worker that dies (killed, os._exit, a crash in C code) is replaced by the next call that needs
one; the unit it was running ends FAILED, naming the worker and how it died, or CANCELED when it
was killed for a cancel or a stop.  A call's end arrives as a reply on the worker's socket; the
runner reports it from `reap()` like a process exit: code 0 and its value, or code 1 and the
exception (Run.fail_reason), with what it printed.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import sys
import time

from pilot import processes
from pilot.agent.runners.base import Run
from pilot.agent.workers.function_worker import MALLOC_TUNABLES, OUTPUT_MAX, PATH_VAR
from pilot.functions import DATA_TOKEN, VALUE_MAX
from pilot.sandbox import functions_dir

_HEAD = struct.Struct(">I")
# the longest reply: a value (base64), its output (up to 4 bytes a character) and the rest
FRAME_MAX = 4 * VALUE_MAX // 3 + 4 * 2 * OUTPUT_MAX + 65536


class Worker:
    __slots__ = ("pid", "sock", "buf", "run", "cpus", "base", "mine", "told")

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self.sock, self.buf = pid, sock, bytearray()
        self.run: Run | None = None  # the call it runs now
        self.cpus: list | None = None  # the cores its last call was bound to (None: all)
        self.base: dict | None = None  # the environment its calls share (the object sent)
        self.mine: dict = {}  # its last call's own variables, as set
        self.told: object = _UNTOLD  # the data directory it was told of (FunctionWorkers.data)


_UNTOLD = object()


def seen_data_dir(data: dict | None) -> tuple[str, bool] | None:
    """The client's data directory when this agent sees it: its token file there holds the
    token the client gave ({dir, token}, the pilot's config); else None (large pickles then
    cross the pilot's hops as bytes)."""
    if not isinstance(data, dict):
        return None
    path, token = data.get("dir"), data.get("token")
    if type(path) is not str or type(token) is not str or not os.path.isabs(path):
        return None
    try:
        with open(os.path.join(path, DATA_TOKEN)) as f:
            seen = f.read().strip() == token and os.access(path, os.W_OK)
    except OSError:  # (another host's directory, not shared here)
        return None
    return (path, data.get("sync") is not False) if seen else None


class FunctionWorkers:
    def __init__(
        self,
        spawner,
        root: str,
        partition: str,
        most: int,
        path=(),
        data: tuple[str, bool] | None = None,
    ) -> None:
        self.spawner = spawner
        self.env = dict(spawner.base_env)  # theirs: the client's own module directories too
        if path:
            self.env[PATH_VAR] = os.pathsep.join(path)
        # large arguments and values by reference (pilot/functions.py): the client's data
        # directory and whether a value file must be on the disk before its name goes (None:
        # the bytes); told to each worker with its first call and when it changes (`set_data`)
        self.data = data
        # glibc gives back to the system, and maps anew, every chunk over its (moving)
        # thresholds: a call of megabytes paid a page fault a page for each copy (measured:
        # 2 MB unpickled and pickled again 3.6 -> 1.4 ms).  A worker keeps up to 16 MiB of
        # what it freed instead; larger chunks are still mapped (a user's own setting stands)
        self.env.setdefault("GLIBC_TUNABLES", MALLOC_TUNABLES)
        self.workdir = functions_dir(root, partition)
        self.log_path = self.workdir + ".log"
        self.most = max(1, most)
        self.poller = None
        self.watch_child = lambda pid: None  # (the runner's: its exit wakes the agent)
        self.workers: dict[int, Worker] = {}  # pid -> worker
        self.by_fd: dict[int, Worker] = {}
        self.done: list[tuple[Run, int]] = []
        self.started = 0

    # -- workers --------------------------------------------------------------------------------
    def _start(self) -> Worker:
        os.makedirs(self.workdir, exist_ok=True)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        ok = False
        try:
            fd = theirs.fileno()
            actions = [
                (os.POSIX_SPAWN_DUP2, self.spawner.devnull, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
                (os.POSIX_SPAWN_DUP2, fd, 3),
            ]
            argv = [sys.executable, "-m", processes.FUNCTION_WORKER, "3"]
            os.chdir(self.workdir)
            pid = os.posix_spawn(
                sys.executable,
                argv,
                self.env,
                file_actions=actions,
                setpgroup=0,
                setsigdef=(signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD),
                setsigmask=(),
            )
            ok = True
        finally:
            os.close(log)
            theirs.close()
            if not ok:
                mine.close()
        self.watch_child(pid)
        mine.setblocking(False)
        w = Worker(pid, mine)
        self.workers[pid] = w
        self.by_fd[mine.fileno()] = w
        if self.poller is not None:
            self.poller.register(mine.fileno(), 1)  # zmq.POLLIN
        self.started += 1
        return w

    def _drop(self, w: Worker) -> None:
        self.workers.pop(w.pid, None)
        self._drop_socket_only(w)
        w.sock.close()

    # -- calls ----------------------------------------------------------------------------------
    def call(self, run: Run, base: dict, mine: dict, own: list, cpus: list | None) -> None:
        """Hand `run`'s call to an idle worker (started if none is idle); OSError if none can
        take it.  The call's environment is `base` (the same object for the calls of a node:
        sent to a worker once) and `mine` (its unit's: what differs from the worker's last
        call is sent); `own` are the unit's own names, taken out after the call."""
        idle = [w for w in self.workers.values() if w.run is None]
        # one bound to these cores already, if any: a worker that moves migrates (measured)
        w = next((w for w in idle if w.cpus == cpus), idle[0] if idle else None)
        if w is None:
            if len(self.workers) >= self.most:
                raise OSError(f"all {self.most} function workers are busy")
            w = self._start()
        had = w.mine  # (what differs from its last call goes: a unit's ids, mostly)
        msg = {"uid": run.unit["uid"], "call": run.unit["function"]}
        delta = {k: v for k, v in mine.items() if had.get(k) != v}
        if w.base is not base:
            delta = {**base, **delta}
            w.base = base
        if delta:
            msg["env"] = delta
        gone = [k for k in had if k not in mine and k not in base]
        if gone:
            msg["unset"] = gone
        if own:
            msg["own"] = own
        if cpus:
            msg["cpus"] = cpus
        if w.told != self.data:
            msg["data"] = list(self.data) if self.data else None
            w.told = self.data
        w.mine = {k: v for k, v in mine.items() if k not in own} if own else mine
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        head = _HEAD.pack(len(data))
        try:  # (gathered: a call's large arguments are not copied to join them)
            sent = w.sock.sendmsg([head, data])  # an idle worker takes a call at once, mostly
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._refused(w, exc)
        if sent < 4 + len(data):  # the rest, bounded so a hang is seen
            w.sock.setblocking(True)
            w.sock.settimeout(30.0)
            try:
                if sent < 4:
                    w.sock.sendall(head[sent:])
                w.sock.sendall(memoryview(data)[max(0, sent - 4) :])
            except OSError as exc:
                self._refused(w, exc)
            finally:
                if w.sock.fileno() >= 0:
                    w.sock.setblocking(False)
        w.cpus = cpus or None
        w.run = run
        run.pids.append(w.pid)

    def _refused(self, w: Worker, exc: OSError) -> None:
        processes.signal_group(w.pid, signal.SIGKILL)
        self._drop(w)
        raise OSError(f"function worker {w.pid} did not take the call: {exc}") from None

    def on_readable(self, fd: int) -> bool:
        """Read what a worker sent; False when `fd` is not a worker's."""
        w = self.by_fd.get(fd)
        if w is None:
            return False
        while True:
            try:
                data = w.sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:  # it closed its end: it is dying; its exit says how
                self._drop_socket_only(w)
                break
            w.buf += data
        self._replies(w)
        return True

    def _drop_socket_only(self, w: Worker) -> None:
        fd = w.sock.fileno()
        self.by_fd.pop(fd, None)
        if self.poller is not None:
            try:
                self.poller.unregister(fd)
            except KeyError:
                pass

    def _replies(self, w: Worker) -> None:
        while len(w.buf) >= 4:
            n = _HEAD.unpack_from(w.buf)[0]
            if n > FRAME_MAX:  # not a reply: the worker's socket carries something else
                self._broken(w, f"a {n}-byte frame")
                return
            if len(w.buf) < 4 + n:
                return
            with memoryview(w.buf) as view:  # (one copy of a large reply, not three)
                body = bytes(view[4 : 4 + n])
            del w.buf[: 4 + n]
            run = w.run
            if run is None:
                continue  # (a reply for a unit already ended: its worker was killed meanwhile)
            try:
                reply = pickle.loads(body)
            except Exception:  # (a worker's pickle that does not load: not a reply)
                reply = None
            if not isinstance(reply, dict) or reply.get("uid") != run.unit["uid"]:
                self._broken(w, "a reply that is not for its call")
                return
            w.run = None
            extra: dict[str, object] = {}
            for key in ("stdout", "stderr"):  # (left out when empty)
                if reply.get(key):
                    extra[key] = str(reply[key])
            run.codes[w.pid] = 0 if reply.get("ok") else 1
            if reply.get("ok"):
                extra["value"] = reply.get("value")
            else:
                extra["exception"] = str(reply.get("exception"))
                if run.cancel_reason is None:  # (a canceled call may raise on its SIGTERM)
                    run.fail_reason = f"exception: {reply.get('exception')}"
            run.extra = extra
            self.done.append((run, run.codes[w.pid]))

    def _broken(self, w: Worker, what: str) -> None:
        """The worker's socket carried what no worker sends: it is killed, its unit FAILED."""
        processes.signal_group(w.pid, signal.SIGKILL)
        w.buf.clear()
        run = w.run
        if run is not None and run.cancel_reason is None:
            run.fail_reason = f"its function worker (pid {w.pid}) sent {what}; it was killed"
        self._drop_socket_only(w)  # its exit reports the unit

    def on_exit(self, pid: int, code: int) -> bool:
        """A child ended; False when it is not a worker."""
        w = self.workers.get(pid)
        if w is None:
            return False
        if w.sock.fileno() >= 0:
            self.on_readable(w.sock.fileno())  # a reply it sent before it died counts
        self._drop(w)
        run = w.run
        if run is not None:
            how = f"exit code {code}" if code >= 0 else f"signal {processes.signal_name(-code)}"
            run.codes[pid] = code
            if run.cancel_reason is None and run.fail_reason is None:
                run.fail_reason = f"its function worker (pid {pid}) died: {how}"
            run.extra = {"stdout": "", "stderr": ""}
            self.done.append((run, code))
        return True

    def take_done(self) -> list[tuple[Run, int]]:
        done, self.done = self.done, []
        return done

    def busy(self) -> list[Run]:
        return [w.run for w in self.workers.values() if w.run is not None]

    def has_exited(self, run: Run) -> bool:
        return bool(run.codes) or any(r is run for r, _ in self.done)

    def kill(self, run: Run, sig: int) -> None:
        for w in self.workers.values():
            if w.run is run:
                processes.signal_group(w.pid, sig)

    def close(self, grace: float = 2.0) -> None:
        """Workers end at end-of-file; each gets SIGTERM too and is reaped (bounded)."""
        pids = list(self.workers)
        for w in list(self.workers.values()):
            self._drop(w)
            processes.signal_group(w.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            for pid in list(pids):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        pids.remove(pid)
                except ChildProcessError:
                    pids.remove(pid)
            if pids:
                time.sleep(0.01)
        for pid in pids:
            processes.signal_group(pid, signal.SIGKILL)
