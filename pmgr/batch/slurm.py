"""The `slurm` batch system: the pilot job is submitted through PSI/J's SLURM executor.

One batch job per pilot: `nodes` whole nodes (the pilot's size: its partitions plus agent
overhead), a time limit of the pilot's runtime plus TIME_MARGIN (the bootstrap ends itself at
its runtime and tears down in order; SLURM's limit only catches a bootstrap that could not),
the queue (SLURM partition) and account.  The job runs the bootstrap (partition/bootstrap.py)
once, on the first node; the bootstrap starts the node daemons with srun
(partition/launch/srun.py).  The BatchJob interface is in pmgr/batch/__init__.py.

PSI/J learns a job's state by polling the queue every `queue_poll_interval` seconds (resource
config; PSI/J's default is 30).  The pilot turns ACTIVE when its bootstrap says hello over
ZeroMQ, not when PSI/J notices; PSI/J's status serves for: still queued (the pilot stays
PENDING), failed to start (the pilot FAILED with SLURM's message), canceled while queued.
The job's stdout/stderr go to PILOT_SANDBOX/bootstrap.out and bootstrap.log; PSI/J's own
files (the generated script, exit code) to PILOT_SANDBOX/psij/.
"""

from __future__ import annotations

import logging
import math
import os
from datetime import timedelta
from pathlib import Path

log = logging.getLogger("pmgr.batch.slurm")
TIME_MARGIN = 120  # seconds added to the pilot's runtime for SLURM's time limit


class SlurmJob:
    def __init__(self, job, executor, sandbox: str) -> None:
        self.job = job
        self.executor = executor
        self.sandbox = sandbox
        self.pid = job.native_id  # the SLURM job id
        self._canceled = False

    @property
    def batch_state(self) -> str:
        return str(self.job.status.state)

    def poll(self) -> int | None:
        """None while the job is queued or running; its exit code once it ended (-15 when
        canceled, 1 when it failed without one)."""
        status = self.job.status
        if not status.state.final:
            return None
        name = str(status.state)
        if name == "COMPLETED":
            return status.exit_code or 0
        if name == "CANCELED":
            return -15
        return status.exit_code if status.exit_code not in (None, 0) else 1

    def wait(self, timeout: float) -> int | None:
        self.job.wait(timeout=timedelta(seconds=timeout))
        return self.poll()

    def cancel(self) -> None:
        if self._canceled or self.job.status.state.final:
            return
        self._canceled = True
        try:
            self.executor.cancel(self.job)
        except Exception as exc:  # PSI/J raises SubmitException and others
            log.error("scancel of job %s failed: %s", self.pid, exc)

    def kill(self) -> None:
        self.cancel()

    def describe(self) -> str:
        status = self.job.status
        parts = [f"SLURM job {self.pid} {status.state}"]
        if status.message:
            parts.append(status.message.strip())
        try:
            with open(os.path.join(self.sandbox, "bootstrap.log"), errors="replace") as f:
                tail = f.read().splitlines()[-3:]
            parts += tail
        except OSError:
            pass
        return " | ".join(parts)


def submit(
    argv: list[str],
    env: dict,
    sandbox: str,
    *,
    nodes: int,
    runtime: float,
    queue: str | None = None,
    project: str | None = None,
    rcfg=None,
    **_,
) -> SlurmJob:
    try:
        from psij import Job, JobAttributes, JobExecutor, JobSpec, ResourceSpecV1
        from psij.executors.batch.slurm import SlurmExecutorConfig
    except ImportError as exc:  # the `batch` extra
        raise OSError(
            f"psij-python is needed for SLURM pilots (pip install psij-python): {exc}"
        ) from None
    poll = int(rcfg.queue_poll_interval) if rcfg else 30
    work = Path(sandbox) / "psij"
    work.mkdir(parents=True, exist_ok=True)
    config = SlurmExecutorConfig(
        work_directory=work,
        queue_polling_interval=poll,
        initial_queue_polling_delay=1,
        keep_files=True,
    )
    executor = JobExecutor.get_instance(
        (rcfg.psij_executor if rcfg else None) or "slurm", config=config
    )
    minutes = math.ceil((runtime + TIME_MARGIN) / 60)
    spec = JobSpec(
        executable=argv[0],
        arguments=argv[1:],
        directory=Path(sandbox),
        environment={k: v for k, v in env.items() if k.startswith(("PILOT_", "PYTHONPATH"))},
        inherit_environment=True,
        stdout_path=Path(sandbox) / "bootstrap.out",
        stderr_path=Path(sandbox) / "bootstrap.log",
        resources=ResourceSpecV1(node_count=nodes, processes_per_node=1),
        attributes=JobAttributes(
            duration=timedelta(minutes=minutes),
            queue_name=queue or (rcfg.queue if rcfg else None),
            account=project or (rcfg.account if rcfg else None),
        ),
    )
    job = Job(spec)
    try:
        executor.submit(job)
    except Exception as exc:  # psij.SubmitException: sbatch refused it (bad queue, too big)
        raise OSError(f"sbatch refused the pilot job: {exc}") from None
    log.info("pilot job submitted to SLURM: %s (%d nodes, %d min)", job.native_id, nodes, minutes)
    return SlurmJob(job, executor, sandbox)
