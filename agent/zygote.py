"""The agent zygote: a process that has imported the agent's code and forks agents on request.

Starting an agent as a fresh `python -m pilot.agent` costs ~200 ms (interpreter and imports);
forking it from a process that has already imported everything costs a few ms, which is what
keeps a reconfig under 100 ms.  The zygote is single-threaded and creates no ZeroMQ context, so
forking it is safe; each forked agent creates its own context.

Protocol (JSON lines; bootstrap <-> zygote over the zygote's stdin / stdout):
    bootstrap -> zygote   {"cfg": PATH, "log": PATH, "body": TEXT}
                                                          fork an agent for that config; the
                                                          child writes `body` (JSON) to PATH
                                                          first, so the bootstrap's loop never
                                                          waits on the sandbox's file system
    zygote -> bootstrap   {"started": PATH, "pid": PID}   the agent's pid
                          {"exited": PID, "code": CODE}   an agent ended (CODE < 0: signal)
                          {"error": TEXT, "cfg": PATH}    the fork failed
The zygote exits when its stdin closes (the bootstrap is gone); agents notice that their parent
changed and tear down.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import sys

import pilot.agent.agent as agent_main
from pilot import plugins
from pilot.agent.spawn import exits

for _where in plugins.RUNNERS.values():  # what every agent loads, loaded once here
    importlib.import_module(_where.partition(":")[0])


def _child(cfg_path: str, log_path: str, body: str | None = None) -> None:
    """In the forked child: write its config (`body`, if given), become the agent, never
    return."""
    code = 1
    try:
        if body is not None:
            fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(body)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        nul = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nul, 0)
        os.close(nul)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        code = agent_main.main([cfg_path])
    except BaseException as exc:  # report, then leave without running the zygote's cleanup
        print(f"agent failed: {exc!r}", file=sys.stderr)
    finally:
        os._exit(code if isinstance(code, int) else 1)


def main() -> int:
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
                data = os.read(0, 65536)  # raw reads: a buffered readline could hide lines
                if not data:
                    return 0
                *lines, buf = (buf + data).split(b"\n")
                for line in lines:
                    try:
                        req = json.loads(line)
                        pid = os.fork()
                    except (ValueError, OSError) as exc:
                        say({"error": str(exc), "cfg": line.decode(errors="replace")})
                        continue
                    if pid == 0:
                        sel.close()
                        os.close(rfd)
                        os.close(wfd)
                        _child(req["cfg"], req["log"], req.get("body"))
                    say({"started": req["cfg"], "pid": pid})
            else:
                try:
                    os.read(rfd, 4096)
                except BlockingIOError:
                    pass
        for pid, code in exits():
            say({"exited": pid, "code": code})


if __name__ == "__main__":
    sys.exit(main())
