"""RADICAL-EnTK's Task: what one pilot task runs, as EnTK's fields (plain data, validated as
each field is set, dict-style access too: task['executable']), and what came of it.

Set by the user (EnTK's names and defaults):
    uid            given to Task({'uid': ...}) only (default task.NNNNNN); never reassigned
    name           letters, digits, spaces and '.' (references name it: '_' separates them)
    executable, arguments, environment, sandbox (relative to the pilot sandbox; default the
    task's uid: tasks that name one sandbox share it), pre_launch, pre_exec, post_exec,
    post_launch, stdout, stderr (file names in the sandbox), metadata
    cpu_reqs, gpu_reqs    pmgr/compat/entk/reqs.py
    upload_input_data, copy_input_data, link_input_data, move_input_data,
    copy_output_data, link_output_data, move_output_data, download_output_data
                   data directives 'source > target' or 'path' (pmgr/compat/entk/references.py:
                   $SHARED and $Pipeline_<p>_Stage_<s>_Task_<t> references)
    tags           {'colocate': a task's name or uid}: run where that task ran
    error_is_fatal True: the task's failure fails its stage and pipeline, and run() raises
Set as it runs (pmgr/compat/entk/processor.py): state, state_history, exit_code, exception,
exception_detail (the pilot task's reason and the end of its stderr), path (its sandbox),
rts_uid (the pilot task's uid), parent_stage, parent_pipeline ({'uid', 'name'}).
Refused when set, each saying why: lfs_per_process, mem_per_process (nothing accounts disk or
memory here), stage_on_error (output staging runs for tasks that end DONE), tags 'exclusive'.
"""

from __future__ import annotations

import itertools

from pilot.fields import Description, count, field_error, flag, str_dict, str_list
from pilot.pmgr.compat.entk import states
from pilot.pmgr.compat.entk.errors import EnTKError, EnTKMissingError, EnTKValueError, check_name
from pilot.pmgr.compat.entk.reqs import CpuReqs, GpuReqs, reqs_field

_COUNTER = itertools.count()  # task.000000, task.000001, ... (EnTK's, per process)
_MADE = itertools.count()  # the order tasks were made in (a stage submits them in it)
DATA_FIELDS = (
    "upload_input_data",
    "copy_input_data",
    "link_input_data",
    "move_input_data",
    "copy_output_data",
    "link_output_data",
    "move_output_data",
    "download_output_data",
)


def _owner(task) -> str:
    return f"Task {task.__dict__.get('uid', '')}".rstrip()


def _string(owner, field, value):
    if value is None:
        return ""
    if not isinstance(value, str) or "\0" in value:
        raise field_error(owner, field, value, "a string")
    return value


def _optional_string(owner, field, value):
    return None if value is None else _string(owner, field, value)


def _name(owner, field, value):
    return "" if value is None else check_name(_owner(owner), field, value)


def _uid(owner, field, value):
    raise EnTKError(f"{_owner(owner)}: uid is not allowed to be re-assigned")


def _state(owner, field, value):
    if value not in states.TASK_STATES:
        raise field_error(owner, field, value, f"one of {list(states.TASK_STATES)}")
    owner.state_history.append(value)
    return value


def _history(owner, field, value):
    value = str_list(owner, field, value)
    for i, s in enumerate(value):
        if s not in states.TASK_STATES:
            raise field_error(owner, f"{field}[{i}]", s, f"one of {list(states.TASK_STATES)}")
    return value


def _exit_code(owner, field, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise field_error(owner, field, value, "an integer or None")
    return value


def _parent(owner, field, value):
    if value is None:
        return {"uid": None, "name": None}
    if not isinstance(value, dict) or set(value) - {"uid", "name"}:
        raise field_error(owner, field, value, "{'uid': ..., 'name': ...}")
    return {"uid": value.get("uid"), "name": value.get("name")}


def _tags(owner, field, value):
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"colocate", "exclusive"}:
        raise field_error(owner, field, value, "None or {'colocate': a task's name or uid}")
    if value.get("exclusive"):
        raise field_error(
            owner, f"{field}['exclusive']", value["exclusive"], "unset: partitions are not kept "
            "apart per task here (give the stage a partition of its own: Stage.partition)"
        )  # fmt: skip
    if "colocate" in value and not isinstance(value["colocate"], str):
        raise field_error(owner, f"{field}['colocate']", value["colocate"], "a task's name or uid")
    return dict(value)


