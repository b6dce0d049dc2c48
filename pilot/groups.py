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
    """The description of a group's members: a unit description's fields and a policy.

    Args:
        executable (str): the program each unit runs.
        policy (Policy | None): the members' policy, over the group's (captured now).
        **kwargs (Any): any other `ComputeUnitDescription` field (`arguments`, `cores`,
            `gpus`, ...), checked now as a unit description would check it.

    Raises:
        ValueError: a policy that is not a `Policy`, or a field a unit description refuses.
    """

    def __init__(self, executable: str, policy: Policy | None = None, **kwargs: Any) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise ValueError(f"UnitTemplate: policy={policy!r} must be a Policy")
        self.policy = merge(policy, None) if policy is not None else None
        # validate the template's fields now, as a unit description would
        ComputeUnitDescription(executable=executable, **kwargs)
        self.kwargs = dict(kwargs, executable=executable)


class UnitGroup:
    """Units built from templates under one policy; `umgr.submit_units(group)` submits them in
    the order they were added.  The `with rp.Policy(...):` context in force when the group is
    built is captured then, not when units are added.

    Args:
        policy (Policy | None): the group's policy, under each template's.
        name (str | None): a name for the group.

    Raises:
        ValueError: a policy that is not a `Policy`.
    """

    def __init__(self, policy: Policy | None = None, name: str | None = None) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise ValueError(f"UnitGroup: policy={policy!r} must be a Policy")
        self.name = name
        self.group_policy = merge(policy, None) if policy is not None else None
        self.context = context_policy()  # captured now, not when units are added
        self.policy = capture(self.group_policy, self.context or _EMPTY)
        self.units: list[ComputeUnitDescription] = []

    def add(self, nunits: int, template: UnitTemplate) -> list[ComputeUnitDescription]:
        """Add `nunits` units made from `template`, their policies merged.

        Args:
            nunits (int): how many, >= 1.
            template (UnitTemplate): what each is made from.

        Returns:
            list[ComputeUnitDescription]: the descriptions added.

        Raises:
            ValueError: `nunits` below 1 or not an integer, `template` not a `UnitTemplate`.
        """
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
