#!/usr/bin/env python3
# RP 1.x's sandbox layout: the pilot sandbox ~/radical.pilot.sandbox/<session>/<pilot>, the
# client sandbox the working directory, a task's output in <uid>.out / <uid>.err (or the files
# its stdout / stderr name), RP_* variables, $RP_PROF events in <uid>.prof; a PilotDescription's
# input_staging in the pilot sandbox before its tasks run and its output_staging back when it
# ends; a task pinned to a pilot the TaskManager does not have waits (TMGR_SCHEDULING) until
# that pilot is added, and one pinned to a pilot never added fails when the session closes.
import os

import pilot as rp

os.makedirs("input_dir", exist_ok=True)
with open("input_dir/input.txt", "w") as f:
    f.write("staged\n")

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    tmgr = rp.TaskManager(session=session)
    pd = rp.PilotDescription(
        {
            "resource": "local.localhost",
            "cores": 2,
            "runtime": 10,
            "input_staging": ["input_dir"],
            "output_staging": [
                {"source": "pilot:///made.txt", "target": "client:///back/made.txt"}
            ],
        }
    )
    pilot = pmgr.submit_pilots(pd)
    home = os.path.expanduser("~")
    assert pilot.pilot_sandbox == f"{home}/radical.pilot.sandbox/{session.uid}/{pilot.uid}"
    assert pilot.client_sandbox == os.getcwd(), pilot.client_sandbox
    tmgr.add_pilots(pilot)
    second = pmgr.submit_pilots(rp.PilotDescription({"resource": "local.localhost", "cores": 1}))
    tds = [
        rp.TaskDescription(
            {
                "executable": "/bin/sh",
                "arguments": [
                    "-c",
                    'cat "$RP_PILOT_SANDBOX/input_dir/input.txt"; echo oops >&2; '
                    'echo made > "$RP_PILOT_SANDBOX/made.txt"; $RP_PROF app_start; '
                    'echo "$RP_RESOURCE_SANDBOX $RP_SESSION_SANDBOX"',
                ],
            }
        ),
        rp.TaskDescription({"executable": "/bin/echo", "arguments": ["hi"], "stdout": "o.txt"}),
        rp.TaskDescription({"executable": "/bin/echo", "arguments": ["$RP_PILOT_ID"]}),
        rp.TaskDescription({"executable": "/bin/echo", "pilot": "pilot.none"}),
    ]
    tds[2].pilot = second.uid  # not added to the TaskManager yet
    tasks = tmgr.submit_tasks(tds)
    assert tmgr.wait_tasks([t.uid for t in tasks[:2]], timeout=60) == [rp.DONE] * 2
    assert tmgr.wait_tasks(tasks[2].uid, timeout=2) == rp.TMGR_SCHEDULING  # (one uid: a state)
    tmgr.add_pilots(second)
    assert tasks[2].wait(timeout=60) == rp.DONE and tasks[2].stdout == f"{second.uid}\n"
    first, named = tasks[0], tasks[1]
    box = first.sandbox
    assert box == f"{pilot.pilot_sandbox}/{first.uid}", box
    names = sorted(os.listdir(box))
    assert names == [f"{first.uid}.err", f"{first.uid}.out", f"{first.uid}.prof"], names
    out = first.stdout.split("\n")
    assert out[0] == "staged" and first.stderr == "oops\n", (first.stdout, first.stderr)
    session_box = f"{home}/radical.pilot.sandbox/{session.uid}"
    assert out[1] == f"{home}/radical.pilot.sandbox {session_box}", out
    with open(f"{box}/{first.uid}.prof") as f:
        fields = f.read().split(",")
    assert fields[1] == "app_start" and fields[4] == first.uid, fields
    assert os.listdir(named.sandbox) == ["o.txt"] and named.stdout == "hi\n"
    assert tasks[3].state == rp.TMGR_SCHEDULING
    print("  * sandboxes:", pilot.pilot_sandbox, names)
finally:
    session.close()
assert tasks[3].state == rp.FAILED and "pilot='pilot.none' was never added" in tasks[3].reason
with open("back/made.txt") as f:  # the pilot's output_staging, once it ended
    assert f.read() == "made\n"
print("OK sandboxes_and_pinning")
