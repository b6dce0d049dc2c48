"""TaskDescription: RADICAL-Pilot 1.x's description of a task, as plain validated data.

A task is a unit here, so TaskDescription extends ComputeUnitDescription: every field of a unit
is a field of a task, and RP 1.x's fields are added with its names (`threading_type` is
`cpu_thread_type`, `scheduler` is `raptor_id`, ...).  As for every description, a field is
checked as it is set; the rules across fields, and what RP 1.x has that is not run here, are
checked when the task is submitted (`submit_error`): a field that is refused names itself and
says why, it is never ignored.  The TaskManager then turns the description into the one the
task runs with (pmgr/compat/rp1/task_form.py `unit_form`): modes, MPI, per-rank lines, named
environments and downloads become the fields the rest of the system reads.  It reads as RP
1.103's: a field left unset shows RP's default ('' for a string) by attribute, item, get() and
as_dict(); the system reads it raw, None for unset (`td.raw()`, the form, a task's
`description`: pmgr/compat/rp1/task_reads.py).

Fields beyond a unit's (RP 1.x's, defaults as RP's):
    uid          the task's uid (default: task.NNNNNN, made at submit); unique per session
    mode         rp.TASK_EXECUTABLE (default), TASK_PROC, TASK_SHELL (`command`), TASK_FUNCTION
                 (`function`: a callable, a packed call from @rp.pythontask, a dotted name or
                 a name the workers know), TASK_METHOD (`method`), TASK_EVAL / TASK_EXEC
                 (`code`); RAPTOR_MASTER / RAPTOR_WORKER through submit_raptors / submit_workers
    use_mpi      None (default): an MPI starter over the ranks when ranks > 1
    gpu_type     rp.CUDA / rp.ROCm: the variable that names a rank's GPUs
    named_env    an environment the pilot prepared (pilot.prepare_env), or "rp" (the pilot's
                 own Python)
    pre_launch, post_launch   shell lines before / after the task (a one-rank task: around its
                 pre_exec and post_exec; they run where the task runs)
    pre_exec, post_exec       lines as for a unit, or a dict {rank: [lines]} for some ranks only
    tags         {"colocate": key}: run where the first task with that key ran (its partition);
                 {"order": {"ns", "order", "size"}}: start once `size` tasks of the same ns and
                 the order before ended; other keys are kept with the task, as RP keeps them
    timeout      seconds from its start (EXECUTING) after which the task is CANCELED (0: none)
    raptor_id    the Raptor (pmgr/compat/rp1/raptor.py) that runs it (raptor.submit_tasks sets it)
    partition    a partition uid, or RP's index of the pilot's partition (an int)
Refused when set (RP 1.x has them; nothing here runs them): pre_exec_sync, stage_on_error,
startup_timeout, services, info_pattern, slots, ranks_per_node, lfs_per_rank, mem_per_rank,
gpu_thread_type; modes TASK_SERVICE and AGENT_SERVICE; raptor_class and raptor_file (a master or
worker class of one's own).
"""

from __future__ import annotations

import math
from typing import cast

from pilot import staging, validate
from pilot.fields import count, field, field_error, flag, optional_count, str_list
from pilot.pmgr.compat.rp1.names import (
    AGENT_SERVICE,
    DOWNLOAD,
    FLAG_BITS,
    GPU_ENV,
    MODES,
    TASK_EXECUTABLE,
    TASK_SERVICE,
)
from pilot.pmgr.compat.rp1.task_reads import RP_UNSET, AsRP, rp_unset_accepted, rp_value
from pilot.rp.names import POSIX, OpenMP
from pilot.unit_description import ComputeUnitDescription
from pilot.wire import checks


