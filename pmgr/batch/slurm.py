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

A failed query is not the job's end.  PSI/J marks every job it follows FAILED when squeue
could not be run (at once) or failed three times in a row ("Failed to poll for job status"):
a slurmctld restarting for a few seconds, at a poll interval of 1 s, ended every pilot.  Here
such a FAILED is a failed query, not the job's state: the job is followed anew (PSI/J's
attach) after a back-off of queue_poll_interval x 1, 2, 4 s; QUERY_TRIES failed queries in a
row (about 20 poll intervals, each of them three failed squeue runs by PSI/J's own count, or
one that could not be run) and the job counts as lost:
poll() says 1, describe() why ("SLURM could not be asked about job N: ..."), and the job is
asked to end (scancel), so that nothing runs on that the client has given up.  A query that
answers starts the count again.
"""

from __future__ import annotations

import importlib
import io
import logging
import math
import os
import shlex
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("pmgr.batch.slurm")
J = TypeVar("J", bound="SlurmJob")  # the job class follow_psij makes (PbsJob, LsfJob are ones)
TIME_MARGIN = 120  # seconds added to the pilot's runtime for SLURM's time limit
QUERY_TRIES = 4  # failed queries in a row (back-off between them) before the job counts as lost
# what PSI/J's queue poll thread says when it failed the job for a query that failed
QUERY_FAILED = (
    "Failed to poll for job status",
    "Error updating job statuses",
    "Failed to update job status",
)


PSIJ_CONFIGS = {  # each PSI/J batch executor's own config class
    "slurm": "psij.executors.batch.slurm:SlurmExecutorConfig",
    "pbs": "psij.executors.batch.pbs:PBSExecutorConfig",
    "lsf": "psij.executors.batch.lsf:LsfExecutorConfig",
}


class SlurmJob:
    SYSTEM = "SLURM"  # (pmgr/batch/pbs.py and lsf.py follow their jobs with this class)
    CANCEL = "scancel"
    # whole nodes, every CPU of each (`--exclusive`): asked for one process a node and no
    # more, a partition that shares nodes gives the job one CPU a node and other jobs the
    # rest, while the pilot places units on all of them (and a unit's srun step beside the
    # node daemons' finds "More processors requested than permitted")
    EXCLUSIVE = True

    def __init__(self, job, executor, sandbox: str, interval: float = 30.0) -> None:
        self.job = job
        self.executor = executor
        self.sandbox = sandbox
        self.pid = job.native_id  # the SLURM job id
        self.interval = interval  # PSI/J's queue poll interval
        self._canceled = False
        self.failed_queries = 0  # in a row
        self.first_failed: float | None = None  # when the first of them failed
        self.retry_at: float | None = None  # when the job is followed anew
        self.gave_up: str | None = None  # why the job counts as lost

    @property
    def batch_state(self) -> str:
        return str(self.job.status.state)

    def _query_failed(self, status) -> bool:
        """The job is FAILED because a query failed (PSI/J's poll thread), not by SLURM."""
        return str(status.state) == "FAILED" and (status.message or "").startswith(QUERY_FAILED)

    def _follow(self, status) -> bool:
        """Handle a failed query: True while the job's state is unknown (retrying)."""
        from psij import Job

        now = time.monotonic()
        if self.retry_at is None:  # a new failure: count it, back off, then follow anew
            self.failed_queries += 1
            self.first_failed = self.first_failed or now
            last = status.message.strip().splitlines()[-1][:300]
            if self.failed_queries >= QUERY_TRIES:
                self.gave_up = (
                    f"{self.SYSTEM} could not be asked about job {self.pid}: "
                    f"{self.failed_queries} "
                    f"queries failed in a row over {now - self.first_failed:.0f} s ({last})"
                )
                log.error("%s; the job is canceled", self.gave_up)
                self._scancel()
                return False
            delay = self.interval * 2 ** (self.failed_queries - 1)
            log.warning(
                "%s job %s: a query failed (%d of %d), asking again in %g s: %s",
                self.SYSTEM,
                self.pid,
                self.failed_queries,
                QUERY_TRIES,
                delay,
                last,
            )
            self.retry_at = now + delay
        elif now >= self.retry_at:
            self.retry_at = None
            job = Job()
            self.executor.attach(job, self.pid)  # PSI/J's poll thread follows it again
            self.job = job
        return True

    def poll(self) -> int | None:
        """None while the job is queued or running (or a failed query is retried); its exit
        code once it ended (-15 when canceled, 1 when it failed without one, or when SLURM
        could not be asked about it QUERY_TRIES times in a row)."""
        if self.gave_up:
            return 1
        status = self.job.status
        if self._query_failed(status):
            return None if self._follow(status) else 1
        if str(status.state) != "NEW" and self.failed_queries:
            log.info("%s job %s: answered again (%s)", self.SYSTEM, self.pid, status.state)
            self.failed_queries, self.first_failed = 0, None
        if not status.state.final:
            return None
        name = str(status.state)
        if name == "COMPLETED":
            return status.exit_code or 0
        if name == "CANCELED":
            return -15
        return status.exit_code if status.exit_code not in (None, 0) else 1

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while True:
            self.job.wait(timeout=timedelta(seconds=max(0.0, deadline - time.monotonic())))
            code = self.poll()
            if code is not None or time.monotonic() >= deadline:
                return code
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))  # (a retried query)

    def _scancel(self) -> None:
        """scancel (qdel, bkill), bounded, whatever PSI/J thinks of the job's state."""
        try:
            subprocess.run([self.CANCEL, str(self.pid)], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.error("%s of job %s failed: %s", self.CANCEL, self.pid, exc)

    def cancel(self) -> None:
        if self._canceled or self.gave_up:
            return
        if self._query_failed(self.job.status):  # its state unknown: ask SLURM to end it
            self._canceled = True
            self._scancel()
            return
        if self.job.status.state.final:
            return
        self._canceled = True
        try:
            self.executor.cancel(self.job)
        except Exception as exc:  # PSI/J raises SubmitException and others
            log.error("%s of job %s failed: %s", self.CANCEL, self.pid, exc)

    def kill(self) -> None:
        self.cancel()

    def describe(self) -> str:
        status = self.job.status
        parts = [self.gave_up or f"{self.SYSTEM} job {self.pid} {status.state}"]
        if status.message and not self.gave_up:
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
    exclude: list[str] | None = None,
    **_,
) -> SlurmJob:
    """A Submitter (pmgr/batch/__init__.py): the pilot job through PSI/J's SLURM executor.
    `exclude`: nodes the job must not get (a job that grows a pilot: the pilot's own nodes,
    `#SBATCH --exclude`; PBS and LSF jobs hold whole nodes, exclusively, anyway)."""
    options = {"slurm.exclude": ",".join(exclude)} if exclude else None
    return submit_psij(
        "slurm", SlurmJob, argv, env, sandbox, nodes, runtime, queue, project, rcfg, options
    )


