#!/usr/bin/env python3
# RP 1.x's tags: {'colocate': key} runs a task where the first task with that key ran (here:
# its partition; the pilot has two, with this project's partitions= extension), and
# {'order': {'ns', 'order', 'size'}} holds a task until the tasks of the orders before it in its
# namespace ended.  The tasks are submitted shuffled, in one call.
import random

import pilot as rp

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pd = rp.PilotDescription(
        {
            "resource": "local.localhost",
            "cores": 4,
            "partitions": [rp.ComputePartitionDescription(cores=2)] * 2,
        }
    )
    pilot = pmgr.submit_pilots(pd)
    tmgr = rp.TaskManager(session=session)
    tmgr.add_pilots(pilot)
    colo = []
    for bag in range(2):
        for i in range(3):
            colo.append(
                rp.TaskDescription(
                    {
                        "executable": "/bin/true",
                        "name": f"b{bag}-t{i}",
                        "tags": {"colocate": {"bag": bag, "size": 3}},
                    }
                )
            )
    tasks = tmgr.submit_tasks(colo)
    assert tmgr.wait_tasks(timeout=60) == [rp.DONE] * 6
    for bag in range(2):
        parts = {t.partition for t in tasks[3 * bag : 3 * bag + 3]}
        assert len(parts) == 1, parts
    ordered = []
    for ns in range(2):
        for stage in range(3):
            for i in range(2):
                ordered.append(
                    rp.TaskDescription(
                        {
                            "executable": "/bin/sleep",
                            "arguments": ["0.3"],
                            "name": f"p{ns}-s{stage}-t{i}",
                            "tags": {"order": {"ns": ns, "order": stage, "size": 2}},
                        }
                    )
                )
    random.shuffle(ordered)
    tasks = tmgr.submit_tasks(ordered)
    assert tmgr.wait_tasks(timeout=120) == [rp.DONE] * 18

    def when(t, state):
        return next(ts for s, ts in t.history if s == state)

    for ns in range(2):
        for stage in range(1, 3):
            before = [t for t in tasks if t.name.startswith(f"p{ns}-s{stage - 1}-")]
            now = [t for t in tasks if t.name.startswith(f"p{ns}-s{stage}-")]
            assert min(when(t, rp.AGENT_EXECUTING) for t in now) >= max(
                when(t, rp.DONE) for t in before
            ), (ns, stage)
finally:
    session.close()
print("OK colocation_and_order")
