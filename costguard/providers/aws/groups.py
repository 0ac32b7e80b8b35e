"""Acting through an Auto Scaling group: scale-in by one member, and resizing a whole group
(`scale_to_zero` and its restore). Each reads the group first (one DescribeAutoScalingGroups)
and leaves alone a group that is gone or tagged costguard:protect."""

from __future__ import annotations

from typing import Any

from costguard.actions.safety import protects
from costguard.model import (
    ActionOutcome,
    ActionResult,
    Instance,
    InstanceState,
    OwnerKind,
)
from costguard.providers.aws.boundary import aws_call
from costguard.providers.aws.iam import PARKED_TAG  # min/desired/max before a park: a hint
from costguard.providers.aws.owners import describe_groups
from costguard.providers.shrink import shrink_by_one


def _skipped(detail: str) -> ActionResult:
    return ActionResult(outcome=ActionOutcome.SKIPPED, detail=detail)


def _group_now(autoscaling: Any, inst: Instance, scope: str
               ) -> tuple[dict[str, Any] | None, ActionResult | None]:
    """The instance's Auto Scaling group as it is now, or why not to touch it. Call inside
    `aws_call`."""
    owner = inst.owner
    if owner is None or owner.kind is not OwnerKind.ASG:
        return None, _skipped("not a member of an Auto Scaling group")
    group = describe_groups(autoscaling, [owner.name], scope).get(owner.name)
    if group is None:
        return None, _skipped(f"Auto Scaling group {owner.name} no longer exists")
    if protects({t["Key"]: t.get("Value", "") for t in group.get("Tags", [])}):
        return None, _skipped(f"{owner.name} is tagged costguard:protect")
    return group, None


def scale_in(autoscaling: Any, inst: Instance, *, dry_run: bool, scope: str) -> ActionResult:
    """Shrink `inst`'s Auto Scaling group by `inst`: TerminateInstanceInAutoScalingGroup with
    ShouldDecrementDesiredCapacity, so the group does not launch a replacement. The group is
    read first (one DescribeAutoScalingGroups): a member no longer in it, one protected from
    scale-in, a group tagged costguard:protect, or a group at its MinSize is left alone."""

    with aws_call(f"{scope}/autoscaling"):
        group, refused = _group_now(autoscaling, inst, scope)
        if group is None or inst.owner is None:
            return refused or _skipped("not a member of an Auto Scaling group")
        owner = inst.owner
        member = next((m for m in group.get("Instances", [])
                       if m.get("InstanceId") == inst.instance_id), None)
        if member is None:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail=f"no longer a member of {owner.name}")
        if member.get("ProtectedFromScaleIn"):
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail=f"protected from scale-in in {owner.name}")
        final, sizes = shrink_by_one(
            owner.name, int(group["DesiredCapacity"]), int(group["MinSize"]),
            size_name="desired", min_name="MinSize", fix="lower MinSize to let it shrink",
            dry_run=dry_run)
        if final is not None:
            return final
        autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=inst.instance_id, ShouldDecrementDesiredCapacity=True)
    return ActionResult(outcome=ActionOutcome.DONE,
                        detail=f"removed from Auto Scaling group {owner.name}: {sizes}",
                        state_after=InstanceState.TERMINATED)


def resize_group(autoscaling: Any, member: Instance, *, min_size: int, desired: int,
                 max_size: int, hint: str | None, dry_run: bool, scope: str) -> ActionResult:
    """Set an Auto Scaling group's sizes (UpdateAutoScalingGroup) for `scale_to_zero` and
    its restore, and tag the group with the sizes it had (`hint`; None removes the tag).
    A group tagged costguard:protect is left alone."""
    with aws_call(f"{scope}/autoscaling"):
        group, refused = _group_now(autoscaling, member, scope)
        if group is None or member.owner is None:
            return refused or _skipped("not an Auto Scaling group")
        owner = member.owner
        sizes = (f"min {group['MinSize']}, desired {group['DesiredCapacity']}, max "
                 f"{group['MaxSize']} -> {min_size}, {desired}, {max_size}")
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN,
                                detail=f"would set {owner.name}: {sizes}")
        autoscaling.update_auto_scaling_group(
            AutoScalingGroupName=owner.name, MinSize=min_size, DesiredCapacity=desired,
            MaxSize=max_size)
        tag = {"ResourceId": owner.name, "ResourceType": "auto-scaling-group",
               "Key": PARKED_TAG}
        if hint is not None:
            autoscaling.create_or_update_tags(
                Tags=[{**tag, "Value": hint, "PropagateAtLaunch": False}])
        elif any(t["Key"] == PARKED_TAG for t in group.get("Tags", [])):
            autoscaling.delete_tags(Tags=[tag])
    return ActionResult(outcome=ActionOutcome.DONE, detail=f"{owner.name}: {sizes}")