def _opt_text(owner, field, value):
    """A string, or None; RP's empty default ("") is None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or "\0" in value:
        raise field_error(owner, field, value, "a string (or None)")
    return value


def _uid(owner, field, value):
    value = _opt_text(owner, field, value)
    if value is not None and not checks.UID.match(value):
        raise field_error(owner, field, value, "letters, digits, '_', '.', '-' (up to 128)")
    return value


def _rp_choice(accepted):
    """One of `accepted` (pilot/validate.py's one_of), or unset: None, or RP's ''."""
    words = f"one of {list(accepted)}, '' or None"
    check = field(validate.one_of(accepted, none=True, accepted=words))
    return lambda owner, name, value: None if value == "" else check(owner, name, value)


def _optional_flag(owner, field, value):
    return None if value is None else flag(owner, field, value)


def _seconds(owner, field, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
        raise field_error(owner, field, value, "seconds >= 0 (0: none)")
    if isinstance(value, float) and math.isnan(value):
        raise field_error(owner, field, value, "seconds >= 0 (0: none)")
    return value


def _rank_lines(owner, field, value):
    """Shell lines: strings (every rank), or dicts {rank: [lines]} (those ranks only)."""
    if value is None:
        return []
    if isinstance(value, (str, dict)) or not isinstance(value, (list, tuple)):
        raise field_error(owner, field, value, "a list of strings and {rank: [lines]} dicts")
    out = []
    for i, v in enumerate(value):
        if not isinstance(v, dict):
            out += str_list(owner, f"{field}[{i}]", [v])
            continue
        one = {}
        for rank, lines in v.items():
            if isinstance(rank, bool) or not str(rank).isdigit():
                raise field_error(owner, f"{field}[{i}] key", rank, "a rank (0, 1, ...)")
            one[str(int(rank))] = str_list(owner, f"{field}[{i}][{rank!r}]", lines)
        out.append(one)
    return out


def _arg_list(owner, field, value):
    """A function's positional arguments: a list (RP's default, []) or a tuple, as given."""
    if isinstance(value, (list, tuple)):
        return list(value) if isinstance(value, list) else value
    raise field_error(owner, field, value, "a list or tuple of positional arguments")


def _partition(owner, field, value):
    if isinstance(value, int) and not isinstance(value, bool):
        return count(0)(owner, field, value)  # RP's index of the pilot's partition
    return _opt_text(owner, field, value)


def _tags(owner, field, value):
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise field_error(owner, field, value, "a dict with string keys")
    order = value.get("order")
    if order is not None and (
        not isinstance(order, dict)
        or set(order) != {"ns", "order", "size"}
        or not all(isinstance(order[k], int) and order[k] >= 0 for k in ("order", "size"))
    ):
        raise field_error(owner, f"{field}['order']", order, "{'ns': ..., 'order': n, 'size': n}")
    return dict(value)


def _flags(flags):
    """RP 1.x's integer flags (RECURSIVE | CREATE_PARENTS) as the names staging takes."""
    if isinstance(flags, int) and not isinstance(flags, bool) and 0 <= flags < 8:
        return [name for bit, name in FLAG_BITS.items() if flags & bit]
    return flags


def _download(owner: str, where: str, d: dict) -> dict:
    source, target = d.get("source"), d.get("target")
    if not isinstance(source, str) or staging.split(source)[0] not in ("http", "https"):
        raise ValueError(f"{owner}: {where}.source={source!r}: {DOWNLOAD} takes an http(s) URL")
    if target is None:
        target = "task:///" + (source.rstrip("/").rsplit("/", 1)[-1] or "download")
    norm = staging.normalize(owner, where, [{"source": "client:///x", "target": target}], False)
    return {"source": source, "target": norm[0]["target"], "action": DOWNLOAD, "flags": []}


def _staging(output: bool):
    """A unit's staging directives, plus RP 1.x's: integer flags, DOWNLOAD (input only)."""

    def check(owner, field, value):
        name = type(owner).__name__
        if value is None:
            return []
        items = [value] if isinstance(value, (str, dict)) else value
        if not isinstance(items, (list, tuple)):
            return staging.normalize(name, field, value, output)
        items = [
            _local_paths(dict(d, flags=_flags(d["flags"])) if _has_flags(d) else d) for d in items
        ]
        loads = [isinstance(d, dict) and d.get("action") == DOWNLOAD for d in items]
        if not any(loads):
            return staging.normalize(name, field, items, output)
        if output:
            raise ValueError(f"{name}: {field}: {DOWNLOAD} fetches input; not for output")
        return [
            _download(name, f"{field}[{i}]", cast(dict, d))  # (load: it is a dict)
            if load
            else staging.normalize(name, f"{field}[{i}]", [d], output)[0]
            for i, (d, load) in enumerate(zip(items, loads))
        ]

    return check


