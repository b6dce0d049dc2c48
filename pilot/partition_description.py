"""ComputePartitionDescription: a share of a pilot's resources that units run in, as plain
validated data (pilot/descriptions.py names every description; the base class and the common
validators are in pilot/fields.py).

Sizes, exactly one kind per description:
    absolute   cores=, gpus= (gpus=ALL: every free GPU), or nodes= (whole nodes)
    share      ComputePartitionDescription("50%"): that share of the pilot, agent overhead inside
    FILL       ComputePartitionDescription(FILL): everything no live partition holds
Whether an agent config exists, and what needs the resource config (GPUs), is checked where the
partition is submitted (partition/plan.py).
"""

from __future__ import annotations

import re
from typing import Any

from pilot.config.resource_config import parse_pool
from pilot.fields import Description, field_error, optional_count, text
from pilot.ids import ALL  # all GPUs (gpus=)

FILL = "FILL"  # a partition takes every resource not held by a live partition
_SHARE = re.compile(r"[0-9]+(\.[0-9]+)?%")


def _size(owner, field, value):
    if value is None or value == FILL:
        return value
    if isinstance(value, str) and value.upper() == "FILL":
        return FILL
    if isinstance(value, str) and _SHARE.fullmatch(value) and 1 <= float(value[:-1]) <= 100:
        return value  # (a plain decimal: "12.5%" is an eighth; not "1e2%", "+50%" or "0.5%")
    raise field_error(
        owner,
        field,
        value,
        'a share "1%".."100%", FILL, or None (then give cores=, gpus= or nodes=)',
    )


def _resources(owner, field, value):
    """User-defined types: a count (taken from the resource config's pool, or declared by this
    partition when the config has no such type) or a list of {id, slots} (declared here)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise field_error(
            owner, field, value, "a mapping of type to a count or a list of {id, slots}"
        )
    for t, spec in value.items():
        if t in ("cpus", "gpus"):
            raise field_error(owner, f"{field} key", t, "a user-defined type; use cores= / gpus=")
        try:
            parse_pool(type(owner).__name__, {t: spec}, 0)
        except ValueError as exc:
            raise ValueError(str(exc).replace("resource_pool", field)) from None
    return dict(value)


def _config(owner, field, value):
    """The name of an agent config (configs/agents.yaml); whether it exists is checked where
    the partition is submitted, which reads that file."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]  # the RFC writes config = ['orte']
    if value is None:
        return None
    if not isinstance(value, str) or not value.isidentifier():
        raise field_error(owner, field, value, "the name of an agent config (configs/agents.yaml)")
    return value


class ComputePartitionDescription(Description):
    """A partition of a pilot, as plain data: its size (exactly one kind), agent config and name.

    Built from keywords, from a dict of fields (RADICAL-Pilot style), or with a size as its one
    argument: `ComputePartitionDescription("50%")`, `ComputePartitionDescription(rp.FILL)`.
    Every field is checked when it is set; an error names the field, the value and what is
    accepted.

    Args:
        size (str | dict | None): a share of the pilot, `"1%"` to `"100%"` (agent overhead
            inside it, rounded down), or `rp.FILL` (everything no live partition holds); or a
            dict of fields.  None: give `cores=`, `gpus=` or `nodes=` instead.
        **kwargs (Any): the other fields, below.

    Keyword Args:
        cores (int | None): cores, >= 0; the agent overhead is added on top.
        gpus (int | str | None): GPUs, >= 0, or `rp.ALL` (every free GPU); without `cores=`,
            one core per GPU too.
        nodes (int | None): whole nodes, >= 1 (not with `cores=` or `gpus=`).
        config (str | None): the agent config by name (configs/agents.yaml); None: `default`.
        resources (dict): user-defined pool types: `{type: count}` (taken from the resource
            config's `resource_pool`, or declared here) or `{type: [{id, slots}]}`.
        name (str | None): a name for people and for EnTK's stages (pmgr/compat/entk); not unique.

    Raises:
        ValueError: a field out of range, no size or two kinds of size, or an empty partition.
    """

    FIELDS = {
        "size": (None, _size),
        "cores": (None, optional_count(0)),
        "gpus": (None, optional_count(0, allow=(ALL,))),
        "nodes": (None, optional_count(1)),
        "config": (None, _config),
        "resources": ({}, _resources),
        "name": (None, text()),
    }

    def __init__(self, size: str | dict | None = None, **kwargs: Any) -> None:
        if isinstance(size, dict):  # RP style: a dict of fields
            super().__init__(size, **kwargs)
        else:
            super().__init__(size=size, **kwargs)

    def check(self) -> None:
        absolute = [k for k in ("cores", "gpus", "nodes") if getattr(self, k) is not None]
        if self.size is not None and absolute:
            raise ValueError(
                f"ComputePartitionDescription: size={self.size!r} cannot be combined "
                f"with {', '.join(f'{k}=' for k in absolute)}"
            )
        if self.nodes is not None and (self.cores is not None or self.gpus is not None):
            raise ValueError(
                "ComputePartitionDescription: nodes= takes whole nodes and cannot "
                "be combined with cores= or gpus="
            )
        if self.size is None and not absolute:
            raise ValueError(
                "ComputePartitionDescription: no size given; use cores=, gpus=, "
                'nodes=, a share ("50%") or FILL'
            )
        if self.size is None and not self.nodes and not self.cores and self.gpus in (None, 0):
            raise ValueError("ComputePartitionDescription: cores=0, gpus=0 is an empty partition")

    @property
    def share(self) -> float | None:
        """The size as a fraction of the pilot (0.5 for "50%"), or None."""
        if self.size is None or self.size == FILL:
            return None
        return float(self.size[:-1]) / 100.0

    @property
    def agent_config(self) -> str:
        """The agent config's name: `config`, or `"default"`."""
        return self.config or "default"

    @property
    def asks_gpus(self) -> bool:
        """Whether the partition asks for GPUs (`gpus=rp.ALL` or more than 0)."""
        return self.gpus == ALL or (self.gpus or 0) > 0
