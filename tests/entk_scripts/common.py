"""What the EnTK-style scripts here share: a task that records when it started and ended, and
the summary every script prints last (one line, `RESULT {json}`), which tests/test_entk.py
reads.  A script runs in a fresh working directory; its times come back there as times.txt
(AppManager.outputs)."""

from __future__ import annotations

import json

import pilot.entk as re

TIMES = "$RP_PILOT_SANDBOX/times.txt"  # every task appends its lines there (O_APPEND)


def timed(label: str, seconds: float) -> re.Task:
    """A task named after the last word of `label` that sleeps `seconds`; its pre_exec and
    post_exec lines append '<label> start|end <epoch>' to the pilot's times.txt."""
    t = re.Task()
    t.name = label.rsplit(".", 1)[-1]
    t.executable = "/bin/sleep"
    t.arguments = [str(seconds)]
    t.pre_exec = [f'echo "{label} start $(date +%s.%N)" >> {TIMES}']
    t.post_exec = [f'echo "{label} end $(date +%s.%N)" >> {TIMES}']
    return t


def stage(name: str, tasks: list) -> re.Stage:
    s = re.Stage()
    s.name = name
    s.add_tasks(tasks)
    return s


def pipeline(name: str, stages: list) -> re.Pipeline:
    p = re.Pipeline()
    p.name = name
    p.add_stages(stages)
    return p


def summary(pipelines, **extra) -> None:
    """Print what EnTK would show of the pipelines (names, states, histories, tasks)."""
    doc = {
        p.name: {
            "state": p.state,
            "history": p.state_history,
            "stages": [
                {
                    "name": s.name,
                    "state": s.state,
                    "history": s.state_history,
                    "tasks": {
                        t.name: {
                            "state": t.state,
                            "exit_code": t.exit_code,
                            "path": t.path,
                            "history": t.state_history,
                            "exception": t.exception,
                        }
                        for t in s.tasks
                    },
                }
                for s in p.stages
            ],
        }
        for p in pipelines
    }
    print("RESULT " + json.dumps({"pipelines": doc, **extra}), flush=True)
