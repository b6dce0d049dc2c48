#!/usr/bin/env python3
# RP 1.x's data staging: task:// and client:// (the client's working directory, never the file
# system's root), pilot.stage_in / stage_out of shared data, LINK and COPY on the pilot's side,
# MOVE from an absolute path, RP 1.x's integer flags, TARBALL, output back to the client with
# the task's stdout kept, and task.output_files.
import os

import pilot as rp

with open("input.dat", "w") as f:
    f.write("0123456789\n")
os.makedirs("tree/sub", exist_ok=True)
with open("tree/sub/leaf.txt", "w") as f:
    f.write("leaf\n")

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(rp.PilotDescription(resource="local.localhost", cores=2))
    # shared data: once into the pilot sandbox, before any task
    targets = pilot.stage_in(
        {
            "source": "client:///input.dat",
            "target": "pilot:///shared/input.dat",
            "action": rp.TRANSFER,
        }
    )
    # (RP 1.x returns them completed: a place on the resource as a URL of its file system)
    assert targets == [f"file://localhost{pilot.pilot_sandbox}/shared/input.dat"], targets
    with open(os.path.join(pilot.pilot_sandbox, "shared", "input.dat")) as f:
        assert f.read() == "0123456789\n"
    tmgr = rp.TaskManager(session=session)
    tmgr.add_pilots(pilot)

    tds = []
    for i in range(4):
        td = rp.TaskDescription()
        td.executable = "/bin/sh"
        td.arguments = ["-c", f"wc -c < linked.dat > out.{i}.dat; cat copied.dat; echo task {i}"]
        td.input_staging = [
            {
                "source": "pilot:///shared/input.dat",
                "target": "task:///linked.dat",
                "action": rp.LINK,
            },
            {
                "source": "pilot:///shared/input.dat",
                "target": "task:///copied.dat",
                "action": rp.COPY,
                "flags": rp.CREATE_PARENTS,
            },
        ]
        td.output_staging = [
            {
                "source": f"task:///out.{i}.dat",
                "target": f"client:///results/out.{i}.dat",
                "action": rp.TRANSFER,
                "flags": 2,
            },  # RP 1.x's CREATE_PARENTS bit
            {
                "source": f"task:///out.{i}.dat",
                "target": f"pilot:///collected/out.{i}.dat",
                "action": rp.COPY,
            },
        ]
        tds.append(td)
    # a directory as a tarball, and a file moved in from an absolute path on the pilot's side
    os.makedirs("/tmp/rp1_staging_move", exist_ok=True)
    moving = f"/tmp/rp1_staging_move/{session.uid}.dat"
    with open(moving, "w") as f:
        f.write("moved\n")
    tar = rp.TaskDescription(
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "cat tree/sub/leaf.txt here.dat"],
            "input_staging": [
                {"source": "client:///tree", "target": "task:///tree", "action": rp.TARBALL},
                {"source": moving, "target": "task:///here.dat", "action": rp.MOVE},
            ],
        }
    )
    tasks = tmgr.submit_tasks(tds + [tar])
    assert tmgr.wait_tasks(timeout=60) == [rp.DONE] * 5, [(t.state, t.reason) for t in tasks]
    for i, t in enumerate(tasks[:4]):
        print(f"  * {t.uid}: {t.state}, out: {t.stdout.split()} - {t.output_files}")
        assert t.stdout == f"0123456789\ntask {i}\n", t.stdout  # kept, though staged out
        with open(f"results/out.{i}.dat") as f:  # in the client's working directory
            assert f.read().strip() == "11"
        assert t.output_files == [f"out.{i}.dat"], t.output_files
    assert tasks[4].stdout == "leaf\nmoved\n", tasks[4].stdout
    assert not os.path.exists(moving)
    # shared results back from the pilot sandbox
    got = pilot.stage_out(
        [
            {
                "source": f"pilot:///collected/out.{i}.dat",
                "target": f"client:///back.{i}.dat",
                "action": rp.TRANSFER,
            }
            for i in range(4)
        ]
    )
    assert got == [f"{os.getcwd()}/back.{i}.dat" for i in range(4)], got  # (client: a path)
    for i in range(4):
        with open(f"back.{i}.dat") as f:
            assert f.read().strip() == "11"
    assert not os.path.exists("/results")  # client:/// was never the file system's root
finally:
    session.close()
print("OK staging")
