"""The node-daemon zygote: a process that has imported the node daemon's code and forks one
daemon per logical node on request (launch method `fork`, partition/launch/fork.py).

A daemon started as a fresh `python -m pilot.agent.node_daemon` costs an interpreter start and
the daemon's imports, ~0.1-0.3 s of CPU each; N logical nodes on one host pay N of them on the
same cores (256 nodes: ~70 s on a loaded 2-core machine).  Forked from here each costs a fork.
The zygote is single-threaded and creates no ZeroMQ context, so forking it is safe; each
daemon then runs `node_daemon.main(ARGV)` exactly as from its command line: its arguments, its
own context, CURVE keys and pulse channel, its log (stdout and stderr) in LOG, stdin /dev/null,
the signal dispositions a fresh process has, the zygote's process group (the bootstrap's, as a
daemon the bootstrap started itself is in).  Its parent is the zygote, so the bootstrap names
itself with `--watch-pid` rather than `--watch-parent`.

Protocol (JSON lines; bootstrap <-> zygote over the zygote's stdin / stdout):
    bootstrap -> zygote   {"hint": I, "argv": [ARG, ...], "log": PATH}   fork node I's daemon
    zygote -> bootstrap   {"started": I, "pid": PID}     its pid
                          {"exited": PID, "code": CODE}  a daemon ended (CODE < 0: signal)
                          {"error": TEXT, "hint": I}     the fork failed
The zygote exits when its stdin closes (the bootstrap is gone, or done with it); daemons still
running go on (re-parented to the bootstrap, a child subreaper, or to init) and halt when the
process they watch ends.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import sys
import traceback

from pilot.agent import node_daemon
from pilot.agent.spawn import exits


def _child(argv: list[str], log_path: str) -> None:
    """In the forked child: become the daemon, never return."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # what a fresh interpreter has
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        nul = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nul, 0)
        os.close(nul)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        sys.argv = ["-m", *argv]
        code = node_daemon.main(argv)
    except SystemExit as exc:  # (argparse): what the interpreter would make of it
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:  # report, then leave without running the zygote's cleanup
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code if isinstance(code, int) else 1)


def main() -> int:
    gc.freeze()  # what is imported stays out of the children's collections: each daemon then
    # copies ~900 pages of this process instead of ~1600, ~9 ms of CPU instead of ~18 (measured)
    out = sys.stdout
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(rfd, selectors.EVENT_READ)
    buf = b""

    def say(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    while True:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj == 0:
                data = os.read(0, 1 << 20)  # raw reads: a buffered readline could hide lines
                if not data:
                    return 0
                *lines, buf = (buf + data).split(b"\n")
                for line in lines:
                    req: dict = {}
                    try:
                        req = json.loads(line)
                        pid = os.fork()
                    except (ValueError, OSError) as exc:
                        say({"error": str(exc), "hint": req.get("hint")})
                        continue
                    if pid == 0:
                        sel.close()
                        os.close(rfd)
                        os.close(wfd)
                        _child(req["argv"], req["log"])
                    say({"started": req["hint"], "pid": pid})
            else:
                try:
                    os.read(rfd, 4096)
                except BlockingIOError:
                    pass
        for pid, code in exits():
            say({"exited": pid, "code": code})


if __name__ == "__main__":
    sys.exit(main())
