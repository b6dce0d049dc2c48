#!/usr/bin/env python3
# RP 1.x's getting started: a PilotDescription from a dict, a TaskManager, tasks that echo their
# environment, wait_tasks, Task attributes and as_dict() with RP 1.x's keys.
import os

import pilot as rp

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    tmgr = rp.TaskManager(session=session)
    pd = rp.PilotDescription(
        {
            "resource": "local.localhost",
            "runtime": 15,
            "exit_on_error": True,
            "project": None,
            "queue": None,
            "access_schema": None,
            "cores": 2,
            "gpus": 0,
        }
    )
    pilot = pmgr.submit_pilots(pd)
    tmgr.add_pilots(pilot)
    tds = []
    for i in range(8):
        td = rp.TaskDescription()
        td.executable = "/bin/echo"
        td.arguments = ["$RP_TASK_ID greets $TEST", "$RP_TASK_NAME", "$RP_RANK/$RP_RANKS"]
        td.environment = {"TEST": "jabberwocky"}
        td.name = f"greeter-{i}"
        tds.append(td)
    tasks = tmgr.submit_tasks(tds)
    assert [t.uid for t in tasks] == [f"task.{i:06d}" for i in range(8)], [t.uid for t in tasks]
    assert sorted(tmgr.list_tasks()) == [t.uid for t in tasks]
    states = tmgr.wait_tasks(timeout=60)
    assert states == [rp.DONE] * 8, states
    for t in tasks:
        print(f"  * {t.uid}: {t.state[:4]}, exit: {t.exit_code!s:>3}, out: {t.stdout.strip()}")
        assert t.exit_code == 0
        assert t.stdout == f"{t.uid} greets jabberwocky {t.name} 0/1\n", t.stdout
    one = tmgr.get_tasks(tasks[3].uid)
    assert one is tasks[3] and one.wait() == rp.DONE
    d = tasks[0].as_dict()
    for key in (
        "uid",
        "state",
        "exit_code",
        "stdout",
        "stderr",
        "pilot",
        "task_sandbox",
        "pilot_sandbox",
        "client_sandbox",
        "description",
        "return_value",
        "exception",
    ):
        assert key in d, key
    assert d["pilot"] == pilot.uid and d["exit_code"] == 0
    assert d["task_sandbox"] == os.path.join(pilot.pilot_sandbox, tasks[0].uid)
    assert d["client_sandbox"] == os.getcwd()
    assert d["description"]["executable"] == "/bin/echo"
    assert tasks[0].description.name == "greeter-0"
    assert tmgr.wait_tasks(tasks[0].uid) == rp.DONE  # one uid: one state
finally:
    session.close(download=True)
print("OK getting_started")
