"""A task's CPU and GPU requirements (`task.cpu_reqs`, `task.gpu_reqs`), as EnTK writes them:
dict-like plain data, validated as each key is set.

    cpu_reqs = {'cpu_processes': 4, 'cpu_process_type': 'MPI', 'cpu_threads': 2,
                'cpu_thread_type': 'OpenMP'}      # 4 ranks of 2 cores each, one MPI starter
    gpu_reqs = {'gpu_processes': 1, 'gpu_process_type': 'CUDA'}   # a GPU per rank

EnTK's older keys (`processes`, `process_type`, `threads_per_process`, `thread_type`) are the
same keys.  How they become the pilot task's fields is pmgr/compat/entk/describe.py's.
"""

from __future__ import annotations

from pilot.fields import Description, amount, count, field_error, one_of, text
from pilot.pmgr.compat.rp1 import CUDA, ROCm
from pilot.rp.names import MPI, POSIX, OpenMP


def _type(*accepted):
    """One of `accepted`; "" (EnTK's empty default) is None."""
    check = one_of(*accepted)
    return lambda owner, field, value: None if value == "" else check(owner, field, value)


class CpuReqs(Description):
    """cpu_processes ranks (default 1), each of cpu_threads cores (default 1); cpu_process_type
    None (the pilot's default: one MPI starter when there are several ranks), 'POSIX' (each rank
    a process of its own) or 'MPI'; cpu_thread_type None or 'OpenMP' (OMP_NUM_THREADS)."""

    FIELDS = {
        "cpu_processes": (1, count(1)),
        "cpu_process_type": (None, _type(None, POSIX, MPI)),
        "cpu_threads": (1, count(1)),
        "cpu_thread_type": (None, _type(None, POSIX, OpenMP)),
    }
    ALIASES = {
        "processes": "cpu_processes",
        "process_type": "cpu_process_type",
        "threads_per_process": "cpu_threads",
        "thread_type": "cpu_thread_type",
    }


class GpuReqs(Description):
    """gpu_processes GPUs per rank (default 0; a fraction 0 < x < 1 shares one); gpu_process_type
    None, 'CUDA' or 'ROCm': the variable that names a rank's GPUs (CUDA_VISIBLE_DEVICES,
    ROCR_VISIBLE_DEVICES); gpu_threads and gpu_thread_type are kept (RADICAL-Pilot 1.x has no
    use for them either)."""

    FIELDS = {
        "gpu_processes": (0, amount),
        "gpu_process_type": (None, _type(None, CUDA, ROCm)),
        "gpu_threads": (1, count(1)),
        "gpu_thread_type": (None, text()),
    }
    ALIASES = {
        "processes": "gpu_processes",
        "process_type": "gpu_process_type",
        "threads_per_process": "gpu_threads",
        "thread_type": "gpu_thread_type",
    }


def reqs_field(kind: type[Description]):
    """The validator of task.cpu_reqs / task.gpu_reqs: a dict (or the object) -> a fresh one."""

    def check(owner, field, value):
        if value is None:
            return kind()
        if isinstance(value, kind):
            return value
        if not isinstance(value, dict):
            raise field_error(owner, field, value, f"a dict of {sorted(kind.FIELDS)}")
        try:
            return kind(dict(value))
        except ValueError as exc:
            raise ValueError(f"{type(owner).__name__}: {field}: {exc}") from None

    return check
