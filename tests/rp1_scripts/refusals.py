#!/usr/bin/env python3
# What RP 1.x has and nothing here runs is refused when it is used, with an error that names the
# field and says why; never silently ignored.  (No pilot is needed: submit checks first.)
import pilot as rp

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    tmgr = rp.TaskManager(session=session)
    refused = {
        "slots": {"slots": [{"node_index": 0}]},
        "services": {"services": ["db"]},
        "ranks_per_node": {"ranks_per_node": 2},
        "mem_per_rank": {"mem_per_rank": 512},
        "lfs_per_rank": {"lfs_per_process": 512},  # (RP's deprecated name of it)
        "pre_exec_sync": {"pre_exec_sync": True},
        "stage_on_error": {"stage_on_error": True},
        "startup_timeout": {"startup_timeout": 10.0},
        "task.service": {"mode": rp.TASK_SERVICE},
        "raptor_file": {"mode": rp.TASK_FUNCTION, "function": "f", "worker_file": "w.py"},
        "exclusive": {"tags": {"exclusive": True}},
        "named_env": {"named_env": "never_prepared"},
        "pre_launch": {"ranks": 2, "use_mpi": False, "pre_launch": ["module load x"]},
    }
    for name, fields in refused.items():
        td = rp.TaskDescription({"executable": "/bin/true", **fields})
        if fields.get("mode") in (rp.TASK_FUNCTION,):
            td.executable = None
        try:
            tmgr.submit_tasks(td)
        except ValueError as exc:
            assert name in str(exc), (name, str(exc))
            print(f"refused {name:16} {str(exc)[:110]}")
        else:
            raise AssertionError(f"{name} was accepted")
    assert tmgr.list_tasks() == []
    for key, value in (
        ("services", [rp.TaskDescription()]),
        ("app_comm", ["chan"]),
        ("job_name", "mine"),
    ):
        try:
            pmgr.submit_pilots(
                rp.PilotDescription({"resource": "local.localhost", "cores": 1, key: value})
            )
        except ValueError as exc:
            assert key in str(exc), str(exc)
        else:
            raise AssertionError(f"PilotDescription {key} was accepted")
    assert pmgr.list_pilots() == []
    try:
        rp.TaskDescription({"mode": "task.nothing"})
    except ValueError as exc:
        assert "mode" in str(exc)
    else:
        raise AssertionError("an unknown mode was accepted")
finally:
    session.close()
print("OK refusals")