def plain_directives(executor, options: dict) -> None:
    """PSI/J writes a custom attribute's value shell-quoted inside its template's own double
    quotes: `#BSUB -alloc_flags "'gpumps nvme'"`, `#SBATCH --constraint="'a&b'"`, which bsub
    and sbatch read with the single quotes.  A directive is a comment to the shell, read by the
    batch system: the value goes between the double quotes as it is (the resource config
    refuses a value with a double quote or a newline, and the one option of the submitter's
    own, a grow job's --exclude, is node names of letters, digits, . _ -)."""
    generate = executor.generate_submit_script
    quoted = {f'"{shlex.quote(v)}"': f'"{v}"' for v in options.values() if shlex.quote(v) != v}

    def generate_plain(job, context, submit_file) -> None:
        text = io.StringIO()
        generate(job, context, text)
        lines = text.getvalue().split("\n")
        for i, line in enumerate(lines):
            if line.startswith("#"):
                for was, plain in quoted.items():
                    line = line.replace(was, plain)
                lines[i] = line
        submit_file.write("\n".join(lines))

    executor.generate_submit_script = generate_plain


def _executor(name: str, job_class, sandbox: str, rcfg):
    """(PSI/J's executor `name`, its queue poll interval) for the pilot's jobs (the
    resource's psij_executor wins)."""
    try:
        from psij import JobExecutor
        from psij.executors.batch.batch_scheduler_executor import BatchSchedulerExecutorConfig
    except ImportError as exc:  # the `batch` extra
        raise OSError(
            f"psij-python is needed for {job_class.SYSTEM} pilots (pip install psij-python): {exc}"
        ) from None
    poll = int(rcfg.queue_poll_interval) if rcfg else 30
    work = Path(sandbox) / "psij"
    work.mkdir(parents=True, exist_ok=True)
    config_class = BatchSchedulerExecutorConfig
    if name in PSIJ_CONFIGS:
        module, _, attr = PSIJ_CONFIGS[name].partition(":")
        config_class = getattr(importlib.import_module(module), attr)
    config = config_class(
        work_directory=work,
        queue_polling_interval=poll,
        initial_queue_polling_delay=1,
        keep_files=True,
    )
    executor = JobExecutor.get_instance(
        (rcfg.psij_executor if rcfg else None) or name, config=config
    )
    return executor, poll


