"""Plain-data descriptions of pilots and units, validated on construction and on assignment.

A description is data only: a field set to a bad value raises ValueError naming the description,
the field, the value and what would be accepted.  Unknown keys are errors, never ignored.
`to_dict()` / `from_dict()` give the wire and database form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pilot.policy import GLOBAL_POLICY

FILL = "FILL"  # a partition takes every resource not held by a live partition
ALL = "ALL"  # all partitions (reconfig stop=) / all GPUs (gpus=)


class Description:
    """Base: subclasses list their fields as {name: (default, validator)}.

    A validator gets (owner, field, value) and returns the value to store or raises ValueError.
    """

    FIELDS: dict[str, tuple[Any, Callable]] = {}

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self.FIELDS)
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: unknown key(s) {sorted(unknown)}; "
                f"accepted: {sorted(self.FIELDS)}"
            )
        for name, (default, _) in self.FIELDS.items():
            value = kwargs.get(name, default)
            if isinstance(value, (list, dict)) and value is default:
                value = type(value)(value)  # never share a mutable default
            setattr(self, name, value)
        self._check()
        object.__setattr__(self, "_ready", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name not in self.FIELDS:
            raise ValueError(
                f"{type(self).__name__}: unknown key {name!r}; accepted: {sorted(self.FIELDS)}"
            )
        object.__setattr__(self, name, self.FIELDS[name][1](self, name, value))
        if self.__dict__.get("_ready"):
            self._check()

    def _check(self) -> None:
        """Cross-field checks; subclasses override."""

    def to_dict(self) -> dict:
        return {name: _plain(getattr(self, name)) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: dict):
        return cls(**data)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __repr__(self) -> str:
        diff = {k: v for k, v in self.to_dict().items() if v != self.FIELDS[k][0]}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in diff.items())})"


def _plain(value: Any) -> Any:
    if isinstance(value, Description):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _err(owner: Any, field: str, value: Any, accepted: str) -> ValueError:
    return ValueError(f"{type(owner).__name__}: {field}={value!r} must be {accepted}")


# ---- validators ---------------------------------------------------------------------------------


def count(minimum: int = 0, allow: tuple = ()) -> Callable:
    def check(owner, field, value):
        if value in allow and isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            extra = f" or one of {allow}" if allow else ""
            raise _err(owner, field, value, f"an integer >= {minimum}{extra}")
        if value < minimum:
            raise _err(owner, field, value, f">= {minimum}")
        return value

    return check


def optional_count(minimum: int = 0, allow: tuple = ()) -> Callable:
    inner = count(minimum, allow)
    return lambda owner, field, value: None if value is None else inner(owner, field, value)


def text(optional: bool = True) -> Callable:
    def check(owner, field, value):
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise _err(owner, field, value, "a non-empty string")
        return value

    return check


def str_list(owner, field, value):
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise _err(owner, field, value, "a list of strings")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _err(owner, f"{field}[{i}]", v, "a string (or number)")
        out.append(str(v))
    return out


def str_dict(owner, field, value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(owner, field, value, "a mapping of strings to strings")
    for k, v in value.items():
        if not isinstance(k, str) or not k or "=" in k:
            raise _err(owner, f"{field} key", k, "a non-empty string without '='")
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise _err(owner, f"{field}[{k!r}]", v, "a string (or number)")
    return {k: str(v) for k, v in value.items()}


def positive_minutes(owner, field, value):
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise _err(owner, field, value, "a number of minutes > 0")
    return value


# ---- units ---------------------------------------------------------------------------------------


def amount(owner, field, value):
    """A count of slots: a whole number >= 0, or a fraction of one slot (0 < x < 1)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value < 0
        or (value >= 1 and value != int(value))
    ):
        raise _err(owner, field, value, "a whole number >= 0 or a fraction 0 < x < 1")
    return int(value) if value >= 1 or value == 0 else float(value)


