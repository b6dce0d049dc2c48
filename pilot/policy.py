"""Placement policy: where a unit runs inside its partition and which devices it owns.

Fields are None when unset.  Merging takes, field by field, the higher-priority value when it is
not None (`merge(high, low)`).  The policy a unit gets is captured when its description (or its
group) is built, from, highest first:
    1. the explicit policy given to the unit (or the group) constructor
    2. for a group member: the template's policy over the group's policy
    3. the thread-local stack of `with Policy(...)` contexts, inner over outer
    4. GLOBAL_POLICY: ANYWHERE, ROUNDROBIN, IDLE, refcounted, CUDA_VISIBLE_DEVICES
Later edits to a policy object, or contexts entered later, change nothing already built.

    placement     LOCAL (the agent's node), ANYWHERE, HOST_NAME, HOST_ID, DEFAULT (= ANYWHERE)
    host_name     node name, with HOST_NAME
    host_id       node host id (as its network config reports it), with HOST_ID
    distribution  ROUNDROBIN (consecutive units over nodes), BLOCK (fill a node before the
                  next), DEFAULT (= ROUNDROBIN)
    cpu_affinity  the core ids the unit must hold (in its partition)
    gpu_affinity  the GPU ids the unit must hold
    gpu_env_str   the variable that carries the unit's GPU ids (default CUDA_VISIBLE_DEVICES)
    wait_mode, refcounted   accepted and merged; not used yet
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, fields


@dataclass
class Policy:
    """Placement policy: where a unit runs inside its partition and which devices it owns.

    Every field is None when unset; merging takes, field by field, the higher-priority value
    when it is not None.  A unit's policy is captured when its description (or its group) is
    built: its own policy, over a group template's and group's, over the `with Policy(...)`
    contexts of the thread (inner over outer), over rp.GLOBAL_POLICY (ANYWHERE, ROUNDROBIN,
    IDLE, refcounted, CUDA_VISIBLE_DEVICES).  Later edits to a policy object, or contexts
    entered later, change nothing already built.  Each field is checked when it is set.

        with rp.Policy(placement="HOST_NAME", host_name="node3"):
            cud = rp.ComputeUnitDescription(executable="/bin/date")

    Args:
        placement (Policy.Placement | str | None): LOCAL (the agent's node), ANYWHERE,
            HOST_NAME, HOST_ID, DEFAULT (= ANYWHERE); a member's name is taken too.
        host_name (str | None): node name, with HOST_NAME.
        host_id (int | None): node host id (as its network config reports it), with HOST_ID.
        distribution (Policy.Distribution | str | None): ROUNDROBIN (consecutive units over
            nodes), BLOCK (fill a node before the next), DEFAULT (= ROUNDROBIN).
        cpu_affinity (list[int] | None): the core ids the unit must hold (in its partition),
            each once.
        gpu_affinity (list[int] | None): the GPU ids the unit must hold, each once.
        gpu_env_str (str | None): the variable that carries the unit's GPU ids (default
            CUDA_VISIBLE_DEVICES).
        wait_mode (Policy.WaitMode | str | None): IDLE, SPIN, DEFAULT: accepted and merged;
            not used yet.
        refcounted (bool | None): accepted and merged; not used yet.

    Raises:
        ValueError: an unknown field, or a value not accepted (naming the field and what
            is).
    """

    class Placement(enum.Enum):
        LOCAL = "LOCAL"
        ANYWHERE = "ANYWHERE"
        HOST_NAME = "HOST_NAME"
        HOST_ID = "HOST_ID"
        DEFAULT = "DEFAULT"

    class Distribution(enum.Enum):
        ROUNDROBIN = "ROUNDROBIN"
        BLOCK = "BLOCK"
        DEFAULT = "DEFAULT"

    class WaitMode(enum.Enum):
        IDLE = "IDLE"
        SPIN = "SPIN"
        DEFAULT = "DEFAULT"

    placement: Policy.Placement | None = None
    host_name: str | None = None
    host_id: int | None = None
    distribution: Policy.Distribution | None = None
    cpu_affinity: list[int] | None = None
    gpu_affinity: list[int] | None = None
    gpu_env_str: str | None = None
    wait_mode: Policy.WaitMode | None = None
    refcounted: bool | None = None

    def __init__(  # (dataclass keeps a class's own: an unknown keyword is a ValueError here)
        self,
        placement=None,
        host_name=None,
        host_id=None,
        distribution=None,
        cpu_affinity=None,
        gpu_affinity=None,
        gpu_env_str=None,
        wait_mode=None,
        refcounted=None,
        **unknown,
    ) -> None:
        if unknown:
            raise ValueError(
                f"Policy: unknown key(s) {sorted(unknown)}; accepted: {sorted(_FIELD_NAMES)}"
            )
        given = locals()
        for name in _ORDER:
            setattr(self, name, given[name])

    def __setattr__(self, name: str, value) -> None:
        if name not in _FIELD_NAMES:
            raise ValueError(f"Policy: unknown key {name!r}; accepted: {sorted(_FIELD_NAMES)}")
        object.__setattr__(self, name, self._validate(name, value))

    def _validate(self, name: str, value):
        if value is None:
            return None
        enums = {
            "placement": Policy.Placement,
            "distribution": Policy.Distribution,
            "wait_mode": Policy.WaitMode,
        }
        if name in enums:
            if isinstance(value, str) and value in enums[name].__members__:
                value = enums[name][value]
            if not isinstance(value, enums[name]):
                raise ValueError(
                    f"Policy: {name}={value!r} must be one of {[m.name for m in enums[name]]}"
                )
        elif name in ("cpu_affinity", "gpu_affinity"):
            if (
                isinstance(value, (str, bytes))
                or not isinstance(value, (list, tuple))
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)
            ):
                raise ValueError(f"Policy: {name}={value!r} must be a list of ids (integers >= 0)")
            if len(set(value)) != len(value):
                raise ValueError(f"Policy: {name}={value!r} names an id twice")
            value = list(value)
        elif name == "host_id":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Policy: host_id={value!r} must be an integer")
        elif name in ("host_name", "gpu_env_str"):
            if not isinstance(value, str) or not value:
                raise ValueError(f"Policy: {name}={value!r} must be a non-empty string")
        elif name == "refcounted" and not isinstance(value, bool):
            raise ValueError(f"Policy: refcounted={value!r} must be True or False")
        return value

    # -- the context-manager stack ------------------------------------------------------------
    def __enter__(self) -> Policy:
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        stack = _stack()
        if stack and stack[-1] is self:
            stack.pop()

    # -- wire form ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Its fields as plain data (what the store and the agents get).

        Returns:
            dict: every field, in declaration order; enum members as their names, unset ones
                None.
        """
        out = self.__dict__.copy()  # (every field is set: dataclass __init__, or capture())
        for name in _ENUMS:  # (an Enum's `value` is a descriptor: _value_ is its plain field)
            v = out[name]
            if v is not None:
                out[name] = v._value_
        return {name: out[name] for name in _ORDER}

    @classmethod
    def from_dict(cls, data: dict | None) -> Policy:
        """A Policy from `to_dict`'s form (or any dict of its fields).

        Args:
            data (dict | None): field -> value; None or {}: an empty policy.

        Returns:
            Policy: the policy.

        Raises:
            ValueError: an unknown key, or a value not accepted.
        """
        data = dict(data or {})
        bad = set(data) - _FIELD_NAMES
        if bad:
            raise ValueError(
                f"Policy: unknown key(s) {sorted(bad)}; accepted: {sorted(_FIELD_NAMES)}"
            )
        return cls(**data)


