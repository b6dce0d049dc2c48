"""The workflow processor: runs one workflow (pipelines of stages of tasks) on a TaskManager's
pilot, as EnTK's semantics say, in the thread that called AppManager.run().

Protocol.  Everything the workflow's objects go through happens in run()'s thread; other threads
only put events on one queue:
    ("task", t)    the TaskManager's callback (the session's delivery thread, or the
                   submitting one): pilot task t reached a final state
    ("pilot", p)   the PilotManager's callback: the pilot ended
    ("wake", None) a pipeline was suspended, resumed or given stages (Pipeline.watch), from
                   a post_exec or any thread of the script
    ("stop", why)  AppManager.terminate() from another thread
The loop: schedule what may start, then take one event (waiting up to POLL seconds; a pilot
that ended is seen then even if its event was lost) and act on it, until every pipeline is
final.  Scheduling, for each pipeline not final and not SUSPENDED: DESCRIBED -> SCHEDULING; if
it is past its last stage, DONE; else its current stage, when DESCRIBED, starts (its reconfig,
pmgr/compat/entk/partitions.py, then SCHEDULING), and its DESCRIBED tasks (all at first; later ones
a post_exec added, or failed ones resubmitted) go to the pilot in one submit_tasks call per round:
task SCHEDULING -> SCHEDULED -> SUBMITTING, stage SCHEDULED.  A task's end: DONE, FAILED (exit_code,
exception: the pilot task's reason, exception_detail: its traceback or the end of its stderr;
reported) or CANCELED; with resubmit_failed a FAILED task runs again (up to `reattempts` runs), with
error_is_fatal its stage and pipeline end FAILED and run() raises. When every task of a stage ended
(CANCELED ones too: EnTK would wait for them forever), the stage is DONE, its post_exec runs (here:
an exception in it ends run() with EnTKError, and so does the pilot's end: what runs is canceled
then, and every pipeline, every stage that had started and every task that had been submitted
ends CANCELED, as for terminate(); stages never started and their tasks stay DESCRIBED), and the
pipeline moves on, unless it is SUSPENDED:
then it moves on once resumed.  A pilot that ends before the workflow does ends run() with EnTKError
naming its state and reason.
"""

from __future__ import annotations

import queue

from pilot import states as S
from pilot.pmgr.compat.entk import states
from pilot.pmgr.compat.entk.describe import Catalog, task_description
from pilot.pmgr.compat.entk.errors import EnTKError, EnTKMissingError
from pilot.pmgr.compat.entk.partitions import Partitions
from pilot.pmgr.compat.entk.report import Reporter

POLL = 1.0  # seconds between looks at the pilot when no event comes
DETAIL = 2000  # the last characters of a failed task's stderr kept as its exception_detail
OUTCOME = {S.DONE: states.DONE, S.FAILED: states.FAILED, S.CANCELED: states.CANCELED}


