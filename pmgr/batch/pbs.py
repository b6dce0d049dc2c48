"""The `pbs` batch system: the pilot job is submitted through PSI/J's PBS Pro executor.

As pmgr/batch/slurm.py, with qsub / qstat / qdel: one job of `nodes` whole nodes (`#PBS -l
select=N:ncpus=1:mpiprocs=1`, `place=scatter:exclhost`), the runtime plus TIME_MARGIN as its
walltime, the queue and account, the resource's batch_options as PSI/J custom attributes
(`{"pbs.l": "filesystems=grand:home"}` -> `#PBS -l filesystems=grand:home`).  The job runs the
bootstrap once, on the first node; the bootstrap starts the node daemons with the resource's
launch method (mpiexec: PBS Pro's PALS on Cray machines, partition/launch/mpiexec.py; or ssh),
over the nodes of $PBS_NODEFILE.  Its state is followed as a SLURM job's is (SlurmJob), qdel
ending it.  The BatchJob interface is in pmgr/batch/__init__.py.
"""

from __future__ import annotations

from pilot.pmgr.batch.slurm import SlurmJob, follow_psij, submit_psij


class PbsJob(SlurmJob):
    EXCLUSIVE = True  # whole nodes
    SYSTEM = "PBS"
    CANCEL = "qdel"


def submit(argv, env, sandbox, *, nodes, runtime, queue=None, project=None, rcfg=None, **_):
    """A Submitter (pmgr/batch/__init__.py)."""
    return submit_psij("pbs", PbsJob, argv, env, sandbox, nodes, runtime, queue, project, rcfg)


def follow(job_id, sandbox: str, session_uid: str, rcfg=None) -> PbsJob | None:
    """A Follower (pmgr/batch/__init__.py): PBS job `job_id`."""
    return follow_psij("pbs", PbsJob, job_id, sandbox, rcfg)
