#!/usr/bin/env python3
# Canceling tasks as RP 1.x does: 8 sleeping tasks on 2 cores, cancel_tasks on the ones still
# running or waiting; the canceled ones end CANCELED at once, the others run to DONE.  A task's
# timeout ends it CANCELED with the reason; task.cancel() on one task.
import time

import pilot as rp

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": "local.localhost", "cores": 2}))
    tmgr = rp.TaskManager(session=session)
    tmgr.add_pilots(pilot)
    pilot.wait(rp.PMGR_ACTIVE)
    quick = tmgr.submit_tasks([rp.TaskDescription({"executable": "/bin/true"}) for _ in range(2)])
    slow = tmgr.submit_tasks(
        [rp.TaskDescription({"executable": "/bin/sleep", "arguments": ["30"]}) for _ in range(6)]
    )
    tmgr.wait_tasks([t.uid for t in quick], timeout=30)
    tmgr.wait_tasks(slow[0].uid, state=rp.AGENT_EXECUTING, timeout=30)
    start = time.time()
    tmgr.cancel_tasks(uids=[t.uid for t in slow])
    states = tmgr.wait_tasks([t.uid for t in slow], timeout=20)
    took = time.time() - start
    print(f"canceled {len(slow)} tasks in {took:.2f} s: {states}")
    assert states == [rp.CANCELED] * 6, states
    assert took < 10, took  # not after their 30 s
    assert [t.state for t in quick] == [rp.DONE] * 2

    timed = tmgr.submit_tasks(
        rp.TaskDescription({"executable": "/bin/sleep", "arguments": ["30"], "timeout": 1.0})
    )
    start = time.time()
    assert timed.wait(timeout=30) == rp.CANCELED
    assert 1.0 <= time.time() - start < 15 and "timeout" in timed.reason, timed.reason
    one = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/sleep", "arguments": ["30"]}))
    one.wait(rp.AGENT_EXECUTING, timeout=30)
    one.cancel()
    assert one.wait(timeout=20) == rp.CANCELED
    # a wait that times out returns the state then, as RP's does
    long = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/sleep", "arguments": ["30"]}))
    assert tmgr.wait_tasks(long.uid, timeout=0.5) in (
        rp.TMGR_SCHEDULING,
        rp.AGENT_SCHEDULING,
        rp.AGENT_EXECUTING,
    )
    long.cancel()
finally:
    session.close()
print("OK cancelation")
