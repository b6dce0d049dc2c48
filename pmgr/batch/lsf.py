"""The `lsf` batch system: the pilot job is submitted through PSI/J's LSF executor.

As pmgr/batch/slurm.py, with bsub / bjobs / bkill: one job of `nodes` nodes (`#BSUB -nnodes
N`), the runtime plus TIME_MARGIN as its limit, the queue and project, the resource's
batch_options as PSI/J custom attributes (`{"lsf.alloc_flags": "smt4"}`).  The job runs the
bootstrap once, on its launch node; the bootstrap starts the node daemons with the resource's
launch method (ssh by default: jsrun starts nothing of ours; or mpiexec) over the hosts of
$LSB_DJOB_HOSTFILE but its first, the launch node (partition/launch/mpiexec.py).  Its state
is followed as a SLURM job's is (SlurmJob), bkill ending it.  The BatchJob interface is in
pmgr/batch/__init__.py.
"""

from __future__ import annotations

from pilot.pmgr.batch.slurm import SlurmJob, follow_psij, submit_psij


class LsfJob(SlurmJob):
    EXCLUSIVE = True  # whole nodes
    SYSTEM = "LSF"
    CANCEL = "bkill"


def submit(argv, env, sandbox, *, nodes, runtime, queue=None, project=None, rcfg=None, **_):
    """A Submitter (pmgr/batch/__init__.py)."""
    return submit_psij("lsf", LsfJob, argv, env, sandbox, nodes, runtime, queue, project, rcfg)


def follow(job_id, sandbox: str, session_uid: str, rcfg=None) -> LsfJob | None:
    """A Follower (pmgr/batch/__init__.py): LSF job `job_id`."""
    return follow_psij("lsf", LsfJob, job_id, sandbox, rcfg)
