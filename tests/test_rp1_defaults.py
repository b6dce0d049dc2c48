"""RP 1.x's TaskDescription and PilotDescription read as RADICAL-Pilot 1.103.2's do, field by
field, and its Pilot.as_dict and stage_in / stage_out answer as RP's: the tables below are
written from RP's source (src/radical/pilot/task_description.py and pilot_description.py
`_defaults`, pilot.py as_dict; radical.pilot is not installed here, nor imported).  The system
reads the same fields raw: None for unset (pmgr/compat/rp1/task_reads.py).  RP's tutorials show
the same (tests/test_rp_tutorials.py)."""

from __future__ import annotations

import os

import pilot as rp
from pilot.pmgr.compat.rp1.task_reads import RP_EMPTY

# RP 1.103.2's TaskDescription._defaults, every key
RP_TASK_DEFAULTS = {
    **{"uid": "", "name": "", "mode": "task.executable", "executable": "", "arguments": []},
    **{"info_pattern": "", "code": "", "function": "", "args": [], "kwargs": {}, "command": ""},
    **{"sandbox": "", "environment": {}, "named_env": "", "pre_launch": [], "pre_exec": []},
    **{"pre_exec_sync": False, "post_launch": [], "post_exec": [], "stdout": "", "stderr": ""},
    **{"input_staging": [], "output_staging": [], "stage_on_error": False, "priority": 0},
    **{"use_mpi": None, "ranks": 1, "ranks_per_node": None, "cores_per_rank": 1},
    **{"gpus_per_rank": 0.0, "threading_type": "", "gpu_type": "", "lfs_per_rank": 0},
    **{"mem_per_rank": 0},
    # (deprecated in RP 1.x: moved to the new name at submit)
    **{"cpu_processes": 0, "cpu_process_type": "", "cpu_threads": 0, "cpu_thread_type": ""},
    **{"gpu_processes": 0, "gpu_process_type": "", "gpu_threads": 0, "gpu_thread_type": ""},
    **{"lfs_per_process": 0, "mem_per_process": 0, "scheduler": "", "worker_file": ""},
    **{"worker_class": ""},
    **{"restartable": False, "tags": {}, "raptor_id": "", "raptor_file": "", "raptor_class": ""},
    **{"metadata": {}, "services": [], "timeout": 0.0, "startup_timeout": 0.0, "cleanup": False},
    **{"pilot": "", "slots": [], "partition": None},
}
# differ on purpose: RP's deprecated names are the same field as the new one here (RP moves
# them at submit and then shows its default): they read as that field
SAME_FIELD = {"cpu_processes": 1, "cpu_threads": 1, "gpu_processes": 0.0}

# RP 1.103.2's PilotDescription._defaults; `resource` differs on purpose (local.localhost here,
# where RP refuses a description without one)
RP_PILOT_DEFAULTS = {
    **{"uid": None, "resource": None, "access_schema": None, "runtime": 10, "app_comm": []},
    **{"sandbox": None, "cores": 0, "gpus": 0, "nodes": 0, "backup_nodes": 0, "memory": 0},
    **{"queue": None, "job_name": None, "project": None, "cleanup": False},
    **{"exit_on_error": True, "input_staging": [], "output_staging": [], "prepare_env": {}},
    **{"services": [], "enable_ep": False, "reconfig_src": None},
}
# RP 1.103.2's Pilot.as_dict keys
RP_PILOT_KEYS = (
    *("session", "pmgr", "uid", "type", "state", "log", "stdout", "stderr", "resource"),
    *("resources", "endpoint_fs", "resource_sandbox", "session_sandbox", "pilot_sandbox"),
    *("client_sandbox", "js_url", "js_hop", "description", "resource_details", "nodelist"),
)


def _differences(reads: dict, table: dict) -> list[str]:
    """Each key whose value (or its type: '' is no None, 0.0 no 0) is not the table's."""
    out = []
    for key, want in table.items():
        got = reads.get(key, KeyError)
        if got != want or type(got) is not type(want):
            out.append(f"{key}: {got!r}, RP {want!r}")
    return out


def test_a_task_description_reads_as_rps_defaults_every_way():
    td = rp.TaskDescription()
    want = {**RP_TASK_DEFAULTS, **SAME_FIELD}
    shown = td.as_dict()
    for how, read in (
        ("attribute", lambda k: getattr(td, k)),
        ("item", lambda k: td[k]),
        ("get", lambda k: td.get(k)),
        ("as_dict", lambda k: shown[k]),
    ):
        assert _differences({k: read(k) for k in want}, want) == [], how
    # the system reads the same fields raw: None for unset, RP's '' nowhere
    raw = td.raw()
    assert all(getattr(raw, k) is None for k in RP_EMPTY)
    assert raw.cores_per_rank is None and raw.gpus_per_rank is None and raw.gpu_threads is None
    assert raw["pilot"] == "" and raw.get("stdout") == "" and raw.as_dict() == shown


