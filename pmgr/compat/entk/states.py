"""RADICAL-EnTK's state names (`pilot.entk.states`), and which of them each kind of object takes.

What moves an object from state to state (pmgr/compat/entk/processor.py):

    pipeline  DESCRIBED -> SCHEDULING (its first stage is scheduled) -> DONE (its last stage
              ended) | FAILED (a task of it with error_is_fatal failed) | CANCELED (terminate()
              while it ran); SUSPENDED in between, by Pipeline.suspend(), until resume() puts
              back the state it had
    stage     DESCRIBED -> SCHEDULING (its tasks are being submitted) -> SCHEDULED (all were)
              -> DONE (every task ended) | FAILED (error_is_fatal) | CANCELED
    task      DESCRIBED -> SCHEDULING -> SCHEDULED -> SUBMITTING (handed to the pilot) ->
              DONE | FAILED | CANCELED, as its pilot task ended (resubmit_failed: FAILED ->
              DESCRIBED, and it runs again)

EnTK's COMPLETED ('EXECUTED') is a task state its RADICAL-Pilot back end never sets either: it is
here for scripts that name it.  The numbers order the states as EnTK's `state_numbers` do.
"""

from __future__ import annotations

INITIAL = "DESCRIBED"
SCHEDULING = "SCHEDULING"
SUSPENDED = "SUSPENDED"
SCHEDULED = "SCHEDULED"
SUBMITTING = "SUBMITTING"
COMPLETED = "EXECUTED"
DONE = "DONE"
FAILED = "FAILED"
CANCELED = "CANCELED"

FINAL = [DONE, FAILED, CANCELED]

state_numbers = {
    INITIAL: 1,
    SCHEDULING: 2,
    SUSPENDED: 3,
    SCHEDULED: 4,
    SUBMITTING: 5,
    COMPLETED: 7,
    DONE: 10,
    FAILED: 10,
    CANCELED: 10,
}

PIPELINE_STATES = (INITIAL, SCHEDULING, SUSPENDED, DONE, FAILED, CANCELED)
STAGE_STATES = (INITIAL, SCHEDULING, SCHEDULED, DONE, FAILED, CANCELED)
TASK_STATES = (INITIAL, SCHEDULING, SCHEDULED, SUBMITTING, COMPLETED, DONE, FAILED, CANCELED)
