"""ComputeUnitDescription: one task, an executable run as OS processes (one per rank) or a
Python function called by a worker, as plain validated data (pilot/descriptions.py names every
description; the base class and the common validators are in pilot/fields.py).

A field set to a bad value raises ValueError naming the description, the field, the value and
what would be accepted; rules across fields are checked as it is built and as a field is set
(`check`), except those on fields RP scripts set one by one in any order, which are checked
when the unit is submitted (`submit_error`).  `file_name` is also the check of a pilot's
output and error files.
"""

from __future__ import annotations

from pilot import functions, staging, validate
from pilot.fields import (
    COUNT_MAX,
    Description,
    amount,
    amounts,
    count,
    field,
    field_error,
    flag,
    one_of,
    optional_count,
    str_dict,
    str_list,
    text,
)
from pilot.policy import Policy, capture
from pilot.rp.names import MPI, POSIX, OpenMP  # RP's process and thread types


def policy_field(owner, field, value):
    if value is not None and not isinstance(value, Policy):
        if isinstance(value, dict):
            value = Policy.from_dict(value)
        else:
            raise field_error(owner, field, value, "a Policy")
    return capture(value)  # merged now: later edits or contexts change nothing


def _json_value(owner, field, value):
    import json

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise field_error(
            owner, field, value, "JSON data (dicts, lists, strings, numbers)"
        ) from None
    return value


def file_name(owner, field, value):
    value = text()(owner, field, value)
    if value is not None and ("/" in value or value in (".", "..")):
        raise field_error(owner, field, value, "a file name (no '/')")
    return value


def _sandbox(owner, field, value):
    value = text()(owner, field, value)
    if value is not None and ".." in value.split("/"):
        raise field_error(owner, field, value, "a directory path without '..'")
    return value


def _staging(output: bool):
    def check(owner, field, value):
        return staging.normalize(type(owner).__name__, field, value, output)

    return check


def _function(owner, field, value):
    if value is None or callable(value) or functions.is_packed(value):
        return value
    if isinstance(value, str) and functions.is_dotted(value):
        return value
    raise field_error(owner, field, value, 'a callable, or a dotted name such as "pkg.module.func"')


def _args(owner, field, value):
    if isinstance(value, (list, tuple)):
        return tuple(value)
    raise field_error(owner, field, value, "a tuple or list of positional arguments")


def _kwargs(owner, field, value):
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return dict(value)
    raise field_error(owner, field, value, "a dict of keyword arguments (names as keys)")


# what a function unit (run by a Python worker, no process or sandbox of its own) cannot use
_NOT_FOR_FUNCTIONS = (
    "arguments",
    "pre_exec",
    "post_exec",
    "shell",
    "sandbox",
    "stdout",
    "stderr",
    "cleanup",
    "input_staging",
    "output_staging",
    "cpu_process_type",
    "gpu_process_type",
)


_PRIORITY = f"an integer between -{COUNT_MAX} and {COUNT_MAX}"
_priority = field(validate.count(-COUNT_MAX, COUNT_MAX, accepted=_PRIORITY))
_shell = field(validate.optional(validate.flag("None (as needed), True or False")))


