"""What a function worker knows by name: RP 1.x's code-running task modes and the methods of its
default Raptor worker, as plain functions that function units call (pilot/functions.py).

A RADICAL-Pilot 1.x task names a function the worker knows ("hello") or gives code:
    TASK_FUNCTION / TASK_METHOD with a bare name   -> the function of that name below
    TASK_EVAL  code                                -> eval_code(code): the expression's value
    TASK_EXEC  code (pre_exec: Python lines)       -> exec_code(code, pre): the body's return value
Everything else a function task names is a callable or a dotted name "pkg.mod.func".
"""

from __future__ import annotations

import time

KNOWN = ("hello",)  # bare names a task may give (RP's default worker's methods)


def hello(msg, sleep=0):
    """RP's default worker's `hello`: says hello twice, `sleep` seconds apart."""
    print(f"hello {msg}: {time.time():.3f}")
    time.sleep(sleep)
    print(f"hello {msg}: {time.time():.3f}")
    return f"hello {msg}"


def eval_code(code: str):
    """A TASK_EVAL task: the value of a Python expression."""
    return eval(code, {"__name__": "__rp_eval__"})  # noqa: S307 (the user's own code, by design)


def exec_code(code: str, pre=()):
    """A TASK_EXEC task: `pre` lines (imports) and then `code` as the body of a function,
    whose return value is the task's."""
    body = "".join(f"    {line}\n" for line in code.split("\n")) or "    pass\n"
    src = "\n".join(pre) + "\ndef _task():\n" + body + "\n_result = _task()\n"
    scope: dict = {"__name__": "__rp_exec__"}
    exec(src, scope)  # noqa: S102 (the user's own code, by design)
    return scope["_result"]


def dotted(name: str) -> str | None:
    """The dotted name a worker resolves for a bare name it knows, or None."""
    return f"{__name__}.{name}" if name in KNOWN else None