def follow_psij(name: str, job_class: type[J], job_id, sandbox: str, rcfg) -> J | None:
    """A job another client submitted (an attach), followed through PSI/J by its id."""
    if job_id is None:
        return None
    executor, poll = _executor(name, job_class, sandbox, rcfg)
    from psij import Job

    job = Job()
    executor.attach(job, str(job_id))  # (PSI/J's poll thread follows it)
    return job_class(job, executor, sandbox, poll)


def follow(job_id, sandbox: str, session_uid: str, rcfg=None) -> SlurmJob | None:
    """A Follower (pmgr/batch/__init__.py): SLURM job `job_id`."""
    return follow_psij("slurm", SlurmJob, job_id, sandbox, rcfg)


def submit_psij(
    name: str, job_class, argv, env, sandbox, nodes, runtime, queue, project, rcfg, options=None
) -> SlurmJob:
    """The pilot job through PSI/J's executor `name` (the resource's psij_executor wins): whole
    nodes, the runtime plus TIME_MARGIN, the queue and account, the resource's batch_options
    as PSI/J custom attributes ("pbs.l": ... -> `#PBS -l ...`) and `options` (more of them);
    followed by `job_class`."""
    executor, poll = _executor(name, job_class, sandbox, rcfg)  # (first: says psij is missing)
    from psij import Job, JobAttributes, JobSpec, ResourceSpecV1

    minutes = math.ceil((runtime + TIME_MARGIN) / 60)
    custom = dict(rcfg.batch_options) if rcfg and rcfg.batch_options else {}
    custom.update(options or {})  # (the submitter's own: a grow job's --exclude)
    spec = JobSpec(
        executable=argv[0],
        arguments=argv[1:],
        directory=Path(sandbox),
        environment={k: v for k, v in env.items() if k.startswith(("PILOT_", "PYTHONPATH"))},
        inherit_environment=True,
        stdout_path=Path(sandbox) / "bootstrap.out",
        stderr_path=Path(sandbox) / "bootstrap.log",
        resources=ResourceSpecV1(
            node_count=nodes, processes_per_node=1, exclusive_node_use=job_class.EXCLUSIVE
        ),
        attributes=JobAttributes(
            duration=timedelta(minutes=minutes),
            queue_name=queue or (rcfg.queue if rcfg else None),
            account=project or (rcfg.account if rcfg else None),
            custom_attributes=custom or None,
        ),
    )
    if custom:
        plain_directives(executor, custom)
    job = Job(spec)
    try:
        executor.submit(job)
    except Exception as exc:  # psij.SubmitException: the batch system refused it
        raise OSError(f"{job_class.SYSTEM} refused the pilot job: {exc}") from None
    log.info(
        "pilot job submitted to %s: %s (%d nodes, %d min)",
        job_class.SYSTEM,
        job.native_id,
        nodes,
        minutes,
    )
    return job_class(job, executor, sandbox, poll)