class ComputeUnitDescription(Description):
    """One task: an executable run as OS processes (one per rank) inside a partition.

    Built from keywords, or from a dict of fields (RADICAL-Pilot style:
    `ComputeUnitDescription({"executable": "/bin/date"})`), or fields set one by one.  Every
    field is checked when it is set; rules across fields as it is built and as a field is set,
    except those on fields RP scripts set in any order (executable or function, gpu_processes),
    checked when the unit is submitted.

    Args:
        from_dict (dict | None): fields, RP style (keywords given too win).
        **kwargs (Any): the fields, below.

    Keyword Args:
        executable (str | None): program to run (a path, or a name looked up on PATH);
            required at submit, unless the unit is a function.
        function (callable | str | None): instead of an executable: a Python callable (or a
            dotted name "pkg.mod.func") called with `args` and `kwargs` by a persistent worker
            of the partition (pilot/functions.py); the result is unit.return_value, an
            exception ends it FAILED with the traceback in unit.stderr; what it prints is its
            stdout.
        args (tuple | list): a function's positional arguments (default ()).
        kwargs (dict[str, Any]): a function's keyword arguments (default {}).
        arguments (list[str]): its arguments (default []).  As in RADICAL-Pilot, a unit runs
            through /bin/sh when it needs one: each argument is one word in double quotes (so
            $VAR, ${VAR} and $(...) expand; an argument in single quotes is passed as
            written), the executable is written as is, pre_exec lines run before it and
            post_exec lines after, in the same shell.  A unit with nothing to expand is
            spawned directly (the same result, faster).
        shell (bool | None): None (default): a shell as needed; False: never a shell
            (arguments are the exact argv; no pre_exec / post_exec); True: always.
        environment (dict[str, str]): extra environment variables (default {}); values may
            hold %(cpu_ids)s, %(gpu_ids)s, %(<type>_ids)s placeholders, filled with what the
            unit was given (any other % is kept as written).
        pre_exec (list[str]): shell lines run before the executable (in its sandbox;
            default []).
        post_exec (list[str]): shell lines run after it (default []).
        cores (int): cores per rank (default 1; cores_per_rank and RP's cpu_threads are the
            same).
        gpus (float): GPUs per rank (default 0; gpus_per_rank is the same); a fraction
            0 < x < 1 shares one GPU slot.
        cores_per_rank (int | None): `cores` (give one of them).
        gpus_per_rank (float | None): `gpus` (give one of them).
        gpu_processes (int | None): RP's: GPUs of the whole unit, spread over its ranks (not
            with `gpus`).
        gpu_threads (int | None): RP's; accepted and kept.
        resources (dict[str, float]): other resource types for the unit, e.g. {"fpgas": 1}
            (default {}).
        ranks (int): processes to start (default 1; RP's cpu_processes), each with its own
            cores.
        cpu_process_type (str | None): rp.POSIX (each rank a process the pilot starts) or
            rp.MPI (one mpi_command process, e.g. srun or mpirun, over all ranks); None: as
            rp.POSIX.
        gpu_process_type (str | None): as cpu_process_type.
        cpu_thread_type (str | None): rp.OpenMP sets OMP_NUM_THREADS to the cores per rank
            (or rp.POSIX, or None).
        policy (Policy | dict | None): placement and affinity (rp.Policy); merged at
            construction with the policy context it is made in, see pilot/policy.py.
        partition (str | None): uid of the partition it must run in; None = any ACTIVE
            partition with room.
        pilot (str | None): uid of the pilot it must run on (RP's pinning); None = any.
        tag (str | None): uid of an earlier unit of the same UnitManager: run where that one
            ran (its partition).
        name (str | None): a label of the user's.
        metadata (Any): any JSON data of the user's, kept with it (default None).
        sandbox (str | None): its sandbox directory: relative to the pilot sandbox, or
            absolute, without '..' (default: the unit uid).
        stdout (str | None): a file name in the sandbox (default STDOUT; <uid>.out in a
            sandbox it names, which units may share).
        stderr (str | None): as stdout (default STDERR; <uid>.err).
        cleanup (bool): True: the sandbox is removed once the unit ended (its first 64 KiB of
            output are kept for unit.stdout / unit.stderr); default False.
        input_staging (list[str | dict]): data staged before it starts, as RP writes it
            (pilot/staging.py): strings "in.dat", "a > b", or dicts {source, target, action
            (rp.TRANSFER, COPY, LINK, MOVE, TARBALL), flags}; default [].
        output_staging (list[str | dict]): data staged after it ended, likewise.
        restartable (bool): True: when its partition or node is lost after it started, it
            may run again elsewhere (its history shows EXECUTING -> SCHEDULING); False (the
            default): it is started at most once, and such a loss ends it FAILED.
        priority (int): default 0 (RP's): among units waiting for the same resources, a
            higher one goes first (the client sends it first; its agent starts it first).

    Raises:
        ValueError: an unknown field, a value not accepted, or fields that contradict each
            other (naming the description, the field, the value and what is accepted).
    """

    FIELDS = {
        "executable": (None, text()),
        "arguments": ([], str_list),
        "environment": ({}, str_dict),
        "pre_exec": ([], str_list),
        "post_exec": ([], str_list),
        "shell": (None, _shell),
        "cores": (1, count(1)),
        "gpus": (0, amount),
        "cores_per_rank": (None, optional_count(1)),
        "gpus_per_rank": (None, field(validate.optional(validate.amount))),
        "gpu_processes": (None, optional_count(0)),
        "gpu_threads": (None, optional_count(1)),
        "cpu_process_type": (None, one_of(POSIX, MPI, none=True)),
        "gpu_process_type": (None, one_of(POSIX, MPI, none=True)),
        "cpu_thread_type": (None, one_of(POSIX, OpenMP, none=True)),
        "resources": ({}, amounts),
        "ranks": (1, count(1)),
        "policy": (None, policy_field),
        "partition": (None, text()),
        "pilot": (None, text()),
        "tag": (None, text()),
        "name": (None, text()),
        "metadata": (None, _json_value),
        "sandbox": (None, _sandbox),
        "stdout": (None, file_name),
        "stderr": (None, file_name),
        "cleanup": (False, flag),
        "restartable": (False, flag),
        "priority": (0, _priority),
        "input_staging": ([], _staging(output=False)),
        "output_staging": ([], _staging(output=True)),
        "function": (None, _function),
        "args": ((), _args),
        "kwargs": ({}, _kwargs),
    }
    ALIASES = {"cpu_processes": "ranks", "cpu_threads": "cores"}
    uid: str | None = None  # (not a field here: a TaskDescription may name its task's uid)
    VALIDATE_DEFAULT = ("policy",)  # the default policy is captured from the context
    # what $RP_PROF is in its environment: RP 0.90's profile file (RP 1.x's TaskDescription:
    # "command"; agent/rank_env.py)
    RP_PROF = "file"

    def check(self) -> None:
        name = type(self).__name__
        for per, plain in (("cores_per_rank", "cores"), ("gpus_per_rank", "gpus")):
            v = getattr(self, per)
            if v is not None and getattr(self, plain) not in (v, self.FIELDS[plain][0]):
                raise ValueError(
                    f"{name}: {per}={v!r} and {plain}={getattr(self, plain)!r} "
                    f"differ; they are the same thing, give one"
                )
        if self.shell is False and (self.peek("pre_exec") or self.peek("post_exec")):
            raise ValueError(f"{name}: pre_exec and post_exec need a shell; shell=False given")
        for key, plain, n, default, what in (
            ("cpu_affinity", "cores", self.rank_cores, 1, "core(s)"),
            ("gpu_affinity", "gpus", self.rank_gpus, 0, "GPU(s)"),
        ):
            ids = getattr(self.policy, key)
            if ids is None:
                continue
            if self.ranks > 1:
                raise ValueError(
                    f"{name}: policy.{key} names one rank's {what}; "
                    f"ranks={self.ranks} must be 1 with it"
                )
            if n not in (default, len(ids)):
                raise ValueError(
                    f"{name}: {plain}={n} but policy.{key}={ids} names {len(ids)} {what}"
                )

    @property
    def rank_cores(self) -> int:
        return self.cores_per_rank if self.cores_per_rank is not None else self.cores

    @property
    def rank_gpus(self):
        if self.gpu_processes is not None:  # RP's: GPUs of the unit, spread over its ranks
            per = self.gpu_processes / self.ranks
            return int(per) if per >= 1 or per == 0 else per
        return self.gpus_per_rank if self.gpus_per_rank is not None else self.gpus

    def submit_error(self) -> str | None:
        """What keeps it from being submitted (the fields RP lets a script set one by one)."""
        name = type(self).__name__
        if self.function is not None:
            return self._function_error(name)
        if self.peek("args") or self.peek("kwargs"):
            return f"{name}: args and kwargs are for a function unit; set function= too"
        if self.executable is None:
            return (
                f"{name}: executable is required (a path or a program name on PATH), or "
                "function= (a Python callable); neither was set"
            )
        gpu_processes = self.peek("gpu_processes") if "gpu_processes" in self.FIELDS else None
        if gpu_processes is not None:  # checked here: RP scripts set fields in any order
            if self.gpus or self.gpus_per_rank:
                return (
                    f"{name}: gpu_processes={gpu_processes} (GPUs of the unit) and "
                    f"gpus={self.gpus or self.gpus_per_rank} (per rank) say the same; give one"
                )
            if gpu_processes > self.ranks and gpu_processes % self.ranks:
                return (
                    f"{name}: gpu_processes={gpu_processes} must be a multiple of "
                    f"ranks (cpu_processes)={self.ranks}, or at most that many (ranks share "
                    "GPUs then)"
                )
        return None

    def _function_error(self, name: str) -> str | None:
        if self.executable is not None:
            return f"{name}: executable={self.executable!r} and function= given; give one"
        for key in _NOT_FOR_FUNCTIONS:
            if self.peek(key) != self.FIELDS[key][0]:
                return (
                    f"{name}: {key}= does not apply to a function unit (it runs in a Python "
                    f"worker of its partition); not for functions: {', '.join(_NOT_FOR_FUNCTIONS)}"
                )
        if self.ranks != 1:
            return f"{name}: a function unit is one call: ranks must be 1, not {self.ranks}"
        return None

    def to_stored(self) -> dict:
        """As the store keeps it: the fields not at their default (from_stored gives the
        rest), the policy whole (as merged at construction: a reader must not merge it again
        with the context it runs in), a function's call packed."""
        d = super().to_stored()
        d["policy"] = self.policy.to_dict()
        d.pop("args", None)
        d.pop("kwargs", None)
        f = self.peek("function")
        if f is not None and not functions.is_packed(f):  # the call, packed once, as stored
            d["function"] = functions.pack(f, self.peek("args"), self.peek("kwargs"))
        elif f is not None and (self.peek("args") or self.peek("kwargs")):
            raise ValueError(
                f"{type(self).__name__}: function= is a packed call already; args and "
                "kwargs are inside it"
            )
        return d

    def as_dict(self) -> dict:
        """Every field (RADICAL-Pilot's as_dict); a function unit's args and kwargs are in its
        packed `function`."""
        d = super().as_dict()
        d["args"], d["kwargs"] = [], {}  # (inside the packed call, as to_stored has them)
        return d