def _local_paths(d):
    """RP 1.x: COPY, LINK and MOVE act where the task runs; an absolute path without a scheme
    is a path there (file://), as RP resolves it."""
    if not isinstance(d, dict) or d.get("action") not in (staging.COPY, staging.LINK, staging.MOVE):
        return d
    out = dict(d)
    for key in ("source", "target"):
        v = out.get(key)
        if isinstance(v, str) and v.startswith("/") and not staging.split(v)[0]:
            out[key] = "file://" + v
    return out


def _has_flags(d) -> bool:
    return isinstance(d, dict) and isinstance(d.get("flags"), int)


_UNIT = ComputeUnitDescription.FIELDS
_THREADS = _rp_choice((POSIX, OpenMP))

# RP 1.x's fields that nothing here runs: refused when set, with the reason
REFUSED = {
    "pre_exec_sync": "the ranks are not held until every rank's pre_exec ended",
    "stage_on_error": "output staging runs for tasks that end DONE only (RP's default)",
    "startup_timeout": "no start-up deadline is kept (timeout= is: from the task's start)",
    "services": "service tasks and their RP_INFO_* variables are not run here",
    "info_pattern": "service tasks are not run here",
    "slots": "the partition's agent places every rank; give policy= (host, cores, GPUs)",
    "ranks_per_node": "ranks are placed by the partition's policy (distribution BLOCK or "
    "ROUNDROBIN), not by a count per node",
    "lfs_per_rank": "no local disk is accounted; declare a pool type and ask resources=",
    "mem_per_rank": "no memory is accounted; declare a pool type and ask resources=",
    "gpu_thread_type": "RP 1.x ignores it too; give gpu_type=",
}


_OWN_CODE = (
    "a Raptor's master and workers are this project's partition of function workers, which "
    "run any picklable callable or dotted name; no class of one's own runs them"
)
_REFUSABLE = frozenset(REFUSED) | {"raptor_class", "raptor_file"}


