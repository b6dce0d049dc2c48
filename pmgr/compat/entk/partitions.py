"""Partitions per stage (this project's, beyond EnTK): which of the pilot's partitions a stage's
tasks run in, and the reconfigs between stages.

Partitions are found by their description's `name` (ComputePartitionDescription(name=...)):
a name stands for every partition of the pilot with that name that has not ended (one being
started counts: a task pinned to it waits until it is ACTIVE).  A stage's tasks are pinned to
its partitions in turn, each partition taking a share of them by its cores.

    for_stage(stage)        the partition uids the stage's tasks go to (None: any partition)
    reconfig(stop, start)   stop the live partitions of the names in `stop`, start `start` (one
                            pilot.reconfig); a name that names no live partition is an
                            EnTKValueError listing the live names
"""

from __future__ import annotations

import itertools

from pilot.partition_description import ComputePartitionDescription
from pilot.pmgr.compat.entk.errors import EnTKValueError, bad_type, bad_value


class Partitions:
    def __init__(self, pilot) -> None:
        self.pilot = pilot

    def live(self) -> list:
        return [p for p in self.pilot.partitions if not p.final]

    def named(self, owner: str, field: str, names: list[str]) -> list:
        live = self.live()
        found = [p for p in live if p.description.name in names]
        missing = [n for n in names if not any(p.description.name == n for p in live)]
        if missing:
            have = sorted({p.description.name for p in live if p.description.name})
            raise EnTKValueError(
                f"{owner}: {field}={missing if len(missing) > 1 else missing[0]!r} names no "
                f"live partition of {self.pilot.uid}; live partitions are named {have}"
            )
        return found

    def reconfig(self, owner: str, stop: list[str], start: list) -> list:
        """The new Partition handles (they start on their own)."""
        uids = [p.uid for p in self.named(owner, "reconfig['stop']", stop)] if stop else []
        try:
            return self.pilot.reconfig(stop=uids, start=list(start))
        except ValueError as exc:
            raise EnTKValueError(f"{owner}: reconfig: {exc}") from None

    def for_stage(self, stage):
        """An endless iterator of the partition uids the stage's tasks go to, in turn, or None."""
        names = stage.partition_names
        if not names:
            return None
        parts = self.named(f"Stage {stage.luid}", "partition", names)
        turns = []
        for p in parts:  # each by its cores (a partition being started: by what it asked)
            turns += [p.uid] * max(1, p.cores or p.description.cores or 1)
        return itertools.cycle(_interleave(turns))


def _interleave(turns: list[str]) -> list[str]:
    """[a, a, b, b] -> [a, b, a, b]: consecutive tasks go to different partitions."""
    order: dict[str, list] = {}
    for uid in turns:
        order.setdefault(uid, []).append(uid)
    out = []
    while any(order.values()):
        for v in order.values():
            if v:
                out.append(v.pop())
    return out


def names(owner: str, field: str, value) -> list[str] | None:
    """A partition name, or a list of them, as a list (None stays None)."""
    if value is None:
        return None
    given = [value] if isinstance(value, str) else value
    if not isinstance(given, (list, tuple)) or not given:
        raise bad_type(owner, field, value, "a partition name or a list of them")
    for i, n in enumerate(given):
        if not isinstance(n, str) or not n:
            raise bad_type(owner, f"{field}[{i}]", n, "a partition name (a non-empty string)")
    return list(given)


def reconfig_spec(owner: str, value) -> dict | None:
    """{'stop': names, 'start': descriptions} checked: {'stop': [names], 'start': [CPD]}."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value or set(value) - {"stop", "start"}:
        raise bad_value(owner, "reconfig", value, "{'stop': names, 'start': descriptions}")
    stop = names(owner, "reconfig['stop']", value.get("stop")) or []
    start = value.get("start") or []
    start = list(start) if isinstance(start, (list, tuple)) else [start]
    descs = [description(owner, f"reconfig['start'][{i}]", d) for i, d in enumerate(start)]
    if not stop and not descs:
        raise bad_value(owner, "reconfig", value, "a 'stop' or a 'start' that is not empty")
    return {"stop": stop, "start": descs}


def description(owner: str, field: str, given) -> ComputePartitionDescription:
    """A ComputePartitionDescription, or a dict of its fields ('cpus', EnTK's word, for
    'cores'), as a ComputePartitionDescription."""
    if isinstance(given, dict):
        fields = dict(given)
        if "cpus" in fields:
            fields["cores"] = fields.pop("cpus")
        try:
            given = ComputePartitionDescription(fields)
        except ValueError as exc:
            raise EnTKValueError(f"{owner}: {field}: {exc}") from None
    if not isinstance(given, ComputePartitionDescription):
        raise bad_type(owner, field, given, "a ComputePartitionDescription or a dict of its fields")
    return given
