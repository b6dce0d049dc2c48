"""Unit groups built from templates (like Dragon's ProcessGroup + ProcessTemplate).

    group = rp.UnitGroup(policy=rp.Policy(distribution=rp.Policy.Distribution.BLOCK))
    group.add(4, template=rp.UnitTemplate(executable="/bin/hostname",
                                          policy=rp.Policy(gpu_affinity=[0])))
    umgr.submit_units(group)           # the group's units, in the order added

Policy of a member, highest first: the template's policy, the group's policy, the context stack
as it was when the *group* was built, the global policy (see pilot/policy.py).  Each template's
policy is captured when the template is built; the group's when the group is.
"""

from __future__ import annotations

from typing import Any

from pilot.descriptions import ComputeUnitDescription
from pilot.policy import Policy, capture, context_policy, merge


class UnitTemplate:
    def __init__(self, executable: str, policy: Policy | None = None, **kwargs: Any) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise ValueError(f"UnitTemplate: policy={policy!r} must be a Policy")
        self.policy = merge(policy, None) if policy is not None else None
        # validate the template's fields now, as a unit description would
        ComputeUnitDescription(executable=executable, **kwargs)
        self.kwargs = dict(kwargs, executable=executable)


class UnitGroup:
    def __init__(self, policy: Policy | None = None, name: str | None = None) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise ValueError(f"UnitGroup: policy={policy!r} must be a Policy")
        self.name = name
        self.group_policy = merge(policy, None) if policy is not None else None
        self.context = context_policy()  # captured now, not when units are added
        self.policy = capture(self.group_policy, self.context or _EMPTY)
        self.units: list[ComputeUnitDescription] = []

    def add(self, nunits: int, template: UnitTemplate) -> list[ComputeUnitDescription]:
        if isinstance(nunits, bool) or not isinstance(nunits, int) or nunits < 1:
            raise ValueError(f"UnitGroup.add: nunits={nunits!r} must be an integer >= 1")
        if not isinstance(template, UnitTemplate):
            raise ValueError(f"UnitGroup.add: template={template!r} must be a UnitTemplate")
        member = merge(template.policy, self.policy)
        added = []
        for _ in range(nunits):
            ud = ComputeUnitDescription(**template.kwargs)
            object.__setattr__(ud, "policy", merge(member, None))
            ud.check()
            added.append(ud)
        self.units.extend(added)
        return added

    def __iter__(self):
        return iter(self.units)

    def __len__(self) -> int:
        return len(self.units)


_EMPTY = Policy()
