"""What an EnTK run tells its user on stdout, in EnTK's words:

    EnTK session: session.20240101.120000.abcdef
    Update: pipeline.0000 state: SCHEDULING           (every state change of a pipeline,
    Update: pipeline.0000.stage.0000 state: SCHEDULING  stage and task, by its luid)
    Task task.000003 failed: exit code 1               (a task that ended FAILED: its
    cat: nope: No such file or directory                exception, then its detail)
On by default, as EnTK's reporter is; RADICAL_ENTK_REPORT (or RADICAL_REPORT) set to False, 0
or no turns it off.
"""

from __future__ import annotations

import os
import sys

OFF = ("false", "0", "no", "off")


class Reporter:
    def __init__(self) -> None:
        self.on = all(
            os.environ.get(v, "True").strip().lower() not in OFF
            for v in ("RADICAL_ENTK_REPORT", "RADICAL_REPORT")
        )

    def info(self, text: str) -> None:
        if self.on:
            print(text, flush=True)

    def update(self, obj) -> None:
        """One state change of a pipeline, stage or task."""
        if self.on:
            print(f"Update: {obj.luid} state: {obj.state}", flush=True)

    def failed(self, kind: str, obj) -> None:
        if not self.on:
            return
        if kind == "Task":
            detail = (obj.exception_detail or "").rstrip()
            print(f"{kind} {obj.uid} failed: {obj.exception}\n{detail}", file=sys.stdout)
        else:
            print(f"{kind} {obj.uid} failed", flush=True)
