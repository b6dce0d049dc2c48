"""The agent zygote: a process that has imported the agent's code and forks agents on request.

Starting an agent as a fresh `python -m pilot.agent` costs ~200 ms (interpreter and imports);
forking it from a process that has already imported everything costs a few ms, which is what
keeps a reconfig under 100 ms.  The zygote is single-threaded and creates no ZeroMQ context, so
forking it is safe; each forked agent creates its own context.

Protocol (JSON lines; bootstrap <-> zygote over the zygote's stdin / stdout; the loop is
agent/fork_server.py's, shared with the node zygote):
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
import os
import signal
import sys

import pilot.agent.agent as agent_main
from pilot.agent import fork_server
from pilot.config import plugins

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
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        fork_server.child_stdio(log_path, 0o600)
        code = agent_main.main([cfg_path])
    except BaseException as exc:  # report, then leave without running the zygote's cleanup
        print(f"agent failed: {exc!r}", file=sys.stderr)
    finally:
        os._exit(code if isinstance(code, int) else 1)


def main() -> int:
    return fork_server.serve(
        lambda req: _child(req["cfg"], req["log"], req.get("body")),
        started_as=lambda req: req["cfg"],
        error_fields=lambda line, req: {"cfg": line.decode(errors="replace")},
    )


if __name__ == "__main__":
    sys.exit(main())
