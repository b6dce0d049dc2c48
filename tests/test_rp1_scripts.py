"""RADICAL-Pilot 1.x scripts run here with one changed line (tests/rp1_scripts/: written in RP
1.x's style, `import pilot as rp`): each runs as its own process, in a fresh working directory,
to its end, and checks what RP would give.  Below them: how RP 1.x's descriptions become the
units that run (no pilot needed), and that every RP 1.x name is reachable from the package."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pilot as rp
from pilot.pmgr.compat.rp1.task_form import MPI_RANK, unit_form
from pilot.pmgr.core import reaper
from pilot.unit_record import UnitRecord
from tests.conftest import ROOT

SCRIPTS = os.path.join(ROOT, "tests", "rp1_scripts")
NAMES = sorted(f[:-3] for f in os.listdir(SCRIPTS) if f.endswith(".py"))


@pytest.mark.parametrize("name", NAMES)
def test_rp1_script_runs_to_its_end(name, tmp_path):
    sessions = tmp_path / "sessions"
    # (HOME: RP 1.x's pilot sandboxes are under ~/radical.pilot.sandbox)
    env = dict(os.environ, PYTHONPATH=ROOT, PILOT_SESSIONS_DIR=str(sessions), HOME=str(tmp_path))
    env.pop("RADICAL_PILOT_BULK_CB", None)
    out = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.rstrip().endswith(f"OK {name}"), out.stdout[-2000:]
    for uid in os.listdir(sessions):
        left = reaper.session_processes(uid)
        if left:
            reaper.kill_session_processes(uid)
        assert not left, f"processes left behind: {left}"


class _Context:
    """A TaskContext (pmgr/compat/rp1/task_form.py) without a TaskManager."""

    def __init__(self) -> None:
        self.first: dict = {}

    def colocated(self, key, uid):
        first = self.first.setdefault(key, uid)
        return None if first == uid else first

    def partition_of(self, index, pilot):
        return f"pilot.0000.part.{index:04d}"

    def env_lines(self, name, pilot):
        return [f"enter {name}"], None

    def raptor_partition(self, raptor_id):
        return "pilot.0000.part.0009"


def _raw(fields: dict):
    """A TaskDescription as the TaskManager hands it to unit_form: raw (unset fields None)."""
    return rp.TaskDescription(fields).raw()


def test_task_descriptions_become_the_units_that_run():
    ctx = _Context()
    mpi = unit_form(
        _raw(
            {
                "executable": "/bin/app",
                "ranks": 4,
                "cores_per_rank": 2,
                "threading_type": rp.OpenMP,
                "gpu_type": rp.ROCm,
                "pre_exec": ["a", {"2": ["b", "c"]}],
                "named_env": "env1",
                "partition": 1,
                "tags": {"colocate": "bag"},
            }
        ),
        "task.000001",
        ctx,
    )
    assert mpi.cpu_process_type == rp.MPI and mpi.policy.gpu_env_str == "ROCR_VISIBLE_DEVICES"
    only = 'if [ "$RP_RANK" = "2" ]; then\n    b\n    c\nfi'
    assert mpi.pre_exec == ["enter env1", MPI_RANK, "a", only]
    assert mpi.partition == "pilot.0000.part.0001" and mpi.tag is None
    wire = UnitRecord.for_description("task.000001", mpi, mpi.to_stored())
    assert wire["mpi"] and wire["ranks"] == 4 and wire["cpus"] == 2
    assert wire["environment"]["OMP_NUM_THREADS"] == "2"
    second = unit_form(_raw({"executable": "/bin/true", "tags": {"colocate": "bag"}}), "t2", ctx)
    assert second.tag == "task.000001"  # where the first of its key ran
    shell = unit_form(_raw({"mode": rp.TASK_SHELL, "command": "ls | wc"}), "t3", ctx)
    assert (shell.executable, shell.arguments, shell.shell) == ("/bin/sh", ["-c", "ls | wc"], False)
    evals = unit_form(_raw({"mode": rp.TASK_EVAL, "code": "1+1"}), "t4", ctx)
    assert evals.function.__name__ == "eval_code" and evals.args == ("1+1",)
    named = unit_form(_raw({"mode": rp.TASK_FUNC, "function": "hello"}), "t5", ctx)
    assert named.function == "pilot.rp.raptor_functions.hello"
    raptor = unit_form(_raw({"function": "a.b", "raptor_id": "r"}), "t6", ctx)
    assert raptor.partition == "pilot.0000.part.0009"
    with pytest.raises(ValueError, match="no name the workers know"):
        unit_form(_raw({"mode": rp.TASK_FUNC, "function": "nope"}), "t7", ctx)
    raw = rp.TaskDescription(executable="/bin/true")  # only its form may be submitted
    assert "TaskManager" in raw.submit_error() and named.submit_error() is None


def test_priority_is_on_the_wire_only_when_set():
    for p, sent in ((0, None), (5, 5), (-2, -2)):
        d = rp.ComputeUnitDescription(executable="/bin/true", priority=p)
        rec = UnitRecord.for_description("unit.000001", d, d.to_stored())
        assert rec.get("priority") == sent
        back, error = UnitRecord.arrived(dict(rec))
        assert error is None and back.get("priority", 0) == p
    _, error = UnitRecord.arrived({"uid": "unit.000002", "executable": "x", "priority": "high"})
    assert "priority" in error
    with pytest.raises(ValueError, match="priority"):
        rp.ComputeUnitDescription(executable="/bin/true", priority=1.5)


def test_every_rp1_name_is_reachable_from_the_package():
    from pilot.pmgr.compat.rp1 import names as rp1_names

    own = ("MODES", "GPU_ENV", "FLAG_BITS", "StateSet")  # (the module's own tables)
    public = [n for n in vars(rp1_names) if n[0].isupper() and n not in own]
    assert public and all(getattr(rp, n) == getattr(rp1_names, n) for n in public)
    assert rp.FINAL + [rp.AGENT_EXECUTING] == [*rp.FINAL, rp.EXECUTING]  # RP's are lists
    assert rp.DONE in rp.FINAL and rp.FINAL == {rp.DONE, rp.FAILED, rp.CANCELED}
    for name in ("TaskManager", "TaskDescription", "PilotDescription", "Task", "Raptor",
                 "RaptorMaster", "RaptorWorker", "pythontask", "Node", "NodeList",
                 "RankRequirements", "RO", "Slot"):  # fmt: skip
        assert getattr(rp, name) is not None and name in dir(rp)


def test_node_lists_find_and_release_slots():
    nodes = [
        rp.Node(
            {
                "index": i,
                "name": f"n{i}",
                "cores": [rp.RO(index=c, occupation=rp.FREE) for c in range(4)],
                "gpus": [rp.RO(index=g, occupation=rp.FREE) for g in range(2)],
                "lfs": 100,
                "mem": 64,
            }
        )
        for i in range(2)
    ]
    nl = rp.NodeList(nodes=nodes)
    rr = rp.RankRequirements(n_cores=2, n_gpus=1, mem=16)
    first = nl.find_slots(rr, n_slots=4)
    assert len(first) == 4 and {s.node_name for s in first} == {"n0", "n1"}
    assert all(len(s.cores) == 2 and len(s.gpus) == 1 and s.mem == 16 for s in first)
    assert nl.find_slots(rr, n_slots=1) is None  # full now
    nl.release_slots(first[:1])
    assert nl.find_slots(rr, n_slots=1) is not None
    with pytest.raises(ValueError, match="never fit"):
        nl.find_slots(rp.RankRequirements(n_cores=8), n_slots=1)
