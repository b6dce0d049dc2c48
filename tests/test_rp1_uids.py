"""RP 1.x's task uids: a task may name its own (`TaskDescription.uid`); generated ones never
take one a task named, before or in the same call, and a named one already taken is refused
(pmgr/compat/rp1/tasks.py `_Call.uid_for`)."""

from __future__ import annotations

import pytest

import pilot as rp


def _td(uid: str | None = None) -> rp.TaskDescription:
    return rp.TaskDescription({"executable": "/bin/true", **({"uid": uid} if uid else {})})


def test_generated_task_uids_never_take_one_a_task_named(session):
    tmgr = rp.TaskManager(session)  # (no pilot: the tasks wait at the client)
    try:
        named = tmgr.submit_tasks([_td("task.000001"), _td("task.000003")])
        generated = tmgr.submit_tasks([_td() for _ in range(4)])
        uids = [t.uid for t in named + generated]
        assert uids[:2] == ["task.000001", "task.000003"]
        assert len(set(uids)) == 6, uids  # (before: task.000001 and task.000003 twice)
        assert [t.uid for t in generated] == [
            "task.000000", "task.000002", "task.000004", "task.000005"
        ]  # fmt: skip
        mixed = tmgr.submit_tasks([_td(), _td("task.000099"), _td()])
        assert [t.uid for t in mixed] == ["task.000006", "task.000099", "task.000007"]
        with pytest.raises(ValueError, match=r"uid='task.000008' is taken"):
            tmgr.submit_tasks([_td(), _td("task.000008")])  # (the first took it, this call)
        with pytest.raises(ValueError, match=r"uid='task.000001' is taken"):
            tmgr.submit_tasks(_td("task.000001"))
        assert len(tmgr.list_tasks()) == 9
    finally:
        tmgr.cancel_tasks()
