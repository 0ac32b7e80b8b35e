"""Terminate one stopped EC2 instance, snapshotting its EBS volumes first when asked.

The flow: re-read the instance (it must still be the one last seen, stopped, and not
protected); with `snapshot`, one CreateSnapshots call (crash-consistent across the
instance's volumes, tagged `costguard:snapshot-of=<instance id>`) and a wait until every
snapshot is `completed`; then TerminateInstances and a read of the state after.

Snapshots of large volumes can take longer than a cycle should block: past
`timeout_s` the call raises a retryable ProviderError (the act stage keeps the
termination due and tries again next cycle), and the next attempt reuses the tagged
snapshots instead of taking new ones. A dry run asks EC2 with DryRun=True.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from costguard.actions.safety import is_protected
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.aws.actions import changed_meanwhile, describe_one
from costguard.providers.aws.boundary import error_code, translate
from costguard.providers.aws.disks import SNAPSHOT_OF_TAG
from costguard.providers.aws.inventory import EC2_STATES

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

SNAPSHOT_TIMEOUT_S = 600.0
POLL_S = 15.0


@dataclass(frozen=True)
class Volume:
    volume_id: str
    device: str
    delete_on_termination: bool


@dataclass(frozen=True)
class Waiting:
    """How to wait for snapshots (injected in tests)."""

    timeout_s: float = SNAPSHOT_TIMEOUT_S
    poll_s: float = POLL_S
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic


def _scope(instance: Instance) -> str:
    return f"{instance.account}/{instance.region}/{instance.instance_id}"


def volumes_of(raw: dict[str, Any]) -> list[Volume]:
    """The EBS volumes attached to an instance, from its DescribeInstances entry."""
    out = []
    for mapping in raw.get("BlockDeviceMappings", []):
        ebs = mapping.get("Ebs") or {}
        if ebs.get("VolumeId"):
            out.append(Volume(ebs["VolumeId"], mapping.get("DeviceName", "?"),
                              bool(ebs.get("DeleteOnTermination", False))))
    return out


def _why_not(instance: Instance, raw: dict[str, Any] | None) -> str | None:
    why = changed_meanwhile(instance, raw)
    if why is not None or raw is None:
        return why
    state = raw["State"]["Name"]
    if EC2_STATES.get(state) is not InstanceState.STOPPED:
        return f"is {state} now, not stopped"
    tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}
    if is_protected(instance.model_copy(update={"tags": tags})):
        return "costguard:protect was set since the last inventory"
    return None


def _send(instance: Instance, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, _scope(instance)) from exc


def _dry_run(ec2: EC2Client, instance: Instance, vols: list[Volume], snapshot: bool
             ) -> ActionResult:
    checks: list[tuple[str, Callable[[], Any]]] = []
    if snapshot and vols:
        checks.append(("ec2:CreateSnapshots", lambda: ec2.create_snapshots(
            InstanceSpecification={"InstanceId": instance.instance_id}, DryRun=True)))
    checks.append(("ec2:TerminateInstances", lambda: ec2.terminate_instances(
        InstanceIds=[instance.instance_id], DryRun=True)))
    for permission, call in checks:
        try:
            call()
        except ClientError as exc:
            code = error_code(exc)
            if code == "DryRunOperation":
                continue
            if code == "UnauthorizedOperation":
                return ActionResult(
                    outcome=ActionOutcome.FAILED,
                    detail=f"not allowed: costguard's AWS role lacks {permission} on "
                           f"{instance.instance_id}; add it from `costguard iam --provider aws`"
                           " with a policy that enables terminate",
                    state_after=InstanceState.STOPPED)
            raise translate(exc, _scope(instance)) from exc
        except BotoCoreError as exc:
            raise translate(exc, _scope(instance)) from exc
    what = (f"snapshot {', '.join(v.volume_id for v in vols)} and " if snapshot and vols
            else "")
    return ActionResult(outcome=ActionOutcome.DRY_RUN,
                        detail=f"would {what}terminate {instance.instance_id} "
                               "(permission verified)", state_after=InstanceState.STOPPED)


def _existing_snapshots(ec2: EC2Client, instance: Instance, vols: list[Volume]
                        ) -> dict[str, dict[str, Any]]:
    """Snapshots an earlier attempt took of these volumes (by our tag), newest per volume."""
    page = _send(instance, lambda: ec2.describe_snapshots(OwnerIds=["self"], Filters=[
        {"Name": f"tag:{SNAPSHOT_OF_TAG}", "Values": [instance.instance_id]}]))
    wanted = {v.volume_id for v in vols}
    found: dict[str, dict[str, Any]] = {}
    for snap in sorted(page.get("Snapshots", []), key=lambda s: str(s.get("StartTime", ""))):
        if snap.get("VolumeId") in wanted and snap.get("State") != "error":
            found[snap["VolumeId"]] = dict(snap)
    return found


def take_snapshots(ec2: EC2Client, instance: Instance, vols: list[Volume]) -> list[str]:
    """Snapshot ids covering every volume: reused where an earlier attempt took them."""
    existing = _existing_snapshots(ec2, instance, vols)
    if len(existing) == len(vols):
        return [existing[v.volume_id]["SnapshotId"] for v in vols]
    tags = [{"Key": SNAPSHOT_OF_TAG, "Value": instance.instance_id},
            {"Key": "Name", "Value": f"costguard: {instance.name or instance.instance_id} "
                                     "before terminate"}]
    got = _send(instance, lambda: ec2.create_snapshots(
        InstanceSpecification={"InstanceId": instance.instance_id},
        Description=f"costguard: before terminating {instance.instance_id}",
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": tags}],  # type: ignore[misc,list-item]
        CopyTagsFromSource="volume"))
    return [str(s["SnapshotId"]) for s in got.get("Snapshots", [])]


def wait_completed(ec2: EC2Client, instance: Instance, snapshot_ids: list[str],
                   waiting: Waiting) -> str | None:
    """Wait until every snapshot is completed; returns an error text if one failed."""
    deadline = waiting.monotonic() + waiting.timeout_s
    while True:
        page = _send(instance, lambda: ec2.describe_snapshots(SnapshotIds=snapshot_ids))
        states = {s["SnapshotId"]: s.get("State", "pending") for s in page.get("Snapshots", [])}
        failed = sorted(i for i, st in states.items() if st == "error")
        if failed:
            return f"snapshot {', '.join(failed)} failed"
        if len(states) == len(snapshot_ids) and all(st == "completed" for st in states.values()):
            return None
        if waiting.monotonic() >= deadline:
            pending = sorted(i for i in snapshot_ids if states.get(i) != "completed")
            raise ProviderError(
                "aws", _scope(instance),
                f"snapshot {', '.join(pending)} not completed after {waiting.timeout_s:.0f} s; "
                "not terminated yet (the next attempt reuses the snapshot)", retryable=True)
        waiting.sleep(waiting.poll_s)


def terminate(ec2: EC2Client, instance: Instance, *, snapshot: bool, dry_run: bool,
              waiting: Waiting | None = None) -> ActionResult:
    waiting = waiting or Waiting()
    raw = describe_one(ec2, instance)
    why = _why_not(instance, raw)
    if why is not None:
        state = EC2_STATES.get(raw["State"]["Name"]) if raw else InstanceState.TERMINATED
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why, state_after=state)
    assert raw is not None
    vols = volumes_of(raw)
    if dry_run:
        return _dry_run(ec2, instance, vols, snapshot)
    parts: list[str] = []
    if snapshot and vols:
        snaps = take_snapshots(ec2, instance, vols)
        error = wait_completed(ec2, instance, snaps, waiting)
        if error is not None:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=f"{error}; not terminated",
                                state_after=InstanceState.STOPPED)
        parts.append(f"snapshot {', '.join(snaps)}")
    _send(instance, lambda: ec2.terminate_instances(InstanceIds=[instance.instance_id]))
    kept = [v.volume_id for v in vols if not v.delete_on_termination]
    parts.append("terminated")
    if kept:
        parts.append(f"volume {', '.join(kept)} kept (DeleteOnTermination is false: still billed)")
    return ActionResult(outcome=ActionOutcome.DONE, detail="; ".join(parts),
                        state_after=_state_after(ec2, instance))


def _state_after(ec2: EC2Client, instance: Instance) -> InstanceState | None:
    try:
        raw = describe_one(ec2, instance)
    except ProviderError:
        return None
    if raw is None:
        return InstanceState.TERMINATED
    return EC2_STATES.get(raw["State"]["Name"], InstanceState.PENDING)
