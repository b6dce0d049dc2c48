"""The node-daemon zygote: a process that has imported the node daemon's code and forks one
daemon per logical node on request (launch method `fork`, partition/launch/fork.py).

A daemon started as a fresh `python -m pilot.agent.node.daemon` costs an interpreter start and
the daemon's imports, ~0.1-0.3 s of CPU each; N logical nodes on one host pay N of them on the
same cores (256 nodes: ~70 s on a loaded 2-core machine).  Forked from here each costs a fork.
The zygote is single-threaded and creates no ZeroMQ context, so forking it is safe; each
daemon then runs `daemon.main(ARGV)` exactly as from its command line: its arguments, its
own context, CURVE keys and pulse channel, its log (stdout and stderr) in LOG, stdin /dev/null,
the signal dispositions a fresh process has, the zygote's process group (the bootstrap's, as a
daemon the bootstrap started itself is in).  Its parent is the zygote, so the bootstrap names
itself with `--watch-pid` rather than `--watch-parent`.

Protocol (JSON lines; bootstrap <-> zygote over the zygote's stdin / stdout; the loop is
agent/fork_server.py's, shared with the agent zygote):
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
import os
import signal
import sys
import traceback

from pilot.agent import fork_server
from pilot.agent.node import daemon


def _child(argv: list[str], log_path: str) -> None:
    """In the forked child: become the daemon, never return."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # what a fresh interpreter has
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fork_server.child_stdio(log_path, 0o666)
        sys.argv = ["-m", *argv]
        code = daemon.main(argv)
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
    return fork_server.serve(
        lambda req: _child(req["argv"], req["log"]),
        started_as=lambda req: req["hint"],
        error_fields=lambda line, req: {"hint": req.get("hint")},
    )


if __name__ == "__main__":
    sys.exit(main())
