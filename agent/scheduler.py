"""Slot accounting for one partition: per node, free core ids and GPU ids.

A unit needs `cores` cores and `gpus` GPUs on one node.  Placement is first fit over the
partition's nodes in order; the queue is served strictly first come, first served, so a large
unit at the head of the queue is never overtaken (and never starved) by smaller ones behind it.
`check()` tells at submit whether a unit can ever fit, so a unit that cannot is failed at once
instead of waiting forever.
"""

from __future__ import annotations

from collections import deque


class Scheduler:
    def __init__(self, nodes: list[dict]) -> None:
        # nodes: [{"index", "name", "cores": [...], "gpus": [...]}, ...]
        self.nodes = [
            dict(n, free_cores=list(n["cores"]), free_gpus=list(n["gpus"])) for n in nodes
        ]
        self.queue: deque[dict] = deque()

    def check(self, unit: dict) -> str | None:
        """None if `unit` fits on some node of the partition when it is empty, else the reason."""
        cores, gpus = unit.get("cores", 1), unit.get("gpus", 0)
        if any(len(n["cores"]) >= cores and len(n["gpus"]) >= gpus for n in self.nodes):
            return None
        best_c = max(len(n["cores"]) for n in self.nodes)
        best_g = max(len(n["gpus"]) for n in self.nodes)
        return (
            f"cores={cores}, gpus={gpus} can never fit: the partition's largest node has "
            f"{best_c} cores and {best_g} GPUs"
        )

    def place(self, unit: dict):
        """(node, core ids, gpu ids) taken for `unit`, or None when it does not fit now."""
        cores, gpus = unit.get("cores", 1), unit.get("gpus", 0)
        for n in self.nodes:
            fc, fg = n["free_cores"], n["free_gpus"]
            if len(fc) >= cores and len(fg) >= gpus:
                tc, tg = fc[:cores], fg[:gpus]
                del fc[:cores], fg[:gpus]
                return n, tc, tg
        return None

    def release(self, node: dict, cores: list[int], gpus: list[int]) -> None:
        node["free_cores"].extend(cores)
        node["free_gpus"].extend(gpus)

    def ready(self):
        """Yield (unit, node, cores, gpus) for queued units that fit now, in queue order."""
        q = self.queue
        while q:
            slot = self.place(q[0])
            if slot is None:
                return
            yield (q.popleft(),) + slot
