"""Stop, start and tag one instance: re-check it first, verify it after, honour dry-run.

A dry run asks EC2 itself (DryRun=True): "DryRunOperation" means the call would have been
allowed, "UnauthorizedOperation" means costguard's role lacks the permission.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from costguard.clock import utc
from costguard.errors import InstanceNotFound, ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.aws.boundary import error_code, translate
from costguard.providers.aws.inventory import EC2_STATES
from costguard.providers.aws.owners import owner_from_tags

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

_PERMISSION = {
    "stop": "ec2:StopInstances",
    "start": "ec2:StartInstances",
    "create-tags": "ec2:CreateTags",
    "delete-tags": "ec2:DeleteTags",
}


def _scope(instance: Instance) -> str:
    return f"{instance.account}/{instance.region}/{instance.instance_id}"


def describe_one(ec2: EC2Client, instance: Instance) -> dict[str, Any] | None:
    """The instance as EC2 sees it now, or None when it no longer exists."""
    try:
        page = ec2.describe_instances(InstanceIds=[instance.instance_id])
    except ClientError as exc:
        mapped = translate(exc, _scope(instance))
        if isinstance(mapped, InstanceNotFound):
            return None
        raise mapped from exc
    except BotoCoreError as exc:
        raise translate(exc, _scope(instance)) from exc
    for reservation in page.get("Reservations", []):
        for raw in reservation.get("Instances", []):
            if raw["InstanceId"] == instance.instance_id:
                return dict(raw)
    return None


def _state(raw: dict[str, Any]) -> InstanceState:
    return EC2_STATES.get(raw["State"]["Name"], InstanceState.PENDING)


def changed_meanwhile(instance: Instance, raw: dict[str, Any] | None) -> str | None:
    """Why the instance is no longer the one last seen (or belongs to a controller now), or
    None if it is the same pet."""
    if raw is None:
        return f"{instance.instance_id} no longer exists"
    if raw["InstanceType"] != instance.instance_type:
        return (
            f"changed meanwhile: type is now {raw['InstanceType']} (was {instance.instance_type})"
        )
    if utc(raw["LaunchTime"]) != instance.launch_time:
        return (
            "changed meanwhile: relaunched at "
            f"{utc(raw['LaunchTime']).isoformat()} (was {instance.launch_time.isoformat()})"
        )
    # the last guard before a stop, start or terminate call: never on a controller's member
    owner = owner_from_tags({t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])},
                            instance.region)
    if owner is not None:
        return f"managed by {owner} ({owner.via}): not acted on as if it were alone"
    return None


def _call(
    operation: str, instance: Instance, send: Callable[[bool], Any], *, dry_run: bool
) -> ActionResult | None:
    """Run `send(dry_run)`; returns the final result for dry runs and failures, None when the
    real call went through."""
    try:
        send(dry_run)
    except ClientError as exc:
        code = error_code(exc)
        if code == "DryRunOperation":
            return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="permission verified")
        if code == "UnauthorizedOperation":
            return ActionResult(
                outcome=ActionOutcome.FAILED,
                detail=(
                    f"not allowed: costguard's AWS role lacks {_PERMISSION[operation]} on "
                    f"{instance.instance_id} (or a policy condition denies it); add it from "
                    "`costguard iam --provider aws --enforce`"
                ),
            )
        return ActionResult(
            outcome=ActionOutcome.FAILED, detail=str(translate(exc, _scope(instance)))
        )
    except BotoCoreError as exc:
        return ActionResult(
            outcome=ActionOutcome.FAILED, detail=str(translate(exc, _scope(instance)))
        )
    if dry_run:  # EC2 answers every dry run with an error code; this endpoint did not
        return ActionResult(
            outcome=ActionOutcome.FAILED,
            detail=(f"the endpoint ignored DryRun: {operation} may have been carried out on "
                    f"{instance.instance_id}; check it, and the endpoint_url setting"),
        )
    return None


def _state_after(ec2: EC2Client, instance: Instance) -> InstanceState | None:
    try:
        raw = describe_one(ec2, instance)
    except ProviderError:
        return None
    return _state(raw) if raw is not None else InstanceState.TERMINATED


def _power(ec2: EC2Client, instance: Instance, *, dry_run: bool, operation: str) -> ActionResult:
    needed = InstanceState.RUNNING if operation == "stop" else InstanceState.STOPPED
    try:
        raw = describe_one(ec2, instance)
    except ProviderError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=f"cannot re-check: {exc}")
    why = changed_meanwhile(instance, raw)
    if why is None and raw is not None and _state(raw) != needed:
        why = f"is {raw['State']['Name']} now, not {needed.value}"
    if why is not None:
        current = _state(raw) if raw is not None else None
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why, state_after=current)

    def send(dry: bool) -> Any:
        if operation == "stop":
            return ec2.stop_instances(InstanceIds=[instance.instance_id], DryRun=dry)
        return ec2.start_instances(InstanceIds=[instance.instance_id], DryRun=dry)

    early = _call(operation, instance, send, dry_run=dry_run)
    if early is not None:
        return early
    after = _state_after(ec2, instance)
    return ActionResult(
        outcome=ActionOutcome.DONE, detail=f"{operation} requested", state_after=after
    )


def stop(ec2: EC2Client, instance: Instance, *, dry_run: bool) -> ActionResult:
    return _power(ec2, instance, dry_run=dry_run, operation="stop")


def start(ec2: EC2Client, instance: Instance, *, dry_run: bool) -> ActionResult:
    return _power(ec2, instance, dry_run=dry_run, operation="start")


def set_tags(
    ec2: EC2Client,
    instance: Instance,
    tags: Mapping[str, str],
    remove: Sequence[str],
    *,
    dry_run: bool,
) -> ActionResult:
    refused = reserved_keys(tags, remove)
    if refused is not None:
        return refused
    try:
        raw = describe_one(ec2, instance)
    except ProviderError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=f"cannot re-check: {exc}")
    # EC2 (and moto) accept tags for ids that are gone, so existence is checked here.
    if raw is None or _state(raw) == InstanceState.TERMINATED:
        return ActionResult(
            outcome=ActionOutcome.SKIPPED,
            detail=f"{instance.instance_id} no longer exists",
            state_after=InstanceState.TERMINATED,
        )
    ids = [instance.instance_id]
    if tags:
        pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
        early = _call(
            "create-tags",
            instance,
            lambda dry: ec2.create_tags(Resources=ids, Tags=pairs, DryRun=dry),  # type: ignore[arg-type]
            dry_run=dry_run,
        )
        if early is not None and (early.outcome == ActionOutcome.FAILED or not remove):
            return early
    if remove:
        keys = [{"Key": k} for k in remove]
        early = _call(
            "delete-tags",
            instance,
            lambda dry: ec2.delete_tags(Resources=ids, Tags=keys, DryRun=dry),  # type: ignore[arg-type]
            dry_run=dry_run,
        )
        if early is not None:
            return early
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="nothing to change")
    return ActionResult(
        outcome=ActionOutcome.DONE, detail=tag_detail(tags, remove), state_after=_state(raw)
    )


def reserved_keys(tags: Mapping[str, str], remove: Sequence[str]) -> ActionResult | None:
    """The refusal of tag keys AWS keeps for itself (`aws:`), for any resource; None when
    there are none."""
    reserved = sorted(k for k in [*tags, *remove] if k.lower().startswith("aws:"))
    if not reserved:
        return None
    return ActionResult(outcome=ActionOutcome.FAILED, detail=(
        f"tag keys starting with 'aws:' are reserved by AWS: {', '.join(reserved)}"))


def tag_detail(tags: Mapping[str, str], remove: Sequence[str]) -> str:
    parts = []
    if tags:
        parts.append("set " + ", ".join(f"{k}={v}" for k, v in tags.items()))
    if remove:
        parts.append("removed " + ", ".join(remove))
    return "; ".join(parts) or "nothing to change"


__all__ = ["changed_meanwhile", "describe_one", "set_tags", "start", "stop", "tag_detail"]
