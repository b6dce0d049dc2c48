"""EnTK objects put together wrongly are refused when they are put together (no processes):
before, each of these ran, then waited for ever or dropped a task without a word."""

from __future__ import annotations

import pytest

import pilot.entk as re


def stage_of(*tasks):
    s = re.Stage()
    s.add_tasks(list(tasks))
    return s


def task():
    t = re.Task()
    t.executable = "/bin/true"
    return t


def test_a_task_object_in_two_stages_is_refused():
    t = task()
    first, second = stage_of(t), re.Stage()
    with pytest.raises(re.EnTKValueError, match=rf"add_tasks='{t.uid}' must be a Task of no "
                       rf"other stage \(it is in {first.uid}"):  # fmt: skip
        second.add_tasks(t)
    first.add_tasks(t)  # (again into its own stage: kept once, as before)
    assert len(first.tasks) == 1


def test_two_tasks_of_one_uid_in_a_stage_are_refused():
    a = re.Task({"uid": "x", "executable": "/bin/true"})
    b = re.Task({"uid": "x", "executable": "/bin/false"})
    with pytest.raises(re.EnTKValueError, match="must be Tasks of unique uids in a stage"):
        stage_of(a, b)
    s = stage_of(a)
    with pytest.raises(re.EnTKValueError, match="must be Tasks of unique uids in a stage"):
        s.add_tasks(b)


def test_a_stage_object_in_two_pipelines_or_twice_in_one_is_refused():
    s = stage_of(task())
    p1, p2 = re.Pipeline(), re.Pipeline()
    p1.add_stages(s)
    with pytest.raises(re.EnTKValueError, match=rf"it is in {p1.uid}; a Stage object runs once"):
        p2.add_stages(s)
    with pytest.raises(re.EnTKValueError, match=rf"it is in {p1.uid}; a Stage object runs once"):
        p1.add_stages(s)  # (a post_exec adding the stage that just ran: it hung)
    twice = stage_of(task())
    with pytest.raises(re.EnTKValueError, match="a Stage object runs once"):
        p2.add_stages([twice, twice])
    assert p2.stages == []  # (nothing of a refused call is added)


def test_a_stage_added_to_a_pipeline_that_ended_is_refused():
    p = re.Pipeline()
    p.add_stages(stage_of(task()))
    p.state = re.states.DONE  # (as the processor sets it once every stage ended)
    with pytest.raises(re.EnTKValueError, match="a Stage of a pipeline that has not ended"):
        p.add_stages(stage_of(task()))
