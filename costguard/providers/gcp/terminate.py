"""Delete one stopped GCE VM, snapshotting its persistent disks first when asked.

The flow: re-read the VM (still the one last seen, stopped, not labelled
`costguard_protect`); with `snapshot`, `disks.createSnapshot` for each attached zonal
persistent disk, each operation waited on with our own ZoneOperationsClient (as the other
actions do); then `instances.delete`, waited on, and a read that must answer 404.

Snapshot names and request ids are derived from the VM id and the disk, so a retry after a
timeout (the operation raised a retryable ProviderError) neither duplicates a snapshot
nor loses track of it: GCE returns the same operation for the same request id, and a name
that already exists (409) is our own earlier snapshot. GCP has no DryRun flag: a dry run
reads the VM and says what would happen. Disks with `autoDelete: false` survive the VM
(and stay billed); the result says so. Local SSDs cannot be snapshotted: their data goes.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth import credentials as gcredentials

from costguard.actions.safety import is_protected
from costguard.errors import InstanceNotFound, ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.actions import ActionContext, changed, managed_now, read, wait
from costguard.providers.gcp.errors import from_retry_error, translate, vm_scope
from costguard.providers.gcp.inventory import labels_as_tags, status_name, to_state

SNAPSHOT_OF_LABEL = "costguard_snapshot-of"
_NAMESPACE = uuid.UUID("8f0c2a56-6a53-4c1e-9d0e-2f3b7c1d5e11")
_NOT_NAME = re.compile(r"[^a-z0-9-]")


@dataclass(frozen=True)
class Disk:
    name: str
    zone: str | None  # None for a regional disk
    auto_delete: bool
    persistent: bool


def disks_client(credentials: gcredentials.Credentials | None, endpoint: str | None
                 ) -> compute_v1.DisksClient:
    """A DisksClient with the same credentials and endpoint as the instances client."""
    options = ClientOptions(api_endpoint=endpoint) if endpoint else ClientOptions()
    return compute_v1.DisksClient(credentials=credentials, client_options=options)


def attached_disks(vm: compute_v1.Instance) -> list[Disk]:
    out = []
    for d in vm.disks:
        source = d.source or ""
        # .../projects/P/zones/Z/disks/NAME or .../projects/P/regions/R/disks/NAME
        parts = source.rstrip("/").split("/")
        zone = parts[-3] if len(parts) >= 4 and parts[-4] == "zones" else None
        out.append(Disk(name=parts[-1] if source else d.device_name, zone=zone,
                        auto_delete=bool(d.auto_delete), persistent=str(d.type_) != "SCRATCH"))
    return out


def snapshot_name(instance_id: str, disk: str) -> str:
    """`cg-<disk>-<vm id>`: at most 63 characters of [a-z0-9-], starting with a letter."""
    stem = _NOT_NAME.sub("-", disk.lower())[: 63 - len(instance_id) - 4].strip("-")
    return f"cg-{stem}-{instance_id}" if stem else f"cg-{instance_id}"


def _why_not(instance: Instance, vm: compute_v1.Instance) -> str | None:
    why = changed(instance, vm)
    if why is not None:
        return why
    if to_state(status_name(vm)) is not InstanceState.STOPPED:
        return f"{instance.name} is {status_name(vm)} now, not stopped"
    managed = managed_now(vm)
    if managed is not None:
        return managed
    if is_protected(instance.model_copy(update={"tags": labels_as_tags(vm.labels)})):
        return "costguard_protect was set since the last inventory"
    regional = [d.name for d in attached_disks(vm) if d.persistent and d.zone is None]
    if regional:
        return (f"regional disk {', '.join(regional)} cannot be snapshotted here; "
                "snapshot it by hand, then delete the VM")
    return None


def _snapshot(ctx: ActionContext, disks: compute_v1.DisksClient, instance: Instance,
              disk: Disk) -> str:
    """Snapshot one disk and wait for it; returns the snapshot name."""
    name = snapshot_name(instance.instance_id, disk.name)
    request = compute_v1.CreateSnapshotDiskRequest(
        project=instance.account, zone=disk.zone, disk=disk.name,
        request_id=str(uuid.uuid5(_NAMESPACE, f"{instance.instance_id}/{disk.name}")),
        snapshot_resource=compute_v1.Snapshot(
            name=name, labels={SNAPSHOT_OF_LABEL: instance.instance_id},
            description=f"costguard: before deleting {instance.name} ({instance.instance_id})"),
    )
    try:
        op = wait(ctx, instance, disks.create_snapshot_unary(request=request, retry=ctx.retry))
    except gexc.Conflict:
        return name  # taken by an earlier attempt (its request id has expired since)
    error = _op_error(op)
    if error:
        raise _Failed(f"snapshot of disk {disk.name} failed: {error}")
    return name


class _Failed(Exception):
    pass


def _op_error(op: compute_v1.Operation) -> str | None:
    errors = [f"{e.code}: {e.message}" for e in op.error.errors] if op.error else []
    return "; ".join(errors) or None


def _gone(ctx: ActionContext, instance: Instance) -> InstanceState | None:
    try:
        return to_state(status_name(read(ctx, instance)))
    except InstanceNotFound:
        return InstanceState.TERMINATED
    except ProviderError:
        return None


def terminate(ctx: ActionContext, disks: compute_v1.DisksClient, instance: Instance, *,
              snapshot: bool, dry_run: bool) -> ActionResult:
    vm = read(ctx, instance)
    why = _why_not(instance, vm)
    if why is not None:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why,
                            state_after=to_state(status_name(vm)))
    attached = attached_disks(vm)
    to_snap = [d for d in attached if d.persistent] if snapshot else []
    kept = [d.name for d in attached if d.persistent and not d.auto_delete]
    scratch = [d.name for d in attached if not d.persistent]
    if dry_run:
        what = f"snapshot {', '.join(d.name for d in to_snap)} and " if to_snap else ""
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail=f"would {what}delete {instance.name} in {instance.zone} of "
                                   f"project {instance.account}",
                            state_after=InstanceState.STOPPED)
    try:
        names = [_snapshot(ctx, disks, instance, d) for d in to_snap]
        request = compute_v1.DeleteInstanceRequest(
            project=instance.account, zone=instance.zone, instance=instance.name,
            request_id=str(uuid.uuid4()))
        op = wait(ctx, instance, ctx.instances.delete_unary(request=request, retry=ctx.retry))
    except _Failed as failed:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=f"{failed}; not deleted",
                            state_after=InstanceState.STOPPED)
    except gexc.GoogleAPICallError as exc:
        raise translate(exc, vm_scope(instance)) from exc
    except gexc.RetryError as exc:
        raise from_retry_error(exc, vm_scope(instance)) from exc
    error = _op_error(op)
    if error:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=f"delete failed: {error}",
                            state_after=_gone(ctx, instance))
    parts = [f"snapshot {', '.join(names)}"] if names else []
    parts.append(f"deleted {instance.name}: operation {op.name} done")
    if kept:
        parts.append(f"disk {', '.join(kept)} kept (autoDelete is false: still billed)")
    if scratch:
        parts.append(f"local SSD {', '.join(scratch)} discarded")
    return ActionResult(outcome=ActionOutcome.DONE, detail="; ".join(parts),
                        state_after=_gone(ctx, instance))
