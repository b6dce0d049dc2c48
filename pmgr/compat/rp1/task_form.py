"""The description a task runs with: RADICAL-Pilot 1.x's fields
(pmgr/compat/rp1/task_description.py) turned, at submit, into the fields the rest of the system
reads (those of a unit).

    unit_form(td, uid, ctx) -> a new TaskDescription; ValueError naming the field

What becomes what (the TaskManager gives `ctx`, the `TaskContext`, for what needs its tasks,
pilots and raptors):
    mode             TASK_SHELL: /bin/sh -c command; TASK_FUNCTION / TASK_METHOD: function (a
                     bare name: the one the workers know, pilot/rp/raptor_functions.py);
                     TASK_EVAL / TASK_EXEC: a call of raptor_functions.eval_code / exec_code; a
                     function task is one call (ranks 1, no shell lines, no named_env)
    use_mpi          (default ranks > 1) cpu_process_type rp.MPI: one MPI starter over the
                     ranks, whose shell sets RP_RANK from the starter's rank variable
    gpu_type         policy.gpu_env_str: CUDA_VISIBLE_DEVICES, or ROCR_VISIBLE_DEVICES (ROCm)
    pre_exec / post_exec {rank: [lines]}   `if [ "$RP_RANK" = rank ]; then ... fi`
    pre_launch / post_launch   lines before pre_exec / after post_exec (one-rank tasks only)
    named_env        the lines that make (once, under a lock) and enter the environment
    stdout / stderr  a process task's output files in its sandbox: as named, else RP 1.x's
                     <uid>.out / <uid>.err (a unit's default is STDOUT / STDERR)
    input DOWNLOAD   a line that fetches the URL into place before the task (one rank only)
    tags colocate    tag = the uid of the first task with that key (run in its partition)
    partition        an index: the uid of that partition of the task's pilot
    raptor_id        partition = the Raptor's partition of function workers
"""

from __future__ import annotations

import shlex
from typing import Protocol

from pilot import staging
from pilot.pmgr.compat.rp1.names import (
    DOWNLOAD,
    GPU_ENV,
    RAPTOR_MASTER,
    RAPTOR_WORKER,
    TASK_EVAL,
    TASK_EXEC,
    TASK_EXECUTABLE,
    TASK_FUNCTION,
    TASK_METHOD,
    TASK_SHELL,
)
from pilot.pmgr.compat.rp1.task_description import TaskDescription
from pilot.policy import Policy
from pilot.rp import raptor_functions
from pilot.rp.names import MPI

# an MPI task's ranks share the environment the pilot gave its starter: each rank's shell
# takes its rank from the starter's variable (Open MPI / PMIx, MPICH, SLURM)
MPI_RANK = 'export RP_RANK="${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}}}"'
FETCH = (
    "python3 -c 'import os, sys, urllib.request as r; p = sys.argv[2]; "
    'os.makedirs(os.path.dirname(p) or ".", exist_ok=True); r.urlretrieve(sys.argv[1], p)\''
)


class TaskContext(Protocol):
    """What unit_form asks the TaskManager that submits the task."""

    def colocated(self, key: str, uid: str) -> str | None:
        """The uid of the first task with colocate key `key` (None: `uid` is the first)."""

    def partition_of(self, index: int, pilot: str | None) -> str:
        """The uid of partition `index` of the task's pilot (ValueError if there is none)."""

    def env_lines(self, name: str, pilot: str | None) -> tuple[list[str], str | None]:
        """The lines that enter named environment `name`, and the pilot it is on (None: any)."""

    def raptor_partition(self, raptor_id: str) -> str:
        """The uid of the partition of function workers of Raptor `raptor_id`."""


def unit_form(td: TaskDescription, uid: str, ctx: TaskContext) -> TaskDescription:
    name = type(td).__name__
    form = td.to_be_formed(uid)
    mode = td.mode
    if mode == TASK_EXECUTABLE and td.function is not None and td.executable is None:
        mode = TASK_FUNCTION  # (a function given without its mode: what else could it be)
    if mode in (RAPTOR_MASTER, RAPTOR_WORKER):
        raise ValueError(
            f"{name}: mode={mode!r}: submit it with pilot.submit_raptors (a master) or "
            "raptor.submit_workers (its workers)"
        )
    if mode in _FUNCTION_MODES:
        _function_mode(form, td, mode)
    else:
        _process(form, td, mode, ctx)
        # RP 1.x's names for a task's output in its sandbox: <uid>.out / <uid>.err
        if td.stdout is None:
            form.stdout = f"{uid}.out"
        if td.stderr is None:
            form.stderr = f"{uid}.err"
    if td.gpu_type is not None:
        form.policy = Policy.from_dict({**td.policy.to_dict(), "gpu_env_str": GPU_ENV[td.gpu_type]})
    _placement(form, td, uid, form.pilot, ctx)
    return form


_FUNCTION_MODES = (TASK_FUNCTION, TASK_METHOD, TASK_EVAL, TASK_EXEC)


