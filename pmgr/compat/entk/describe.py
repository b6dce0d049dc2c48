"""An EnTK task as the RADICAL-Pilot 1.x TaskDescription it runs as
(pmgr/compat/rp1/task_description.py; the TaskManager turns that into a unit), and where the
workflow's task sandboxes are.

    EnTK Task                      TaskDescription
    uid (its n-th run: uid.n)      uid (the pilot task's uid is task.rts_uid)
    name, stage, pipeline          name 'task uid,task name,stage uid,stage name,pipeline uid,
                                   pipeline name' (EnTK's: RP_TASK_NAME in the task)
    executable, arguments          the same; $SHARED / $Pipeline_... at an argument's start
                                   made a path (pmgr/compat/entk/references.py)
    environment, sandbox, pre_launch, pre_exec, post_exec, post_launch, stdout, stderr,
    metadata                       the same
    cpu_reqs  cpu_processes        ranks
              cpu_threads          cores_per_rank
              cpu_process_type     use_mpi (None: the default, MPI when ranks > 1)
              cpu_thread_type      threading_type (OpenMP: OMP_NUM_THREADS)
    gpu_reqs  gpu_processes        gpus_per_rank
              gpu_process_type     gpu_type (CUDA, ROCm)
    the eight data lists           input_staging, output_staging (references.py)
    tags {'colocate': key}         the same (tasks of one key run where the first one ran)
    its stage's partition(s)       partition (one partition uid: pmgr/compat/entk/partitions.py)
"""

from __future__ import annotations

import os

from pilot.pmgr.compat.entk import references
from pilot.pmgr.compat.entk.errors import EnTKValueError
from pilot.pmgr.compat.rp1 import TaskDescription
from pilot.rp.names import MPI, OpenMP


class Catalog:
    """The pipelines an AppManager ran or runs, and their tasks' sandboxes on its pilot
    (references.Sandboxes)."""

    def __init__(self) -> None:
        self.known: list = []  # every pipeline of every workflow, in the order given
        self.pilot_sandbox: str | None = None

    def add(self, pipelines) -> None:
        self.known += [p for p in pipelines if p not in self.known]

    def pipelines(self) -> list:
        return self.known

    def sandbox_of(self, task) -> str:
        """Its sandbox: the one it names (relative to the pilot sandbox), else its pilot task's
        uid (its first run's: task.uid) in the pilot sandbox, as RADICAL-Pilot puts it."""
        if task.sandbox:
            return os.path.join(self.pilot_sandbox or "", task.sandbox)
        return os.path.join(self.pilot_sandbox or "", task.rts_uid or task.uid)


def task_description(task, stage, pipeline, rts_uid: str, where: Catalog, partition):
    """The TaskDescription `task` (of `stage` of `pipeline`) runs as; EnTKValueError naming
    the task and the field."""
    owner = f"Task {task.luid}"
    cpu, gpu = task.cpu_reqs, task.gpu_reqs
    staged = {f: references.directives(owner, f, getattr(task, f), where) for f in references.ENDS}
    fields = {
        "uid": rts_uid,
        "name": ",".join(
            str(x or "")
            for x in (task.uid, task.name, stage.uid, stage.name, pipeline.uid, pipeline.name)
        ),
        "executable": task.executable,
        "arguments": [references.argument(owner, a, where) for a in task.arguments],
        "environment": task.environment,
        "sandbox": task.sandbox or None,
        "pre_launch": task.pre_launch,
        "pre_exec": task.pre_exec,
        "post_exec": task.post_exec,
        "post_launch": task.post_launch,
        "stdout": task.stdout or None,
        "stderr": task.stderr or None,
        "metadata": task.metadata or None,
        "ranks": cpu.cpu_processes,
        "cores_per_rank": cpu.cpu_threads,
        "gpus_per_rank": gpu.gpu_processes,
        "input_staging": [d for f in references.INPUT for d in staged[f]],
        "output_staging": [d for f in staged if f not in references.INPUT for d in staged[f]],
        "partition": partition,
    }
    if cpu.cpu_thread_type == OpenMP:
        fields["threading_type"] = OpenMP
    if cpu.cpu_process_type is not None:
        fields["use_mpi"] = cpu.cpu_process_type == MPI
    if gpu.gpu_process_type is not None:
        fields["gpu_type"] = gpu.gpu_process_type
    if task.tags and task.tags.get("colocate"):
        fields["tags"] = {"colocate": task.tags["colocate"]}
    try:
        return TaskDescription(fields)
    except ValueError as exc:
        raise EnTKValueError(f"{owner}: {exc}") from None