def amounts(owner, field, value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(owner, field, value, "a mapping of resource type to count")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise _err(owner, f"{field} key", k, "a resource type name (letters, digits, _)")
        if k in ("cpus", "gpus"):
            raise _err(owner, f"{field} key", k, "a user-defined type; use cores= / gpus=")
        out[k] = amount(owner, f"{field}[{k!r}]", v)
    return out


_GLOBAL = GLOBAL_POLICY.to_dict()  # what the agent assumes for a key it is not sent


def policy_field(owner, field, value):
    from pilot.policy import Policy, capture

    if value is not None and not isinstance(value, Policy):
        if isinstance(value, dict):
            value = Policy.from_dict(value)
        else:
            raise _err(owner, field, value, "a Policy")
    return capture(value)  # merged now: later edits or contexts change nothing


class ComputeUnitDescription(Description):
    """One task: an executable run as OS processes (one per rank) inside a partition.

    executable   program to run (a path, or a name looked up on PATH)
    arguments    its arguments (strings)
    environment  extra environment variables; values may hold %(cpu_ids)s, %(gpu_ids)s,
                 %(<type>_ids)s placeholders, filled with what the unit was given (%% = %)
    cores        cores per rank (default 1; cores_per_rank is the same)
    gpus         GPUs per rank (default 0; gpus_per_rank is the same); a fraction 0 < x < 1
                 shares one GPU slot
    resources    other resource types for the unit, e.g. {"fpgas": 1}
    ranks        processes to start (default 1), each with its own cores and GPUs
    policy       placement and affinity (rp.Policy); merged at construction, see pilot/policy.py
    partition    uid of the partition it must run in; None = any ACTIVE partition with room
    name         a label of the user's
    """

    FIELDS = {
        "executable": (None, text(optional=False)),
        "arguments": ([], str_list),
        "environment": ({}, str_dict),
        "cores": (1, count(1)),
        "gpus": (0, amount),
        "cores_per_rank": (None, optional_count(1)),
        "gpus_per_rank": (None, lambda o, f, v: None if v is None else amount(o, f, v)),
        "resources": ({}, amounts),
        "ranks": (1, count(1)),
        "policy": (None, policy_field),
        "partition": (None, text()),
        "name": (None, text()),
    }

    def __init__(self, executable: str | None = None, **kwargs: Any) -> None:
        if executable is None and "executable" not in kwargs:
            raise ValueError(
                "ComputeUnitDescription: executable is required (a path or a program name on PATH)"
            )
        super().__init__(
            executable=executable if executable is not None else kwargs.pop("executable"),
            **kwargs,
        )

    def _check(self) -> None:
        name = type(self).__name__
        for per, plain in (("cores_per_rank", "cores"), ("gpus_per_rank", "gpus")):
            v = getattr(self, per)
            if v is not None and getattr(self, plain) not in (v, self.FIELDS[plain][0]):
                raise ValueError(
                    f"{name}: {per}={v!r} and {plain}={getattr(self, plain)!r} "
                    f"differ; they are the same thing, give one"
                )
        for key, field, count, default, what in (
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
            if count not in (default, len(ids)):
                raise ValueError(
                    f"{name}: {field}={count} but policy.{key}={ids} names {len(ids)} {what}"
                )

    @property
    def rank_cores(self) -> int:
        return self.cores_per_rank if self.cores_per_rank is not None else self.cores

    @property
    def rank_gpus(self):
        return self.gpus_per_rank if self.gpus_per_rank is not None else self.gpus

    def request(self, policy: dict | None = None) -> dict:
        """What the agent places: per-rank counts per pool type, rank count and the policy;
        defaults are left out (the agent reads a missing key as its default)."""
        pol = self.policy
        cores = len(pol.cpu_affinity) if pol.cpu_affinity is not None else self.rank_cores
        gpus = len(pol.gpu_affinity) if pol.gpu_affinity is not None else self.rank_gpus
        out = {"cpus": cores}
        if gpus:
            out["gpus"] = gpus
        if self.resources:
            out["resources"] = dict(self.resources)
        if self.ranks != 1:
            out["ranks"] = self.ranks
        pol_dict = policy if policy is not None else pol.to_dict()
        placing = {k: v for k, v in pol_dict.items() if v is not None and _GLOBAL.get(k) != v}
        if placing:
            out["policy"] = placing
        return out

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["policy"] = self.policy.to_dict()
        return d


# ---- pilots --------------------------------------------------------------------------------------


class ComputePilotDescription(Description):
    """One batch job holding partitions.

    resource   SITE.NAME of a resource config in configs/, or the path of a YAML config
    parts      the initial partitions (ComputePartitionDescription); they determine the job size
    runtime    minutes the pilot may run (fractions allowed); at expiry it tears down and is DONE
    nodes, cores, gpus   an explicit size; needed only when a part is a share or FILL
    queue, project       batch queue and account, passed to the batch system
    network_config       a `pilot network-config` file: the nodes' names and host ids
    """

    FIELDS = {
        "resource": ("local.localhost", text(optional=False)),
        "parts": ([], None),  # validator set below (needs the partition description type)
        "runtime": (10, positive_minutes),
        "nodes": (None, optional_count(1)),
        "cores": (None, optional_count(1)),
        "gpus": (None, optional_count(0)),
        "queue": (None, text()),
        "project": (None, text()),
        "network_config": (None, text()),
    }

    def _check(self) -> None:
        from partition.sizing import pilot_size  # partition builds on pilot types
        from pilot import resource_config

        try:
            cfg = resource_config.load(self.resource)
        except ValueError as exc:
            raise ValueError(f"ComputePilotDescription: {exc}") from None
        object.__setattr__(self, "_size", pilot_size(self, cfg))
        object.__setattr__(self, "_config", cfg)
        network = None
        if self.network_config is not None:
            from pilot import network as net

            try:
                network = net.load(self.network_config)
            except ValueError as exc:
                raise ValueError(f"ComputePilotDescription: {exc}") from None
            if len(network) < self._size["nodes"]:
                raise ValueError(
                    f"ComputePilotDescription: network_config={self.network_config!r} names "
                    f"{len(network)} node(s), the pilot needs {self._size['nodes']}"
                )
        object.__setattr__(self, "_network", network)


def _parts(owner, field, value):
    from partition.description import ComputePartitionDescription

    if value is None or isinstance(value, ComputePartitionDescription):
        value = [] if value is None else [value]
    if not isinstance(value, (list, tuple)):
        raise _err(owner, field, value, "a list of ComputePartitionDescription")
    out = []
    for i, p in enumerate(value):
        if isinstance(p, dict):
            p = ComputePartitionDescription.from_dict(p)
        if not isinstance(p, ComputePartitionDescription):
            raise _err(owner, f"{field}[{i}]", p, "a ComputePartitionDescription")
        out.append(p)
    if not out:
        raise _err(owner, field, value, "a non-empty list of ComputePartitionDescription")
    return out


ComputePilotDescription.FIELDS["parts"] = ([], _parts)
