#!/usr/bin/env python3
# RP 1.x's callbacks: per task cb(task, state) with cb_data, on one task (uid=), the
# WAIT_QUEUE_SIZE metric, and bulk callbacks (RADICAL_PILOT_BULK_CB, set before the managers are
# made, as RP reads it): cb(tasks) once per batch, each task once, and cb([pilot]) for pilots.
import os
import threading

os.environ["RADICAL_PILOT_BULK_CB"] = "True"

import pilot as rp  # noqa: E402

lock = threading.Lock()
batches, pilot_batches, one, sizes = [], [], [], []


def bulk_cb(tasks, data):
    assert data == "mine"
    with lock:
        batches.append([(t.uid, t.state) for t in tasks])


def pilot_cb(pilots):
    pilot_batches.append([(p.uid, p.state) for p in pilots])


def one_cb(tasks):
    one.extend(t.uid for t in tasks)


def size_cb(tmgr, size):
    sizes.append(size)


session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pmgr.register_callback(pilot_cb)
    tmgr = rp.TaskManager(session=session)
    tmgr.register_callback(bulk_cb, cb_data="mine")
    tmgr.register_callback(size_cb, metric=rp.WAIT_QUEUE_SIZE)
    tasks = tmgr.submit_tasks([rp.TaskDescription({"executable": "/bin/true"}) for _ in range(40)])
    tmgr.register_callback(one_cb, uid=tasks[7].uid)
    pilot = pmgr.submit_pilots(rp.PilotDescription(resource="local.localhost", cores=2))
    tmgr.add_pilots(pilot)
    assert tmgr.wait_tasks(timeout=60) == [rp.DONE] * 40
    # every task's final state came in some batch, and no batch names a task twice
    final = {uid for b in batches for uid, s in b if s == rp.DONE}
    assert final == {t.uid for t in tasks}, len(final)
    assert all(len(b) == len({uid for uid, _ in b}) for b in batches)
    assert len(batches) < 40 * 4, len(batches)  # batches, not a call per change
    assert set(one) == {tasks[7].uid}
    assert sizes and sizes[-1] == 0 and max(sizes) >= 1, sizes
    pilot.cancel()
finally:
    session.close()
print("batches:", len(batches), "pilot:", pilot_batches)
assert all(len(b) == 1 for b in pilot_batches)
assert [s for b in pilot_batches for _, s in b][-1] == rp.CANCELED
print("OK callbacks")
