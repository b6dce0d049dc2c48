"""How an RP 1.x TaskDescription reads: as RADICAL-Pilot 1.103's does to its user, while the
system reads the same fields with None for unset (this project's rule for every description).

RP 1.x shows '' for a string field left unset (`td.pilot`, `td["stdout"]`) and 1, 0.0 and 0
for cores_per_rank, gpus_per_rank and gpu_threads (its task_description.py `_defaults`); here
they are None when unset (cores_per_rank and gpus_per_rank are `cores` and `gpus`, whose
defaults are 1 and 0).  Two readers, one rule (`rp_value`):
    rp.TaskDescription, the user's   its attributes (an `AsRP` descriptor on each field of
                                     RP_UNSET), items, get() and as_dict() show RP's values
    its raw view (`td.raw()`)        what the face hands on (pmgr/compat/rp1/task_form.py, the
                                     core): attributes None when unset; the form a task runs
                                     with is one (`task.description`), and so is a description
                                     read back from the store; its items, get() and as_dict()
                                     still show RP's values (RP scripts read
                                     task.description["pilot"])
A value that is set reads as it was set, on both; RP's value of an unset field given back
('' for a string: `TaskDescription(td.as_dict())`) is unset (`rp_unset_accepted`).
"""

from __future__ import annotations

from typing import Any

# RP 1.x's string fields whose unset value it shows as '' (its `_defaults`), by our names
# (threading_type is cpu_thread_type here, scheduler raptor_id, worker_* raptor_*)
RP_EMPTY = (
    *("uid", "name", "executable", "info_pattern", "code", "function", "command", "sandbox"),
    *("named_env", "stdout", "stderr", "cpu_thread_type", "gpu_type", "cpu_process_type"),
    *("gpu_process_type", "gpu_thread_type", "raptor_id", "raptor_file", "raptor_class", "pilot"),
)
RP_FIXED = {**dict.fromkeys(RP_EMPTY, ""), "gpu_threads": 0}  # RP's value of these, unset
RP_UNSET = (*RP_FIXED, "cores_per_rank", "gpus_per_rank")


def rp_value(desc, name: str, value: Any) -> Any:
    """What RP 1.x shows for field `name` of `desc` whose value here is `value` (None: unset)."""
    if value is not None:
        return value
    if name in RP_FIXED:
        return RP_FIXED[name]
    if name == "cores_per_rank":  # (the same field as cores here: its value)
        return desc.cores
    if name == "gpus_per_rank":  # (gpus: RP's is a float)
        return float(desc.gpus)
    return None


class AsRP:
    """A field of the user's TaskDescription read as RP 1.x shows it (`rp_value`); set and
    stored as any field (the description's validator ran before, in `__setattr__`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None) -> Any:
        if obj is None:  # (the class's own: the field's default)
            return None
        return rp_value(obj, self.name, obj.__dict__.get(self.name))

    def __set__(self, obj, value: Any) -> None:
        obj.__dict__[self.name] = value


def rp_unset_accepted(fields: dict) -> dict:
    """`fields` taking RP 1.x's value of an unset field ('' for a string, gpu_threads 0) as
    unset (None): what as_dict() shows is accepted back (`TaskDescription(td.as_dict())`)."""
    out = dict(fields)
    for name, unset in RP_FIXED.items():
        default, check = out[name]
        out[name] = (default, _or_unset(check, unset))
    return out


def _or_unset(check, unset):
    def validator(owner, field, value):
        if type(value) is type(unset) and value == unset:
            return None
        return check(owner, field, value)

    return validator
