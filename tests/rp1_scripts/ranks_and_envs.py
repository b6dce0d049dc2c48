#!/usr/bin/env python3
# Ranks and environments: an MPI task (ranks > 1: RP 1.x's use_mpi) whose ranks see their own
# RP_RANK, rank-specific pre_exec lines, use_mpi=False ranks as plain processes, OpenMP threads,
# pre_launch/post_launch, a 'shell' named environment, the pilot's own Python ('rp') and a venv
# made by the first task that names it.
import shutil

import pilot as rp

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": "local.localhost", "cores": 4}))
    pilot.prepare_env("greeting", {"type": "shell", "pre_exec": ["export GREETING=hello"]})
    pilot.prepare_env("plain_venv", {"type": "venv", "setup": []})
    tmgr = rp.TaskManager(session=session)
    tmgr.add_pilots(pilot)
    show = 'echo "$RP_RANK/$RP_RANKS ${ONLY:-} ${OMP_NUM_THREADS:-}"'
    tds = []
    for use_mpi in ([True] if shutil.which("mpirun") else []) + [False]:
        tds.append(
            rp.TaskDescription(
                {
                    "executable": "/bin/sh",
                    "arguments": ["-c", show],
                    "ranks": 3,
                    "use_mpi": use_mpi,
                    "pre_exec": [{"1": ["export ONLY=one"]}],
                    "cores_per_rank": 1,
                    "threading_type": rp.OpenMP,
                }
            )
        )
    tds += [
        rp.TaskDescription(
            {
                "executable": "/bin/echo",
                "arguments": ["task"],
                "pre_launch": ["echo launch"],
                "post_launch": ["echo landed"],
            }
        ),
        rp.TaskDescription(
            {
                "executable": "/bin/sh",
                "arguments": ["-c", 'echo "$GREETING"'],
                "named_env": "greeting",
            }
        ),
        rp.TaskDescription(
            {"executable": "python3", "arguments": ["-c", "import pilot"], "named_env": "rp"}
        ),
        rp.TaskDescription(
            {
                "executable": "python3",
                "arguments": ["-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                "named_env": "plain_venv",
            }
        ),
    ]
    tasks = tmgr.submit_tasks(tds)
    states = tmgr.wait_tasks(timeout=120)
    for t in tasks:
        print(f"  * {t.uid} [{t.state}] {t.stdout!r} {t.stderr[-200:]}")
    assert states == [rp.DONE] * len(tds), states
    for t in tasks[:-4]:
        assert sorted(t.stdout.split("\n")[:-1]) == ["0/3  1", "1/3 one 1", "2/3  1"], t.stdout
    assert tasks[-4].stdout == "launch\ntask\nlanded\n"
    assert tasks[-3].stdout == "hello\n"
    assert tasks[-1].stdout == "True\n"
finally:
    session.close()
print("OK ranks_and_envs")
