"""`snakemake --executor pilot`: every Snakemake job is a unit of one pilot.

The protocol with Snakemake (snakemake-interface-executor-plugins 9.x, a RemoteExecutor):

    Snakemake                         this executor
    __init__ (once)                   the pilot run starts (pmgr/compat/snakemake/pilot_run.py):
                                      a session and a pilot, or the pilot of --pilot-session
    run_job(job)                      what the job asks (jobs.py) -> a unit: `/bin/bash -c` of
                                      Snakemake's own job command (format_job_exec: `python -m
                                      snakemake --target-jobs ... --mode remote`), in the
                                      workflow's directory, its output to the job's log file,
                                      --envvars in its environment; report_job_submission.  A
                                      job that can never fit fails at once (report_job_error,
                                      naming the resource), alone
    check_active_jobs (wait thread)   the jobs whose units ended: report_job_success, or
                                      report_job_error with how the unit ended (exit code,
                                      time limit, the pilot's reason) and its log file
    sleep (wait thread)               until a unit ends (its future's callback), at most
                                      WAKE_EVERY s: no status polling, no latency added
    cancel_jobs (Ctrl-C, --cancel)    units not started dropped, running ones CANCELED
    shutdown                          the wait thread stops; the pilot run ends: the pilot
                                      CANCELED with its session, or left up (--pilot-keep)

A group job is one unit: Snakemake runs its jobs inside it (`--local-groupid`), on the cores
the group asks, on one node.
"""

from __future__ import annotations

import asyncio
import os
import threading

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from pilot.pmgr.compat.snakemake.jobs import JobRefused, log_path, refusal, request
from pilot.pmgr.compat.snakemake.settings import DEFAULT_LOGDIR, ExecutorSettings, OptionError

# Snakemake imports every installed plugin in every job it runs (`python -m snakemake` in a
# unit, under any executor): the pilot's client (pilot_run: ~170 ms of imports, measured on a
# 2-core machine) is imported only where a workflow runs with --executor pilot.

WAKE_EVERY = 1.0  # seconds the wait thread sleeps at most when no unit ends (shutdown's bound)
LOG_TAIL = 20  # lines of a failed job's output in Snakemake's error message
# a job's unit: /bin/bash -c JOB_SCRIPT snakemake-job WORKDIR LOGFILE COMMAND
JOB_SCRIPT = 'cd -- "$1" || exit 1\nexec >"$2" 2>&1\nexec /bin/bash -c "$3"\n'
CANCEL_REASON = "canceled by Snakemake (Ctrl-C, or the workflow was canceled)"