def _process(form, td, mode: str, ctx: TaskContext) -> None:
    """(unit_form) A task that runs as processes: its MPI starter, its shell lines."""
    name = type(td).__name__
    mpi = td.use_mpi
    if mpi is None:
        mpi = td.cpu_process_type == MPI if td.cpu_process_type else td.ranks > 1
    pre, post = _rank_lines(td.peek("pre_exec")), _rank_lines(td.peek("post_exec"))
    if mpi:
        form.cpu_process_type = MPI
        if td.ranks > 1:
            pre.insert(0, MPI_RANK)
    launch, landed = td.peek("pre_launch"), td.peek("post_launch")
    if launch or landed:
        if td.ranks > 1:
            raise ValueError(
                f"{name}: pre_launch / post_launch with ranks={td.ranks}: here a task's shell "
                "lines run with each rank; give them in pre_exec / post_exec"
            )
        pre, post = list(launch) + pre, post + list(landed)
    if td.named_env is not None:
        lines, on = ctx.env_lines(td.named_env, td.pilot)
        pre = lines + pre
        if on is not None and td.pilot is None:
            form.pilot = on
    fetch, rest = _downloads(td)
    if fetch:
        if td.ranks > 1:
            raise ValueError(f"{name}: input_staging {DOWNLOAD} with ranks={td.ranks}: one rank")
        pre = fetch + pre
        form.input_staging = rest
    if mode == TASK_SHELL:
        _shell_mode(form, td, bool(pre or post))
    if pre != td.peek("pre_exec") or post != td.peek("post_exec"):
        form.pre_exec, form.post_exec = pre, post


def _rank_lines(lines: list) -> list[str]:
    """Shell lines, a dict {rank: [lines]} as lines for those ranks only."""
    out = []
    for line in lines:
        if not isinstance(line, dict):
            out.append(line)
            continue
        for rank, some in line.items():
            body = "\n".join(f"    {x}" for x in some) or "    :"
            out.append(f'if [ "$RP_RANK" = "{rank}" ]; then\n{body}\nfi')
    return out


def _function_mode(form, td, mode: str) -> None:
    """(unit_form) A call for a function worker of the partition."""
    name = type(td).__name__
    for key, given in (
        ("ranks", td.ranks > 1 or td.use_mpi),
        ("named_env", td.named_env is not None),
        ("pre_launch", td.peek("pre_launch") or td.peek("post_launch")),
        ("input_staging", any(d["action"] == DOWNLOAD for d in td.peek("input_staging"))),
    ):
        if given:
            raise ValueError(
                f"{name}: {key}= does not apply to mode={mode!r}: a function task is one call "
                "in a worker of its partition (RP's MPI function tasks, which are given a "
                "communicator, are not run here)"
            )
    if mode in (TASK_FUNCTION, TASK_METHOD):
        fn = td.function if mode == TASK_FUNCTION else td.method
        what = "function" if mode == TASK_FUNCTION else "method"
        if fn is None:
            raise ValueError(f"{name}: mode={mode!r} needs {what}=")
        if isinstance(fn, str) and "." not in fn and ":" not in fn:
            known = raptor_functions.dotted(fn)
            if known is None:
                raise ValueError(
                    f"{name}: {what}={fn!r} is no name the workers know "
                    f"({', '.join(raptor_functions.KNOWN)}); give a callable, @rp.pythontask's "
                    'call, or a dotted name "pkg.mod.func"'
                )
            fn = known
        form.method = None
        form.function = fn
        return
    if td.code is None:
        raise ValueError(f"{name}: mode={mode!r} needs code=")
    if mode == TASK_EVAL:
        form.function, form.args = raptor_functions.eval_code, (td.code,)
        return
    form.function, form.args = raptor_functions.exec_code, (td.code, list(td.pre_exec))
    form.pre_exec = []  # (TASK_EXEC's are Python lines: they go with its code)


def _shell_mode(form, td, in_shell: bool) -> None:
    name = type(td).__name__
    if td.command is None:
        raise ValueError(f"{name}: mode={TASK_SHELL!r} needs command=")
    if td.executable is not None or td.peek("arguments"):
        raise ValueError(f"{name}: mode={TASK_SHELL!r} runs command=; no executable / arguments")
    form.executable = "/bin/sh"
    if in_shell:  # (the task's own shell passes the command on as it is, from its environment)
        form.environment = {**td.peek("environment"), "RP_TASK_COMMAND": td.command}
        form.arguments = ["-c", "$RP_TASK_COMMAND"]
    else:
        form.shell = False
        form.arguments = ["-c", td.command]


def _downloads(td) -> tuple[list[str], list]:
    """(lines that fetch the DOWNLOAD inputs, the other input directives)"""
    fetch, rest = [], []
    for d in td.peek("input_staging"):
        if d["action"] != DOWNLOAD:
            rest.append(d)
            continue
        scheme, path = staging.split(d["target"])
        path = path.lstrip("/") if scheme != "file" else path
        where = {"unit": "", "pilot": '"$RP_PILOT_SANDBOX"/', "resource": '"$RP_PILOT_SANDBOX"/../'}
        target = where.get(scheme, "") + shlex.quote(path)
        fetch.append(f"{FETCH} {shlex.quote(d['source'])} {target} || exit 1")
    return fetch, rest


def _placement(form, td, uid: str, pilot: str | None, ctx: TaskContext) -> None:
    """(unit_form) partition= (an index, a Raptor's) and colocation."""
    if isinstance(td.partition, int):
        form.partition = ctx.partition_of(td.partition, pilot)
    if td.raptor_id is not None:
        form.partition = ctx.raptor_partition(td.raptor_id)
    key = td.peek("tags").get("colocate")
    if key is not None and td.tag is None:
        first = ctx.colocated(str(key), uid)
        if first is not None:
            form.tag = first
