"""A function worker: one persistent Python process of a partition that runs function units, one
call at a time (started by agent/runners/functions.py:
`python -m pilot.agent.workers.function_worker 3`).

Protocol, over the stream socket it inherits as fd 3 (one end of a socketpair whose other end
only its agent holds: no address exists that anyone else could reach, so there is nothing to
authenticate, and both ends are ours: messages are pickles, ~5x cheaper than JSON here).
Every message is a 4-byte big-endian length and that many bytes of a pickled dict.
    agent -> worker  {uid, call: the packed call (pilot/functions.py: the function or its dotted
                      name, and args, kwargs; large args may be the name of a file of the
                      client's data directory),
                      env: {name: value} that changed since its last call, unset: [names to
                      take out first], own: [the unit's own names in env],
                      cpus: [core ids] | None,
                      data: [directory, sync] | None: the client's data directory, with the
                      first call and when it changes (large pickles by reference, below)}
    worker -> agent  {uid, ok: True,  value: cloudpickle of the return value (pilot/functions.py
                      `wrap`: base64, or bytes from LARGE on; from LARGE on, when its agent
                      sees the client's data directory (`data`), the name of the file
                      it wrote there, VALUE_REF + NAME: the bytes never cross the pilot; on
                      the disk first when `sync`), stdout, stderr}
                     {uid, ok: False, exception: "Type: message", stderr: ... + traceback,
                      stdout}
(stdout, stderr: left out when empty.)  A worker keeps the environment of its last call: the
agent sends what differs (a unit's ids, mostly), and a function's pickle unpickled once (the
last FN_KEPT functions, by their pickle).
The socket is moved off fd 3 at start (to a close-on-exec descriptor above 63), so a call that
writes to fd 3 or starts programs reaches nothing of the worker's.  A child the call forks ends
when the call returns in it: only the worker itself answers.
The worker finds modules where the client does: the client's own directories (its script's,
its PYTHONPATH's: pilot/functions.py `client_path`) come after its own first entry, from
PILOT_FUNCTION_PATH, which it removes from its environment.
A call runs with `env` in os.environ (the unit's ids, PILOT_* and RP_* names; the unit's own
variables, `own`, are taken out afterwards; set through agent/workers/worker_env.py, which reuses a
buffer per name: os.environ's setenv kept a copy of every value, ~440 bytes a call), bound
to `cpus`, and with sys.stdout / sys.stderr captured (OUTPUT_MAX characters each are kept and
sent back).  Only writes through sys.stdout / sys.stderr during the call are captured: a
subprocess's output, a logging handler made earlier or a thread writing after the call goes to
the workers' log file.  The worker exits at
end-of-file (its agent is gone or closed it) or when it is killed (a canceled unit, a stopped
partition).
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import traceback

OUTPUT_MAX = 65536
_HEAD = struct.Struct(">I")
PATH_VAR = "PILOT_FUNCTION_PATH"  # (pilot/functions.py's client_path, set by its runner)
# glibc's malloc for a worker (its runner sets it: agent/runners/functions.py says why)
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=16777216:glibc.malloc.trim_threshold=16777216"


def _read_exact(f, n: int) -> bytes | None:
    data = f.read(n)
    return data if len(data) == n else None


class _Capture(io.TextIOBase):
    """sys.stdout / sys.stderr during a call: the first OUTPUT_MAX characters and the last
    OUTPUT_MAX // 2 (a traceback ends stderr), never more in memory."""

    def __init__(self) -> None:
        self.head: list[str] = []
        self.size = 0
        self.tail = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.size < OUTPUT_MAX:
            self.head.append(text[: OUTPUT_MAX - self.size])
        else:
            self.tail = (self.tail + text)[-(OUTPUT_MAX // 2) :]
        self.size += len(text)
        return len(text)

    def getvalue(self) -> str:
        head = "".join(self.head)
        return head + ("\n[...]\n" + self.tail if self.tail else "")


def run_call(msg: dict, state: dict) -> dict:
    from pilot.functions import (
        LARGE,
        VALUE_MAX,
        VALUE_REF,
        dumps,
        put_data,
        resolve,
        unpack_call,
        wrap,
    )

    uid = msg.get("uid")
    env = msg.get("env") or {}
    own = msg.get("own") or ()  # the unit's own variables: taken out afterwards
    environ = state["environ"]
    for k in msg.get("unset") or ():
        environ.unset(k)
    environ.update(env)  # (agent/workers/worker_env.py: os.environ's setenv kept every value)
    cpus = msg.get("cpus")
    mask = set(cpus) if cpus else state["all"]
    if mask != state["mask"]:
        os.sched_setaffinity(0, mask)
        state["mask"] = mask
    out, err = _Capture(), _Capture()
    sys.stdout, sys.stderr = out, err
    if "data" in msg:  # (its agent's word on the client's data directory, when it changes)
        told = msg["data"]
        ok = isinstance(told, list) and len(told) == 2 and isinstance(told[0], str)
        state["data"], state["sync"] = (told[0], bool(told[1])) if ok else (None, False)
    try:
        data = state.get("data")
        f, args, kwargs = unpack_call(msg["call"], state["fns"], data)
        if isinstance(f, str):
            f = resolve(f)
        value = f(*args, **kwargs)
        try:
            blob = dumps(value)
        except Exception as exc:
            raise TypeError(f"the return value cannot be pickled: {exc}") from None
        if len(blob) > VALUE_MAX:
            raise ValueError(
                f"the return value pickles to {len(blob)} bytes, more than {VALUE_MAX} "
                "(write it to a file and return its path)"
            )
        sent: str | bytes | None = None
        if data is not None and len(blob) >= LARGE:  # by reference: only its name goes back
            try:
                sent = VALUE_REF + put_data(data, blob, state.get("sync", False))
            except OSError:  # (the directory took no file: the bytes go back instead)
                sent = None
        reply = {"uid": uid, "ok": True, "value": sent if sent is not None else wrap(blob)}
    except BaseException as exc:  # SystemExit and KeyboardInterrupt in user code end the unit
        err.write(traceback.format_exc())
        reply = {"uid": uid, "ok": False, "exception": f"{type(exc).__name__}: {exc}"[:4096]}
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        for k in own:
            environ.unset(k)
    if out.size:
        reply["stdout"] = out.getvalue()[:OUTPUT_MAX]
    if err.size:
        text = err.getvalue()
        reply["stderr"] = (
            text if len(text) <= OUTPUT_MAX else text[: OUTPUT_MAX // 2] + text[-OUTPUT_MAX // 2 :]
        )
    return reply


def _write_all(fd: int, head: bytes, data: bytes) -> None:
    """head and data, whole (gathered: a large reply is not copied to join them)."""
    views = [memoryview(head), memoryview(data)]
    while views:
        n = os.writev(fd, views)
        while views and n >= len(views[0]):
            n -= len(views.pop(0))
        if views and n:
            views[0] = views[0][n:]


def main(argv: list[str]) -> int:
    import fcntl

    inherited = int(argv[0]) if argv else 3
    # the client's own module directories (its script's, PYTHONPATH's): a function of a
    # module there is found as in the client; the calls do not see the variable
    own = os.environ.pop(PATH_VAR, "")
    sys.path[1:1] = [p for p in own.split(os.pathsep) if p and p not in sys.path]
    if os.environ.get("GLIBC_TUNABLES") == MALLOC_TUNABLES:  # (its runner's, for this
        del os.environ["GLIBC_TUNABLES"]  # process: not the calls' nor what they start)
        from pilot import malloc

        malloc.set_by_environment()  # (set at its start: no mallopt again, pilot/malloc.py)
    fd = fcntl.fcntl(inherited, fcntl.F_DUPFD_CLOEXEC, 64)  # out of the way of user code
    os.close(inherited)
    rfile = os.fdopen(fd, "rb", buffering=1 << 16, closefd=False)
    allowed = os.sched_getaffinity(0)
    from pilot.agent.workers.worker_env import WorkerEnviron

    state = {
        "environ": WorkerEnviron(),
        "all": allowed,
        "mask": allowed,
        "pid": os.getpid(),
        "fns": {},  # a function's pickle -> the function (pilot/functions.py unpack_call)
        "data": None,  # the client's data directory, when its agent sees it (a call says)
        "sync": False,  # a value file on the disk before its name goes
    }
    while True:
        head = _read_exact(rfile, 4)
        if head is None:
            return 0  # end-of-file: the agent is gone
        body = _read_exact(rfile, _HEAD.unpack(head)[0])
        if body is None:
            return 0
        try:
            msg = pickle.loads(body)
            if not isinstance(msg, dict):
                raise TypeError(f"a {type(msg).__name__}, not a dict")
            reply = run_call(msg, state)
        except Exception as exc:  # a message that is not a call: say so, go on
            reply = {"uid": None, "ok": False, "exception": f"bad call message: {exc!r}"[:4096]}
        if os.getpid() != state["pid"]:
            os._exit(0)
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        _write_all(fd, _HEAD.pack(len(data)), data)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