class TaskDescription(ComputeUnitDescription):
    """RADICAL-Pilot 1.x's task: see the module's header for the fields beyond a unit's.

    Every field of a ComputeUnitDescription is a field of a task (`gpu_processes` is RP 1.x's
    GPUs per rank here: `gpus_per_rank`); RP 1.x's other names are the same fields
    (`threading_type` is `cpu_thread_type`, `scheduler` is `raptor_id`, `worker_class` /
    `worker_file` are `raptor_class` / `raptor_file`).  A field is checked as it is set; the
    rules across fields, and RP 1.x's fields that are not run here, when the task is submitted.
    A field left unset reads as RP 1.103's default (by attribute, item, get() and as_dict():
    '' for a string, cores_per_rank 1, gpus_per_rank 0.0, metadata {}, args []; '' given is
    unset); `raw()` is what the system reads, None for unset.

    Args:
        from_dict (dict | None): fields, RP style (keywords given too win).
        **kwargs (Any): the fields: a unit's, and those below.

    Keyword Args:
        uid (str | None): the task's uid (default: task.NNNNNN, made at submit); unique per
            session.
        mode (str): rp.TASK_EXECUTABLE (default), TASK_PROC, TASK_SHELL (`command`),
            TASK_FUNCTION (`function`: a callable, a packed call from @rp.pythontask, a dotted
            name or a name the workers know), TASK_METHOD (`method`), TASK_EVAL / TASK_EXEC
            (`code`); RAPTOR_MASTER / RAPTOR_WORKER through submit_raptors / submit_workers.
        command (str | None): a TASK_SHELL task's shell command.
        method (str | None): a TASK_METHOD task's method name.
        code (str | None): a TASK_EVAL / TASK_EXEC task's Python code.
        use_mpi (bool | None): None (default): an MPI starter over the ranks when ranks > 1.
        gpu_type (str | None): rp.CUDA / rp.ROCm: the variable that names a rank's GPUs.
        named_env (str | None): an environment the pilot prepared (pilot.prepare_env), or
            "rp" (the pilot's own Python).
        pre_launch (list[str]): shell lines before the task (a one-rank task: around its
            pre_exec and post_exec; they run where the task runs); default [].
        post_launch (list[str]): shell lines after the task; default [].
        pre_exec (list[str] | dict[int, list[str]]): lines as for a unit, or a dict
            {rank: [lines]} for some ranks only; default [].  post_exec likewise.
        tags (dict): {"colocate": key}: run where the first task with that key ran (its
            partition); {"order": {"ns", "order", "size"}}: start once `size` tasks of the
            same ns and the order before ended; other keys are kept with the task, as RP
            keeps them (default {}).
        timeout (float): seconds from its start (EXECUTING) after which the task is CANCELED
            (0, the default: none).
        raptor_id (str | None): the Raptor (pmgr/compat/rp1/raptor.py) that runs it
            (raptor.submit_tasks sets it).
        partition (str | int | None): a partition uid, or RP's index of the pilot's partition
            (an int).

    Raises:
        ValueError: an unknown field or a value not accepted (as it is set).  Refused at
            submit, each saying why (RP 1.x has them; nothing here runs them): pre_exec_sync,
            stage_on_error, startup_timeout, services, info_pattern, slots, ranks_per_node,
            lfs_per_rank, mem_per_rank, gpu_thread_type; modes TASK_SERVICE and
            AGENT_SERVICE; raptor_class and raptor_file.
    """

    FIELDS = {
        **{k: v for k, v in _UNIT.items() if k != "gpu_processes"},
        "pre_exec": ([], _rank_lines),
        "post_exec": ([], _rank_lines),
        "partition": (None, _partition),
        "cpu_thread_type": (None, _THREADS),
        "input_staging": ([], _staging(output=False)),
        "output_staging": ([], _staging(output=True)),
        "uid": (None, _uid),
        "mode": (TASK_EXECUTABLE, _rp_choice(MODES)),
        "use_mpi": (None, _optional_flag),
        "gpu_type": (None, _rp_choice(tuple(GPU_ENV))),
        "named_env": (None, _opt_text),
        "pre_launch": ([], str_list),
        "post_launch": ([], str_list),
        "tags": ({}, _tags),
        "timeout": (0.0, _seconds),
        "code": (None, _opt_text),
        "command": (None, _opt_text),
        "method": (None, _opt_text),
        "raptor_id": (None, _opt_text),
        "raptor_class": (None, _opt_text),
        "raptor_file": (None, _opt_text),
        "pre_exec_sync": (False, flag),
        "stage_on_error": (False, flag),
        "startup_timeout": (0.0, _seconds),
        "services": ([], str_list),
        "info_pattern": (None, _opt_text),
        "slots": ([], lambda o, f, v: [] if v is None else list(v)),
        "ranks_per_node": (None, optional_count(1)),
        "lfs_per_rank": (0, count(0)),
        "mem_per_rank": (0, count(0)),
        "gpu_thread_type": (None, _opt_text),
        "metadata": ({}, _UNIT["metadata"][1]),  # (RP's defaults: {} and [], not None and ())
        "args": ([], _arg_list),
    }
    FIELDS = rp_unset_accepted(FIELDS)  # (RP's '' given is unset: pmgr/compat/rp1/task_reads.py)
    ALIASES = {
        **ComputeUnitDescription.ALIASES,
        "threading_type": "cpu_thread_type",
        "gpu_processes": "gpus_per_rank",  # RP 1.x: GPUs per rank (RP 0.90: of the unit)
        "scheduler": "raptor_id",
        "worker_class": "raptor_class",
        "worker_file": "raptor_file",
        "lfs_per_process": "lfs_per_rank",
        "mem_per_process": "mem_per_rank",
    }
    _form = False  # True: as unit_form made it (pmgr/compat/rp1/task_form.py), ready to run
    RP_PROF = "command"  # RP 1.x's $RP_PROF: a command (agent/rank_env.py)

    def to_be_formed(self, uid: str) -> TaskDescription:
        """A copy for pmgr/compat/rp1/task_form.py to turn into the form the task runs with (marked:
        submit_error lets only that form through)."""
        form = self._raw_copy()  # (shallow: its lists are replaced, never changed in place)
        mine = vars(form)  # (`_form` is no field: kept out of to_stored and as_dict; the uid
        mine["_form"], mine["uid"] = True, uid  # is the task's own, checked, or a made one)
        return form

    def raw(self) -> RawTaskDescription:
        """The same fields as the system reads them: None when unset, where RP 1.x and this
        description's attributes show '' (pmgr/compat/rp1/task_reads.py); itself when it is
        raw already.  What the TaskManager hands on (pmgr/compat/rp1/task_form.py unit_form
        takes it)."""
        return self if isinstance(self, RawTaskDescription) else self._raw_copy()

    def _raw_copy(self) -> RawTaskDescription:
        out = object.__new__(RawTaskDescription)
        vars(out).update(vars(self))
        return out

    # RP 1.x's reads (pmgr/compat/rp1/task_reads.py): RP's value of a field left unset
    def __getitem__(self, name: str):
        field = self.ALIASES.get(name, name)
        if field not in self.FIELDS:
            raise KeyError(name)
        return rp_value(self, field, getattr(self, field))

    def as_dict(self) -> dict:
        """Every field, as RP 1.x's as_dict shows it: RP's value of a field left unset ('' for
        a string), and RP's other names of a field (cpu_processes, threading_type, ...) with
        the field's value."""
        out = super().as_dict()
        for name in RP_UNSET:
            out[name] = rp_value(self, name, out[name])
        out.update({alias: out[field] for alias, field in self.ALIASES.items()})
        return out

    @property
    def rank_gpus(self):
        return self.gpus_per_rank if self.gpus_per_rank is not None else self.gpus

    def refused(self) -> str | None:
        """The first field RP 1.x has that is not run here, set: why (None: none is)."""
        name = type(self).__name__
        mine = vars(self)  # (the fields set: most tasks set none of these)
        for key in _REFUSABLE & mine.keys():
            if mine[key] != self.FIELDS[key][0]:
                why = REFUSED.get(key) or _OWN_CODE
                return f"{name}: {key}={mine[key]!r:.60} is not supported: {why}"
        if self.mode in (TASK_SERVICE, AGENT_SERVICE):
            return (
                f"{name}: mode={self.mode!r} is not supported: service tasks (and the pilot's "
                "services) are not run here; run the service as a task of its own"
            )
        if self.peek("tags").get("exclusive"):
            return f"{name}: tags['exclusive'] is not supported: partitions are not kept apart"
        return None

    def submit_error(self) -> str | None:
        """What keeps it from being submitted: a refused field, or a unit's rules on the form
        it runs in (pmgr/compat/rp1/task_form.py: a TaskManager makes it)."""
        if not self._form:  # (a form was checked before it was made: TaskManager._forms)
            return self.refused() or f"{type(self).__name__}: submit it with a TaskManager"
        return super().submit_error()


for _name in RP_UNSET:  # (the user's reads; the raw class below shadows them with None)
    setattr(TaskDescription, _name, AsRP(_name))


class RawTaskDescription(TaskDescription):
    """A TaskDescription as the system reads it: a field left unset is None (its items, get()
    and as_dict() still show RP 1.x's values).  `td.raw()` makes one; so does the TaskManager
    for every description it is given, and the form a task runs with (`task.description`) is
    one.  Named TaskDescription: errors and reprs name what the user wrote."""


RawTaskDescription.__name__ = "TaskDescription"