class Processor:
    def __init__(self, pipelines, tmgr, pilot, catalog: Catalog, report: Reporter, retry: int):
        """retry: how many runs a FAILED task gets in all (1: no resubmission)."""
        self.pipelines = list(pipelines)
        self.tmgr, self.pilot, self.catalog, self.report = tmgr, pilot, catalog, report
        self.retry = retry
        self.partitions = Partitions(pilot)
        self.events: queue.Queue = queue.Queue()
        self.running: dict = {}  # pilot task uid -> (task, stage, pipeline)
        self.turns: dict = {}  # stage uid -> iterator of partition uids (Partitions.for_stage)
        self.runs: dict = {}  # task uid -> how many times it was submitted
        self.stopped: str | None = None
        self.fatal: str | None = None  # the error_is_fatal task that failed, and why

    # -- events from other threads ------------------------------------------------------------
    def on_task(self, task, state) -> None:
        if state in S.FINAL:
            self.events.put(("task", task))

    def on_pilot(self, pilot, state) -> None:
        if state in S.FINAL:
            self.events.put(("pilot", pilot))

    def wake(self) -> None:
        self.events.put(("wake", None))

    def stop(self, why: str) -> None:
        self.events.put(("stop", why))

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        for p in self.pipelines:
            p.watch(self.wake)
        try:
            while True:
                if self.pilot.final:  # (nothing more starts on a pilot that ended)
                    self.handle("pilot", self.pilot)
                self.schedule()
                failed = [p for p in self.pipelines if p.state == states.FAILED]
                if failed:  # (EnTK's words first; then which task, and the rest canceled)
                    why = f"Pipeline {failed[0].uid} failed ({self.fatal})"
                    self.cancel(why)
                    raise EnTKError(why)
                if all(p.state in states.FINAL for p in self.pipelines):
                    return
                try:
                    kind, obj = self.events.get(timeout=POLL)
                except queue.Empty:
                    kind, obj = ("pilot", self.pilot) if self.pilot.final else ("wake", None)
                self.handle(kind, obj)
        except BaseException as exc:  # (a post_exec raised, the pilot ended, ...: what runs is
            if self.stopped is None:  # canceled, every task, stage and pipeline ends final)
                self.cancel(str(exc) or type(exc).__name__)
            raise
        finally:
            for p in self.pipelines:
                p.unwatch(self.wake)

    def handle(self, kind: str, obj) -> None:
        if kind == "task":
            self.task_ended(obj)
        elif kind == "pilot" and obj is self.pilot:
            self.drain()
            raise EnTKError(
                f"{self.pilot.uid} ended {self.pilot.state} ({self.pilot.reason or 'no reason'})"
                f" before the workflow did: {self.unfinished()}"
            )
        elif kind == "stop":
            self.cancel(obj)

    def drain(self) -> None:
        """(the pilot ended) What its tasks said before it."""
        while True:
            try:
                kind, obj = self.events.get_nowait()
            except queue.Empty:
                return
            if kind == "task":
                self.task_ended(obj)

    def unfinished(self) -> str:
        return ", ".join(
            f"{p.luid} {p.state}" for p in self.pipelines if p.state not in states.FINAL
        )

    def cancel(self, why: str) -> None:
        """terminate() while it runs, or a pipeline failed: what runs is canceled, its tasks
        and stages and the other pipelines end CANCELED."""
        self.stopped = why
        running, self.running = self.running, {}
        if running and not self.pilot.final:  # (a pilot that ended ended them)
            self.tmgr.cancel_tasks(list(running))
        for task, stage, _ in running.values():
            self.move(task, states.CANCELED)
            if stage.state not in states.FINAL:
                self.move(stage, states.CANCELED)
        for p in self.pipelines:
            if p.state not in states.FINAL:
                self.move(p, states.CANCELED)

    # -- scheduling ------------------------------------------------------------------------------
    def schedule(self) -> None:
        batch = []
        for pipe in self.pipelines:
            with pipe.lock:
                if pipe.state in states.FINAL or pipe.state == states.SUSPENDED:
                    continue
                if pipe.state == states.INITIAL:
                    self.move(pipe, states.SCHEDULING)
                stage = pipe.stage_now()
                if stage is None:
                    self.move(pipe, states.DONE)
                    continue
            if stage.state == states.INITIAL:
                self.start(stage, pipe)
            batch += [(t, stage, pipe) for t in stage.ordered_tasks() if t.state == states.INITIAL]
        if batch:
            self.submit(batch)

    def start(self, stage, pipe) -> None:
        """A stage starts: its reconfig, then where its tasks go."""
        if not stage.tasks:
            raise EnTKMissingError(f"Stage {stage.luid}: tasks is empty (add_tasks)")
        if stage.reconfig:
            spec = stage.reconfig
            self.partitions.reconfig(f"Stage {stage.luid}", spec["stop"], spec["start"])
            self.report.info(f"Reconfig before {stage.luid}: stop {spec['stop']}, start "
                             f"{[d.name or d.to_stored() for d in spec['start']]}")  # fmt: skip
        self.turns[stage.uid] = self.partitions.for_stage(stage)
        self.move(stage, states.SCHEDULING)

    def submit(self, batch: list) -> None:
        descs, stages = [], []
        for task, stage, pipe in batch:
            task.parent_stage = {"uid": stage.uid, "name": stage.name}
            task.parent_pipeline = {"uid": pipe.uid, "name": pipe.name}
            self.move(task, states.SCHEDULING)
            n = self.runs.get(task.uid, 0)
            rts = task.uid if n == 0 else f"{task.uid}.{n}"
            task.rts_uid = rts
            turn = self.turns.get(stage.uid)
            descs.append(
                task_description(task, stage, pipe, rts, self.catalog, next(turn) if turn else None)
            )
            self.runs[task.uid] = n + 1
            self.move(task, states.SCHEDULED)
            if stage not in stages:
                stages.append(stage)
        for stage in stages:
            if stage.state == states.SCHEDULING:
                self.move(stage, states.SCHEDULED)
        for (task, stage, pipe), rts in zip(batch, self.tmgr.make_tasks(descs)):
            self.running[rts.uid] = (task, stage, pipe)
            self.move(task, states.SUBMITTING)

    # -- ends -------------------------------------------------------------------------------------
    def task_ended(self, rts) -> None:
        entry = self.running.pop(rts.uid, None)
        if entry is None:
            return
        task, stage, pipe = entry
        task.exit_code = rts.exit_code
        task.path = rts.sandbox or ""
        outcome = OUTCOME[rts.state]
        task.exception = task.exception_detail = None  # (an earlier run's are not this one's)
        if outcome == states.FAILED:
            task.exception = rts.exception or rts.reason
            task.exception_detail = rts.exception_detail or rts.stderr[-DETAIL:] or None
        self.move(task, outcome)
        if outcome == states.FAILED:
            self.report.failed("Task", task)
            if self.runs.get(task.uid, 0) < self.retry:
                self.move(task, states.INITIAL)  # (resubmit_failed) it runs again
                return
            if task.error_is_fatal:
                self.fatal = f"task {task.luid}: {task.exception}"
                self.move(stage, states.FAILED)
                with pipe.lock:
                    self.move(pipe, states.FAILED)
                return
        if stage.ended() and stage.state not in states.FINAL and pipe.state not in states.FINAL:
            self.stage_ended(stage, pipe)

    def stage_ended(self, stage, pipe) -> None:
        self.move(stage, states.DONE)
        if stage.post_exec is not None:
            try:
                stage.post_exec()
            except Exception as exc:
                raise EnTKError(f"post_exec of stage {stage.luid} raised {exc!r}") from exc
        pipe.next_stage()
        if pipe.state == states.SUSPENDED:
            self.report.update(pipe)

    def move(self, obj, state: str) -> None:
        obj.state = state
        self.report.update(obj)
