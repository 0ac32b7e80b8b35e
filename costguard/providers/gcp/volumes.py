"""Compute Engine persistent disks that bill while nothing runs (costguard/standing/,
`resource: volume`): zonal disks no VM uses, and disks of VMs the inventory shows stopped.

One project is read with `disks.aggregatedList` (every zone, paged). A disk's `users` are
the VMs it is attached to (by name: the standing stage finds them in the inventory by
name and zone); a disk nothing uses is unused since its `lastDetachTimestamp` where it has
one (else costguard's first sight). Regional disks (replicated across two zones) are left
out and counted in the log: snapshotting and deleting one takes the regionDisks calls,
which costguard does not make yet. Prices: capacity by type from `data/disk_prices.json`
(its source and date in the file); a type the table lacks is unpriced.

Snapshot before delete: `disks.createSnapshot` with a name and request id derived from the
disk (its zone, name and creation time), labelled `costguard_snapshot-of`, so an attempt
after a crash finds the same snapshot (409 for the name) instead of taking another; its
state is read with `snapshots.get` (READY: completed; FAILED: error; else pending). Delete
is `disks.delete` (GCE refuses a disk a VM uses), labels `disks.setLabels` with the
fingerprint just read; each zone operation is waited on. GCP has no DryRun flag: a dry run
reads the disk and says what would happen.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Gap
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.actions import label_diff, op_error, wanted_labels
from costguard.providers.gcp.disks import disk_table
from costguard.providers.gcp.errors import explain, from_retry_error
from costguard.providers.gcp.gpus import short_name
from costguard.providers.gcp.inventory import labels_as_tags, parse_timestamp, region_of
from costguard.providers.gcp.terminate import SNAPSHOT_OF_LABEL
from costguard.standing.model import Standing, StandingKind, StandingList

log = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("5b0f3c1e-2a47-4d8e-9c61-7e3f0a9b2d14")
_SNAPSHOT_STATE = {"READY": "completed", "FAILED": "error"}  # else pending


def to_volume(project: str, raw: Any, observed_at: datetime) -> Standing:
    """One zonal disk (the raw protobuf) as a `Standing`."""
    zone = short_name(raw.zone)
    dtype = short_name(raw.type_)
    size = int(raw.size_gb)
    users = tuple(short_name(u) for u in raw.users)
    table = disk_table()
    rate = table.gib_month.get(dtype)
    return Standing(
        kind=StandingKind.VOLUME, provider="gcp", account=project, region=region_of(zone),
        zone=zone, resource_id=str(raw.id), name=raw.name, state=str(raw.status),
        in_use=bool(users), used_by=users, size_gb=size, detail=dtype,
        created_at=parse_timestamp(raw.creation_timestamp, observed_at),
        unused_since=(parse_timestamp(raw.last_detach_timestamp, observed_at)
                      if raw.last_detach_timestamp and not users else None),
        usd_per_month=None if rate is None else rate * size,
        price_source=(f"persistent disk list price {table.as_of}" if rate is not None
                      else f"no price for disk type {dtype}"),
        tags=labels_as_tags(dict(raw.labels)), observed_at=observed_at)


def list_project(disks: compute_v1.DisksClient, project: str, *, retry: gretry.Retry,
                 observed_at: datetime) -> StandingList:
    """Every zonal disk of one project; a project or zone not read is a gap."""
    out = StandingList()
    regional = 0
    try:
        request = compute_v1.AggregatedListDisksRequest(project=project)
        for page in disks.aggregated_list(request=request, retry=retry).pages:
            for scope, scoped in page.items.items():
                warning: Any = scoped.warning
                if warning and warning.code == "UNREACHABLE":
                    out.gaps.append(Gap(provider="gcp", scope=f"{project}/{scope}",
                                        error=f"unreachable: {warning.message}"))
                for disk in scoped.disks:
                    raw = compute_v1.Disk.pb(disk)
                    if not raw.zone:
                        regional += 1
                        continue
                    try:
                        out.items.append(to_volume(project, raw, observed_at))
                    except (ValueError, TypeError, OverflowError) as exc:
                        log.warning("%s: disk %s left out, not readable (%s)", project,
                                    str(raw.name)[:64], type(exc).__name__)
    except gexc.GoogleAPICallError as exc:
        return StandingList(gaps=[Gap(provider="gcp", scope=project,
                                      error=explain(exc, project))])
    except gexc.RetryError as exc:
        return StandingList(gaps=[Gap(provider="gcp", scope=project,
                                      error=str(from_retry_error(exc, project)))])
    if regional:
        log.info("%s: %d regional disk(s) not governed (regionDisks calls not made)",
                 project, regional)
    return out


def _where(item: Standing) -> tuple[str, str, str]:
    """(project, zone, disk name): a disk is known by its numeric id (unique across
    projects, and new when a disk is made again under a name) and called by its name."""
    return item.account, item.zone or "", item.name or ""


def _failed(item: Standing, exc: gexc.GoogleAPICallError) -> ProviderError:
    return ProviderError("gcp", item.resource_id, explain(exc, item.account))


def describe(disks: compute_v1.DisksClient, item: Standing, *, retry: gretry.Retry,
             observed_at: datetime) -> Standing | None:
    project, zone, name = _where(item)
    try:
        found = disks.get(project=project, zone=zone, disk=name, retry=retry)
    except gexc.NotFound:
        return None
    except gexc.GoogleAPICallError as exc:
        raise _failed(item, exc) from exc
    return to_volume(project, compute_v1.Disk.pb(found), observed_at)


def wait_done(op: compute_v1.Operation, again: Callable[[str], compute_v1.Operation],
              scope: str, timeout_s: float) -> compute_v1.Operation:
    """`op` once DONE, asking `again(name)` (a zone's, region's or global operations.wait,
    which blocks server-side up to about two minutes) until then."""
    deadline = time.monotonic() + timeout_s
    while op.status != compute_v1.Operation.Status.DONE:
        if time.monotonic() > deadline:
            raise ProviderError("gcp", scope,
                                f"operation {op.name} not done after {timeout_s:.0f} s",
                                retryable=True)
        op = again(op.name)
    return op


def _wait(operations: compute_v1.ZoneOperationsClient, item: Standing,
          op: compute_v1.Operation, retry: gretry.Retry, timeout_s: float
          ) -> compute_v1.Operation:
    project, zone, _ = _where(item)
    return wait_done(op, lambda name: operations.wait(project=project, zone=zone,
                                                      operation=name, retry=retry),
                     item.resource_id, timeout_s)


def snapshot_name(item: Standing) -> str:
    """`cg-<disk>-<12 hex>`: the same for the same disk (zone, name, creation time)."""
    _, _, name = _where(item)
    key = f"{item.resource_id}@{item.created_at.isoformat() if item.created_at else ''}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c == "-" else "-" for c in name.lower())[:44]
    return f"cg-{stem.strip('-')}-{digest}"


def snapshot(disks: compute_v1.DisksClient, snapshots: Any, item: Standing, *,
             retry: gretry.Retry, dry_run: bool) -> tuple[str, str]:
    """Start (or find) the snapshot of `item`: (its name, pending | completed | error)."""
    project, zone, name = _where(item)
    snap = snapshot_name(item)
    if dry_run:
        return "", "dry-run"
    request = compute_v1.CreateSnapshotDiskRequest(
        project=project, zone=zone, disk=name,
        request_id=str(uuid.uuid5(_NAMESPACE, snap)),
        snapshot_resource=compute_v1.Snapshot(
            name=snap, labels={SNAPSHOT_OF_LABEL: name[:63]},
            description=f"costguard: before deleting disk {item.resource_id}"))
    try:
        disks.create_snapshot_unary(request=request, retry=retry)
    except gexc.Conflict:
        pass  # taken by an earlier attempt: its state below
    except gexc.GoogleAPICallError as exc:
        raise _failed(item, exc) from exc
    try:
        found = snapshots.get(project=project, snapshot=snap, retry=retry)
    except gexc.NotFound:
        return snap, "pending"  # the operation has not made it yet
    except gexc.GoogleAPICallError as exc:
        raise _failed(item, exc) from exc
    return snap, _SNAPSHOT_STATE.get(str(compute_v1.Snapshot.pb(found).status), "pending")


def delete(disks: compute_v1.DisksClient, operations: compute_v1.ZoneOperationsClient,
           item: Standing, *, retry: gretry.Retry, timeout_s: float, dry_run: bool
           ) -> ActionResult:
    project, zone, name = _where(item)
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN, detail=f"would delete disk {name}"
                            " (GCP has no dry run: the disk was read, not touched)")
    try:
        op = disks.delete_unary(request=compute_v1.DeleteDiskRequest(
            project=project, zone=zone, disk=name,
            request_id=str(uuid.uuid5(_NAMESPACE, f"delete {snapshot_name(item)}"))),
            retry=retry)
        op = _wait(operations, item, op, retry, timeout_s)
    except gexc.NotFound:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
    except gexc.GoogleAPICallError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, project))
    error = op_error(op)
    if error:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=error)
    return ActionResult(outcome=ActionOutcome.DONE, detail="deleted")


def label(disks: compute_v1.DisksClient, operations: compute_v1.ZoneOperationsClient,
          item: Standing, tags: Mapping[str, str], *, retry: gretry.Retry, timeout_s: float,
          dry_run: bool) -> ActionResult:
    project, zone, name = _where(item)
    try:
        raw = compute_v1.Disk.pb(disks.get(project=project, zone=zone, disk=name,
                                           retry=retry))
    except gexc.NotFound:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
    except gexc.GoogleAPICallError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, project))
    current = dict(raw.labels)
    wanted = wanted_labels(current, tags, ())
    if wanted == current or dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN if dry_run else ActionOutcome.DONE,
                            detail=f"{'would set' if dry_run else 'labels of'} {name}: "
                                   f"{label_diff(current, wanted)}")
    request = compute_v1.ZoneSetLabelsRequest(label_fingerprint=raw.label_fingerprint,
                                              labels=wanted)
    try:
        op = disks.set_labels_unary(project=project, zone=zone, resource=name,
                                    zone_set_labels_request_resource=request, retry=retry)
        op = _wait(operations, item, op, retry, timeout_s)
    except gexc.GoogleAPICallError as exc:  # a 412: relabelled meanwhile; tried next time
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, project))
    error = op_error(op)
    return ActionResult(outcome=ActionOutcome.FAILED if error else ActionOutcome.DONE,
                        detail=error or f"labels of {name}: {label_diff(current, wanted)}")