_ORDER = tuple(f.name for f in fields(Policy))
_ENUMS = ("placement", "distribution", "wait_mode")  # the fields held as Enum members
_FIELD_NAMES = frozenset(_ORDER)

# what an agent assumes for a field a unit does not send (a constant: agents never see the
# client's GLOBAL_POLICY, so a unit sends every field that differs from these)
AGENT_DEFAULTS = {
    "placement": "ANYWHERE",
    "distribution": "ROUNDROBIN",
    "wait_mode": "IDLE",
    "refcounted": True,
    "gpu_env_str": "CUDA_VISIBLE_DEVICES",
}
# the lowest level of the merge; the user may change it (rp.GLOBAL_POLICY.gpu_env_str = ...):
# units built after a change get it, units built before keep theirs
GLOBAL_POLICY = Policy.from_dict(AGENT_DEFAULTS)
_local = threading.local()


def _stack() -> list[Policy]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def merge(high: Policy | None, low: Policy | None) -> Policy:
    """Field by field: high's value where it is set, low's otherwise (a new object)."""
    if high is None:
        high, low = low, None
    if high is None:
        return Policy()
    out = object.__new__(Policy)
    for name in _FIELD_NAMES:
        v = getattr(high, name)
        if v is None and low is not None:
            v = getattr(low, name)
        object.__setattr__(out, name, list(v) if isinstance(v, list) else v)  # validated already
    return out


def context_policy() -> Policy | None:
    """The merged thread-local context stack (inner over outer), or None when empty."""
    merged = None
    for p in _stack():  # outer first; each inner one goes over what is there
        merged = merge(p, merged)
    return merged


def capture(explicit: Policy | None, context: Policy | None = None) -> Policy:
    """The complete policy for something built now: explicit > context stack > global."""
    ctx = context_policy() if context is None else context
    if explicit is None and ctx is None:  # the common case, on every unit: a copy, read now
        out = object.__new__(Policy)
        fields_now = GLOBAL_POLICY.__dict__
        out.__dict__.update(fields_now)
        for name in ("cpu_affinity", "gpu_affinity"):  # (lists: the unit's own copy)
            if fields_now[name] is not None:
                out.__dict__[name] = list(fields_now[name])
        return out
    return merge(explicit, merge(ctx, GLOBAL_POLICY))


def pin_error(p: Policy) -> str | None:
    """What is wrong with a unit's complete policy's node pin, or None: HOST_NAME without a
    host_name (or HOST_ID without a host_id) names no node (a unit's FAILED at submit with
    it: pmgr/core/routing.py never_fits; not refused when built, so that a stored unit of
    an earlier session still loads)."""
    placement = p.placement.name if p.placement is not None else None
    for wanted, field in (("HOST_NAME", "host_name"), ("HOST_ID", "host_id")):
        if placement == wanted and getattr(p, field) is None:
            return f"policy.placement={wanted} needs policy.{field}"
    return None
