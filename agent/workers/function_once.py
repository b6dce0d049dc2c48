"""A function unit on a node of a multi-node partition: one call, in a process of its own.

    python -m pilot.agent.workers.function_once CALL

On a partition whose units the node daemons run (agent/runners/daemons.py) there are no
function workers: the runner writes CALL, a pickle of {uid, call} (the packed call, as a
function worker gets it), in the unit's sandbox and has the daemon of its node start this
command like any unit's rank.  The call runs as a function worker runs one
(agent/workers/function_worker.py `run_call`: the client's module directories from
PILOT_FUNCTION_PATH,
stdout and stderr captured, the value pickled, an exception caught) and the reply, a pickle of
{uid, ok, value | exception, stdout, stderr}, goes to CALL + ".reply" (written whole, then
renamed: a reply is there complete or not at all); the exit code is 0 either way (the call's
own failure is in the reply).  Each call pays an interpreter start: a function unit here suits
calls of a second or more (rp.Executor bundles short ones).
"""

from __future__ import annotations

import os
import pickle
import sys

from pilot.agent.workers.function_worker import PATH_VAR, run_call
from pilot.agent.workers.worker_env import WorkerEnviron

REPLY = ".reply"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pilot.agent.workers.function_once CALL", file=sys.stderr)
        return 2
    own = os.environ.pop(PATH_VAR, "")
    sys.path[1:1] = [p for p in own.split(os.pathsep) if p and p not in sys.path]
    with open(argv[0], "rb") as f:
        msg = pickle.load(f)
    allowed = os.sched_getaffinity(0)
    state = {"environ": WorkerEnviron(), "all": allowed, "mask": allowed, "fns": {}}
    pid = os.getpid()
    reply = run_call(msg, state)
    if os.getpid() != pid:  # (a child the call forked ends with the call)
        os._exit(0)
    tmp = argv[0] + REPLY + ".part"
    with open(tmp, "wb") as f:
        pickle.dump(reply, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, argv[0] + REPLY)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
