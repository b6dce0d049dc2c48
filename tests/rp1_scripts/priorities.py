#!/usr/bin/env python3
# Task priorities at the client: a one-core pilot, tasks of three priorities submitted before
# the pilot is added (they wait at the client) and in one call: higher ones are sent, so run,
# first; within a priority, in submit order.  The tasks write their order into a shared file.
import os

import pilot as rp

seen = []


def state_cb(task, state):
    if state in rp.FINAL:
        seen.append((task.uid, task.description.priority, state))


session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    tmgr = rp.TaskManager(session=session)
    pilot = pmgr.submit_pilots(
        rp.PilotDescription({"resource": "local.localhost", "nodes": 1, "cores": 1, "runtime": 10})
    )
    tmgr.register_callback(state_cb)
    tds = []
    for i in range(12):
        tds.append(
            rp.TaskDescription(
                {
                    "executable": "/bin/sh",
                    "arguments": ["-c", 'echo "$RP_TASK_ID" >> "$RP_PILOT_SANDBOX/order.txt"'],
                    "priority": i % 3,
                }
            )
        )
    tasks = tmgr.submit_tasks(tds)  # (no pilot yet: they wait at the client)
    assert [t.description.priority for t in tasks] == [i % 3 for i in range(12)]
    tmgr.add_pilots(pilot)
    assert tmgr.wait_tasks(timeout=60) == [rp.DONE] * 12
    with open(os.path.join(pilot.pilot_sandbox, "order.txt")) as f:
        order = f.read().split()
    by_uid = {t.uid: t for t in tasks}
    print("order:", [(u, by_uid[u].description.priority) for u in order])
    prios = [by_uid[u].description.priority for u in order]
    assert prios == sorted(prios, reverse=True), prios
    for p in range(3):
        same = [u for u in order if by_uid[u].description.priority == p]
        assert same == sorted(same), same  # submit order within a priority
    assert len(seen) == 12 and {s for _, _, s in seen} == {rp.DONE}
finally:
    session.close()
print("OK priorities")