def test_rps_unset_values_given_back_are_unset():
    given = rp.TaskDescription({"executable": "/bin/date", "pilot": "", "stdout": ""})
    assert given.pilot == "" and given.raw().pilot is None and given.raw().stdout is None
    again = rp.TaskDescription(given.as_dict())  # (an RP script copies one this way)
    assert again.as_dict() == given.as_dict() and again.raw().pilot is None
    given.pilot = "pilot.0001"
    assert given.pilot == given["pilot"] == given.raw().pilot == "pilot.0001"
    given.cores_per_rank, given.gpus_per_rank = 4, 2
    assert (given.cores_per_rank, given.raw().cores_per_rank, given.rank_cores) == (4, 4, 4)
    given.metadata["key"] = "kept"  # (RP's default is a dict of the description's own)
    given.args.append(1)
    assert given.as_dict()["metadata"] == {"key": "kept"} and given.args == [1]
    assert rp.TaskDescription().metadata == {} and rp.TaskDescription().args == []


def test_a_submitted_tasks_description_reads_as_rps(session):
    tmgr = rp.TaskManager(session)  # (no pilot: the task waits at the client)
    td = rp.TaskDescription({"executable": "/bin/true", "name": "one"})
    task = tmgr.submit_tasks(td)
    try:
        d = task.description  # the form the task runs with: raw attributes, RP's items
        assert d["pilot"] == "" and d.get("sandbox") == "" and d["name"] == "one"
        assert d.pilot is None and d.sandbox is None  # (as the system reads it)
        assert isinstance(d, rp.TaskDescription) and type(d).__name__ == "TaskDescription"
        assert task.as_dict()["description"]["pilot"] == ""
        assert td.pilot == "" and td.name == "one"  # the user's own is left as given
    finally:
        tmgr.cancel_tasks()


def test_a_pilot_description_reads_as_rps_defaults():
    pd = rp.PilotDescription()
    want = {**RP_PILOT_DEFAULTS, "resource": "local.localhost"}
    assert _differences(pd.as_dict(), want) == []
    assert _differences({k: getattr(pd, k) for k in want}, want) == []
    assert _differences({k: pd[k] for k in want}, want) == []


def test_a_pilots_as_dict_and_staging_answer_as_rps(session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (the client sandbox: the working directory)
    (tmp_path / "in.txt").write_text("data\n")
    pmgr = rp.PilotManager(session)
    pd = {"resource": "local.localhost", "cores": 1, "runtime": 5, "exit_on_error": False}
    pilot = pmgr.submit_pilots(rp.PilotDescription(pd))
    d = pilot.as_dict()
    assert set(RP_PILOT_KEYS) <= set(d), set(RP_PILOT_KEYS) - set(d)
    assert (d["session"], d["pmgr"], d["type"]) == (session.uid, pmgr.uid, "pilot")
    assert (d["js_url"], d["js_hop"], d["endpoint_fs"]) == (
        "fork://localhost/",
        "fork://localhost/",
        "file://localhost/",
    )
    box = pilot.pilot_sandbox  # (a path; as_dict's sandboxes are URLs, as RP's)
    assert d["pilot_sandbox"] == f"file://localhost{box}/"
    assert d["session_sandbox"] == f"file://localhost{os.path.dirname(box)}"
    assert d["resource_sandbox"] == f"file://localhost{os.path.dirname(os.path.dirname(box))}"
    assert d["resource_sandbox"].endswith("/radical.pilot.sandbox")
    assert d["client_sandbox"] == str(tmp_path) and d["resources"] == {"cpu": 1, "gpu": 0}
    want = {**RP_PILOT_DEFAULTS, **pd}  # the PilotDescription as given, every key
    assert _differences(d["description"], want) == []
    # stage_in / stage_out: the targets completed as RP's complete_url does (pilot.py)
    got = pilot.stage_in([{"source": "client:///in.txt", "target": "pilot:///a/in.txt"}])
    assert got == [f"file://localhost{box}/a/in.txt"]
    assert pilot.stage_in("in.txt") == [f"file://localhost{box}/in.txt"]
    back = [{"source": "pilot:///a/in.txt", "target": "client:///out/in.txt"}]
    assert pilot.stage_out(back) == [f"{tmp_path}/out/in.txt"]
    assert (tmp_path / "out" / "in.txt").read_text() == "data\n"
    pilot.cancel()