class Executor(RemoteExecutor):
    """Snakemake's executor for the pilot (see the module's header)."""

    def __init__(self, workflow, logger) -> None:
        # set by a unit's end, it wakes the wait thread, which RemoteExecutor starts before
        # __post_init__: it must be there first
        self._changed = threading.Event()
        super().__init__(workflow, logger)

    def __post_init__(self) -> None:
        from pilot.pmgr.compat.snakemake.pilot_run import PilotRun, PilotRunError

        settings = self.workflow.executor_settings
        self.settings = settings if settings is not None else ExecutorSettings()
        self.logdir = os.path.abspath(str(self.settings.logdir or DEFAULT_LOGDIR))
        try:
            self.run = PilotRun(self.settings)
        except PilotRunError as exc:  # (said as Snakemake says a bad argument: one line)
            raise OptionError(str(exc)) from None
        pilot = self.run.pilot
        self.logger.info(
            f"Jobs run as units of {pilot.uid} ({pilot.description.resource}, "
            f"{pilot.size['cores']} cores, {pilot.size['gpus']} GPUs) in session "
            f"{self.run.session.uid}"
        )

    # -- submit --------------------------------------------------------------------------------
    def run_job(self, job: JobExecutorInterface) -> None:
        info = SubmittedJobInfo(job=job, aux={})
        try:
            asked = request(job)
            why = refusal(job, asked, self.run.node, self.run.pilot.uid)
        except JobRefused as exc:
            why = str(exc)
        if why is None:
            why = self.run.ended_early
        if why is not None:
            self.report_job_error(info, msg=f"{_name(job)}: {why}\n")
            return
        log = log_path(self.logdir, job)
        os.makedirs(os.path.dirname(log), exist_ok=True)
        from pilot.descriptions import ComputeUnitDescription

        command = self.format_job_exec(job)
        desc = ComputeUnitDescription(
            executable="/bin/bash",
            arguments=["-c", JOB_SCRIPT, "snakemake-job", os.getcwd(), log, command],
            shell=False,
            cores=asked.cores,
            gpus=asked.gpus,
            environment=self.envvars(),
            name=f"snakemake.{job.name}.{job.jobid}",
            pilot=self.run.pilot.uid,
        )
        fut = self.run.submit(desc, asked.runtime)
        info.aux.update(future=fut, log=log, runtime=asked.runtime)
        self.report_job_submission(info)
        fut.add_done_callback(lambda _: self._changed.set())

    # -- states --------------------------------------------------------------------------------
    async def check_active_jobs(self, active_jobs: list[SubmittedJobInfo]):
        self._changed.clear()  # (before the look: an end after it wakes the next sleep)
        for info in active_jobs:
            if info.aux["future"].done():
                self._report(info)
            else:
                yield info

    async def sleep(self) -> None:
        await asyncio.to_thread(self._changed.wait, WAKE_EVERY)

    def _report(self, info: SubmittedJobInfo) -> None:
        fut, log = info.aux["future"], info.aux["log"]
        if fut.cancelled():
            self.report_job_error(info, msg=f"{_name(info.job)}: {CANCEL_REASON}\n")
            return
        from pilot import states as S

        unit = fut.result()
        if unit.state == S.DONE:
            if not self.settings.keep_successful_logs:
                _remove(log, self.logdir)
            self.report_job_success(info)
            return
        if unit.state == S.CANCELED and fut.timed_out:
            why = (
                f"ran past its resources.runtime of {info.aux['runtime'] / 60:g} min and was "
                "canceled"
            )
        elif unit.state == S.CANCELED:
            why = f"canceled: {unit.reason}"
        elif unit.exit_code is not None:
            why = f"exited with code {unit.exit_code}"
        else:
            why = f"failed: {unit.reason}"
        msg = f"{_name(info.job)} ({unit.uid} of {self.run.pilot.uid}) {why}\n{_tail(log)}"
        self.report_job_error(info, msg=msg, aux_logs=[log])

    # -- cancel and end ------------------------------------------------------------------------
    def cancel_jobs(self, active_jobs: list[SubmittedJobInfo]) -> None:
        self.run.cancel([info.aux["future"] for info in active_jobs], CANCEL_REASON)

    def shutdown(self) -> None:
        self._changed.set()
        super().shutdown()  # (the wait thread stops, the job scripts' directory goes)
        kept = self.run.end()
        if kept is not None:
            self.logger.info(
                f"{self.run.pilot.uid} left running in session {kept}: run the next workflow "
                f"in it with --pilot-session {kept}"
            )


def _name(job) -> str:
    kind = "group job" if job.is_group() else "rule"
    return f"{kind} {job.name} ({job.jobid})"


def _tail(log: str) -> str:
    try:
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()[-LOG_TAIL:]
    except OSError:
        return ""
    return "".join(f"    {line}\n" for line in lines)


def _remove(path: str, logdir: str) -> None:
    """Remove a job's log file, and the folders it leaves empty below `logdir`."""
    try:
        os.unlink(path)
        d = os.path.dirname(path)
        while d != logdir and d.startswith(logdir + os.sep):
            os.rmdir(d)  # (OSError when not empty: another job's log is there)
            d = os.path.dirname(d)
    except OSError:
        pass