def _metadata(owner, field, value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise field_error(owner, field, value, "a dict")
    return value


def _unaccounted(what: str):
    def check(owner, field, value):
        value = count(0)(owner, field, value)
        if value:
            raise field_error(
                owner, field, value, f"0: no {what} is accounted here (declare a resource type "
                "in the resource config and use a partition of it)"
            )  # fmt: skip
        return value

    return check


def _stage_on_error(owner, field, value):
    if flag(owner, field, value):
        raise field_error(owner, field, value, "False: output staging runs for tasks that end DONE")
    return value


class Task(Description):
    """RADICAL-EnTK's Task (see the module's header for its fields).

    Plain data, each field validated as it is set (EnTKValueError / EnTKTypeError naming it);
    `task['executable']` reads and writes fields too.  A Task runs once (a new Task to run it
    again); two tasks are equal when their uids are.

    Args:
        from_dict (dict | None): fields to start with (EnTK's `Task(from_dict=...)`),
            `uid` among them (default task.NNNNNN).

    Raises:
        EnTKValueError: `from_dict` not a dict, or a field's value not accepted.

    Attributes:
        uid (str): given to Task({'uid': ...}) only (default task.NNNNNN, numbered in this
            process); never reassigned (EnTKError).
        name (str): letters, digits, spaces and '.' (references name it: '_' separates
            them); default "".
        executable (str): what runs (mandatory: EnTKMissingError when the workflow is set
            without it).
        arguments (list[str]): its arguments (default []); $SHARED or
            $Pipeline_<p>_Stage_<s>_Task_<t> at an argument's start is made a path.
        environment (dict[str, str]): variables set for it (default {}).
        sandbox (str): its directory, relative to the pilot sandbox; default "" (the task's
            uid): tasks that name one sandbox share it.
        pre_launch (list[str]): shell lines run before it is launched (default []); also
            post_launch, pre_exec, post_exec.
        stdout (str): the file name of its stdout in the sandbox (default "": STDOUT, or
            <pilot task uid>.out in a sandbox it names); stderr likewise (STDERR, .err).
        cpu_reqs (CpuReqs): {'cpu_processes': ranks (default 1), 'cpu_process_type': None,
            'POSIX' or 'MPI', 'cpu_threads': cores per rank (default 1), 'cpu_thread_type':
            None or 'OpenMP'} (pilot.entk.CpuReqs; a dict is taken).
        gpu_reqs (GpuReqs): {'gpu_processes': GPUs per rank (default 0), 'gpu_process_type':
            None, 'CUDA' or 'ROCm'} (pilot.entk.GpuReqs; a dict is taken).
        upload_input_data (list[str]): 'source > target' or 'source': from the client
            (relative to its working directory) into the task's sandbox (default []).
        copy_input_data (list[str]): from the pilot's file system (a relative path is in the
            pilot sandbox, as $SHARED) into the task's sandbox, copied; link_input_data and
            move_input_data link or move (each default []).
        copy_output_data (list[str]): from the task's sandbox to the pilot's file system,
            copied, once it ended DONE; link_output_data and move_output_data link or move
            (each default []).
        download_output_data (list[str]): from the task's sandbox to the client (relative to
            its working directory), once it ended DONE (default []).
        tags (dict | None): {'colocate': a task's name or uid}: run where that task ran
            ('exclusive' is refused); default None.
        error_is_fatal (bool): True: its failure fails its stage and pipeline, and run()
            raises (default False).
        metadata (dict): the user's own (default {}).
        state (str): DESCRIBED, then as it runs (pilot.entk.states).
        exit_code (int | None): its exit code once it ended.
        exception (str | None): why it failed (the pilot task's reason); exception_detail
            the end of its stderr.
        path (str): its sandbox, once it ran.
        rts_uid (str | None): the pilot task's uid.
        parent_stage (dict): {'uid', 'name'} of its stage; parent_pipeline of its pipeline.
    """

    FIELDS = {
        "uid": ("", _uid),
        "name": ("", _name),
        "state": (states.INITIAL, _state),
        "state_history": ([], _history),
        "executable": ("", _string),
        "arguments": ([], str_list),
        "environment": ({}, str_dict),
        "sandbox": ("", _string),
        "pre_launch": ([], str_list),
        "post_launch": ([], str_list),
        "pre_exec": ([], str_list),
        "post_exec": ([], str_list),
        "cpu_reqs": (None, reqs_field(CpuReqs)),
        "gpu_reqs": (None, reqs_field(GpuReqs)),
        "lfs_per_process": (0, _unaccounted("local disk")),
        "mem_per_process": (0, _unaccounted("memory")),
        **{f: ([], str_list) for f in DATA_FIELDS},
        "stdout": ("", _string),
        "stderr": ("", _string),
        "error_is_fatal": (False, flag),
        "stage_on_error": (False, _stage_on_error),
        "exit_code": (None, _exit_code),
        "exception": (None, _optional_string),
        "exception_detail": (None, _optional_string),
        "path": ("", _string),
        "tags": (None, _tags),
        "rts_uid": (None, _optional_string),
        "parent_stage": (None, _parent),
        "parent_pipeline": (None, _parent),
        "metadata": ({}, _metadata),
    }
    VALIDATE_DEFAULT = ("cpu_reqs", "gpu_reqs", "parent_stage", "parent_pipeline")

    def __init__(self, from_dict: dict | None = None) -> None:
        given = {} if from_dict is None else from_dict
        if not isinstance(given, dict):
            raise EnTKValueError(f"Task: from_dict={given!r:.100} must be a dict of Task fields")
        given = dict(given)
        uid = given.pop("uid", None) or f"task.{next(_COUNTER):06d}"
        object.__setattr__(self, "uid", check_name("Task", "uid", uid))
        self._seq = next(_MADE)
        state, history = given.pop("state", None), given.pop("state_history", None)
        try:
            super().__init__(given)
        except EnTKError:
            raise
        except ValueError as exc:
            raise EnTKValueError(str(exc)) from None
        object.__setattr__(self, "state_history", _history(self, "state_history", history or []))
        self.state = state or states.INITIAL

    def __setattr__(self, name: str, value) -> None:
        try:
            super().__setattr__(name, value)
        except EnTKError:
            raise
        except ValueError as exc:
            raise EnTKValueError(f"{_owner(self)}: {str(exc).removeprefix('Task: ')}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and other.uid == self.uid

    def __hash__(self) -> int:
        return hash(self.uid)

    def __repr__(self) -> str:
        return f"<Task {self.luid} {self.state}>"

    @property
    def seq(self) -> int:
        """The order it was made in, among all tasks of this process."""
        return self._seq

    @property
    def luid(self) -> str:
        """pipeline.stage.task, each by its name when it has one, else its uid."""
        p, s = self.parent_pipeline, self.parent_stage
        return f"{p['name'] or p['uid']}.{s['name'] or s['uid']}.{self.name or self.uid}"

    def from_dict(self, d: dict) -> None:
        """EnTK's re-initialization: every field from `d` (the uid too, if it has one)."""
        fresh = Task(d)
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)

    def check_runnable(self) -> None:
        """(AppManager.workflow) Ready to run: DESCRIBED, with an executable."""
        if self.state != states.INITIAL:
            raise EnTKValueError(
                f"{_owner(self)}: state={self.state!r} must be {states.INITIAL!r} to be run "
                "(a task runs once: make a new Task)"
            )
        if not self.executable:
            raise EnTKMissingError(f"{_owner(self)}: executable is not set")
