"""What a unit holds, in cores and GPUs: its granted slots if any, else what its description
asks for.  The store's flow counts (flow.py), the timeline, `pilot top` and the dashboard's bins
(pmgr/observe/) all count a unit this one way."""

from __future__ import annotations


def requested(desc: dict) -> tuple[float, float]:
    """(cores, gpus) a unit description asks for, over all its ranks."""
    ranks = desc.get("ranks") or desc.get("cpu_processes") or 1
    per_rank = desc.get("cores_per_rank") or desc.get("cores") or desc.get("cpu_threads") or 1
    if desc.get("gpu_processes") is not None:
        gpus = desc["gpu_processes"]
    else:
        gpus = ranks * (desc.get("gpus_per_rank") or desc.get("gpus") or 0)
    return ranks * per_rank, gpus


def held(slots, desc: dict) -> tuple[float, float]:
    """(cores, gpus) a unit holds: its granted slots if any, else what it asked for."""
    return held_of(slots, requested(desc))


def held_of(slots, asked: tuple[float, float]) -> tuple[float, float]:
    """`held`, from the request (cores, gpus) of the unit's description."""
    cores, gpus = asked
    if not slots:
        return cores, gpus
    ranks = slots if isinstance(slots, list) else [slots]
    n_cpus = sum(len(r.get("cpus") or ()) for r in ranks if isinstance(r, dict))
    n_gpus = sum(len(r.get("gpus") or ()) for r in ranks if isinstance(r, dict))
    fraction = 0 < gpus / len(ranks) < 1  # shared GPU slots: it holds its share of each
    return n_cpus, (gpus if fraction else n_gpus)
