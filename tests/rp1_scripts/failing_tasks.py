#!/usr/bin/env python3
# Tasks that fail: a program that does not exist, a non-zero exit, a failing function; the rest
# of the workload is unaffected; exit codes and stderr as RP reports them.
import pilot as rp


def divide(a, b):
    return a / b


session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(rp.PilotDescription(resource="local.localhost", cores=2))
    tmgr = rp.TaskManager(session=session)
    tmgr.add_pilots(pilot)
    tds = []
    for i in range(12):
        td = rp.TaskDescription()
        td.executable = "/bin/date" if i % 4 else "/bin/data"  # (does not exist)
        tds.append(td)
    tds.append(rp.TaskDescription({"executable": "/bin/sh", "arguments": ["-c", "exit 3"]}))
    tds.append(rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": divide, "args": [1, 0]}))
    tasks = tmgr.submit_tasks(tds)
    tmgr.wait_tasks(timeout=60)
    for t in tasks:
        print(f"  * {t.uid}: {t.state[:4]}, exit: {t.exit_code!s:>5}, err: {t.stderr[:40]}")
    for i, t in enumerate(tasks[:12]):
        if i % 4:
            assert t.state == rp.DONE and t.exit_code == 0, t
        else:
            assert t.state == rp.FAILED and t.exit_code == 127, (t, t.exit_code)
            assert "/bin/data" in t.stderr, t.stderr
    assert tasks[12].state == rp.FAILED and tasks[12].exit_code == 3
    bad = tasks[13]
    assert bad.state == rp.FAILED and bad.exception == "ZeroDivisionError: division by zero"
    assert "Traceback" in bad.exception_detail and bad.return_value is None
finally:
    session.close()
print("OK failing_tasks")
