#!/usr/bin/env python3
# Function tasks the RP 1.x way, without a Raptor: @rp.pythontask, mode=rp.TASK_FUNCTION with a
# callable, a dotted name or a name the workers know, TASK_METHOD, TASK_EVAL, TASK_EXEC (its
# pre_exec are Python lines), TASK_SHELL and TASK_PROC; return values, printed output, and a
# failing function's exception and traceback.
import pilot as rp


@rp.pythontask
def scaled(x, factor=1):
    print("scaling", x)
    return x * factor


def fails():
    raise KeyError("missing")


session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(rp.PilotDescription(resource="local.localhost", cores=2))
    tmgr = rp.TaskManager(session=session)
    tmgr.add_pilots(pilot)
    tds = [
        rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": scaled(i, factor=10)})
        for i in range(4)
    ]
    tds += [
        rp.TaskDescription({"mode": rp.TASK_FUNC, "function": "hello", "args": ["rp", 0]}),
        rp.TaskDescription({"mode": rp.TASK_METHOD, "method": "hello", "kwargs": {"msg": "m"}}),
        rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": "math.gcd", "args": [12, 18]}),
        rp.TaskDescription({"mode": rp.TASK_EVAL, "code": "2 ** 10"}),
        rp.TaskDescription(
            {
                "mode": rp.TASK_EXEC,
                "pre_exec": ["import math"],
                "code": "x = math.sqrt(16)\nprint('root', x)\nreturn x",
            }
        ),
        rp.TaskDescription({"mode": rp.TASK_SHELL, "command": "echo $RP_TASK_ID | tr a-z A-Z"}),
        rp.TaskDescription(
            {
                "mode": rp.TASK_SHELL,
                "command": 'echo "$GREETING" "*"',
                "pre_exec": ["export GREETING=hi"],
            }
        ),
        rp.TaskDescription({"mode": rp.TASK_PROC, "executable": "/bin/echo", "arguments": ["p"]}),
        rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": fails}),
    ]
    tasks = tmgr.submit_tasks(tds)
    states = tmgr.wait_tasks(timeout=60)
    for t in tasks:
        print(f"  * {t.uid} [{t.state}] {t.return_value!r} {t.stdout!r}")
    assert states == [rp.DONE] * 12 + [rp.FAILED], states
    assert [t.return_value for t in tasks[:4]] == [0, 10, 20, 30]
    assert tasks[1].stdout == "scaling 1\n"
    assert tasks[4].return_value == "hello rp" and tasks[4].stdout.startswith("hello rp: ")
    assert tasks[5].return_value == "hello m"
    assert tasks[6].return_value == 6 and tasks[7].return_value == 1024
    assert tasks[8].return_value == 4.0 and tasks[8].stdout == "root 4.0\n"
    assert tasks[9].stdout == tasks[9].uid.upper() + "\n"
    assert tasks[10].stdout == "hi *\n", tasks[10].stdout  # the command as written
    assert tasks[11].stdout == "p\n"
    bad = tasks[12]
    assert bad.exception == "KeyError: 'missing'" and "Traceback" in bad.exception_detail
    assert all(t.mode == td.mode for t, td in zip(tasks, tds))
finally:
    session.close()
print("OK functions")
