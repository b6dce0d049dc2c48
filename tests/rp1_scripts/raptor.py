#!/usr/bin/env python3
# Raptor's shape: a master on the pilot, one worker of two cores (the raptor's partition),
# function tasks submitted to the raptor (a pythontask call and a name the workers know) and a
# task outside it; the raptor is a task of the TaskManager: it is EXECUTING while it serves and
# DONE after rpc('stop').  A master class of one's own is refused, naming the field.
import os

import pilot as rp

states = {}


def task_state_cb(task, state):
    states.setdefault(task.uid, []).append(state)


@rp.pythontask
def where(tag):
    return tag, os.environ["PILOT_PARTITION_ID"]


session = rp.Session()
try:
    pd = rp.PilotDescription()
    pd.resource = "local.localhost"
    pd.runtime = 10
    pd.cores = 4
    pmgr = rp.PilotManager(session=session)
    tmgr = rp.TaskManager(session=session)
    tmgr.register_callback(task_state_cb)
    pilot = pmgr.submit_pilots([pd])[0]
    tmgr.add_pilots(pilot)
    try:
        pilot.submit_raptors(
            rp.TaskDescription({"mode": rp.RAPTOR_MASTER, "raptor_class": "MyMaster"})
        )
        raise AssertionError("a master class of one's own was accepted")
    except ValueError as exc:
        assert "raptor_class" in str(exc), exc
    raptor = pilot.submit_raptors(rp.TaskDescription({"mode": rp.RAPTOR_MASTER}))[0]
    assert raptor.uid == "raptor.0000" and raptor.state == rp.TMGR_SCHEDULING
    workers = raptor.submit_workers(
        rp.TaskDescription({"mode": rp.RAPTOR_WORKER, "ranks": 1, "cores_per_rank": 2})
    )
    assert tmgr.wait_tasks(raptor.uid, state=rp.AGENT_EXECUTING, timeout=60) == rp.AGENT_EXECUTING
    tasks = raptor.submit_tasks(
        [rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": where(i)}) for i in range(6)]
        + [
            rp.TaskDescription(
                {"mode": rp.TASK_FUNCTION, "function": "hello", "args": ["raptor", 0]}
            )
        ]
    )
    outside = tmgr.submit_tasks(
        rp.TaskDescription({"executable": "/bin/echo", "arguments": ["$PILOT_PARTITION_ID"]})
    )
    assert tmgr.wait_tasks([t.uid for t in tasks] + [outside.uid], timeout=60) == [rp.DONE] * 8
    part = tasks[0].partition  # (RP 1.x: an index; here the partition's uid)
    assert [t.return_value for t in tasks[:6]] == [(i, part) for i in range(6)]
    assert all(t.partition == part for t in tasks), [t.partition for t in tasks]
    assert tasks[6].return_value == "hello raptor"
    assert outside.stdout.strip() not in ("", part)  # the rest of the pilot runs the others
    assert raptor.state == workers[0].state == rp.AGENT_EXECUTING
    raptor.rpc("stop")
    assert tmgr.wait_tasks(raptor.uid, timeout=60) == rp.DONE
    assert workers[0].wait(timeout=10) == rp.DONE
    print(f"{raptor.uid} [{raptor.state}]: {states[raptor.uid]}")
    assert states[raptor.uid][-3:] == [rp.AGENT_SCHEDULING, rp.AGENT_EXECUTING, rp.DONE]
finally:
    session.close()
print("OK raptor")
