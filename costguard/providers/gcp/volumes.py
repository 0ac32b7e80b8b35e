"""Compute Engine persistent disks that bill while nothing runs (costguard/standing/,
`resource: volume`): zonal disks no VM uses, and disks of VMs the inventory shows stopped.

One project is read with `disks.aggregatedList` (every zone, paged). A disk's `users` are
the VMs it is attached to (by name: the standing stage finds them in the inventory by
name and zone); a disk nothing uses is unused since its `lastDetachTimestamp` where it has
one (else costguard's first sight). A disk the GKE PD CSI driver made for a
PersistentVolume (its `description`) stays Kubernetes's: held, attached or not. Regional
disks (replicated across two zones) are left out and counted in the log: snapshotting and
deleting one takes the regionDisks calls, which costguard does not make yet. Prices:
capacity by type from `data/disk_prices.json` (its source and date in the file); a type the
table lacks is unpriced.

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
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from costguard.errors import ProviderError
from costguard.model import ActionResult, Gap
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.disks import disk_table
from costguard.providers.gcp.errors import explain
from costguard.providers.gcp.gpus import short_name
from costguard.providers.gcp.inventory import labels_as_tags, parse_timestamp, region_of
from costguard.providers.gcp.standing_calls import (
    listed,
    parsed,
    relabelled,
    removed,
    wait_done,
)
from costguard.providers.gcp.terminate import SNAPSHOT_OF_LABEL
from costguard.standing.kubernetes import claim_of, description_meta
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
    claim = claim_of(description_meta(raw.description))  # the GKE PD CSI driver's disk
    table = disk_table()
    rate = table.gib_month.get(dtype)
    return Standing(
        kind=StandingKind.VOLUME, provider="gcp", account=project, region=region_of(zone),
        zone=zone, resource_id=str(raw.id), name=raw.name, state=str(raw.status),
        in_use=bool(users), used_by=users + ((claim,) if claim else ()), size_gb=size,
        detail=dtype,
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
    def read() -> StandingList:
        out, regional = StandingList(), []
        request = compute_v1.AggregatedListDisksRequest(project=project)
        for page in disks.aggregated_list(request=request, retry=retry).pages:
            for scope, scoped in page.items.items():
                warning: Any = scoped.warning
                if warning and warning.code == "UNREACHABLE":
                    out.gaps.append(Gap(provider="gcp", scope=f"{project}/{scope}",
                                        error=f"unreachable: {warning.message}"))
                raws = [compute_v1.Disk.pb(d) for d in scoped.disks]
                regional += [r for r in raws if not r.zone]
                out.items.extend(parsed(project, "disk", [r for r in raws if r.zone],
                                        lambda raw: to_volume(project, raw, observed_at)))
        if regional:
            log.info("%s: %d regional disk(s) not governed (regionDisks calls not made)",
                     project, len(regional))
        return out

    return listed(project, read)


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

    def call() -> compute_v1.Operation:
        return _wait(operations, item, disks.delete_unary(request=compute_v1.DeleteDiskRequest(
            project=project, zone=zone, disk=name,
            request_id=str(uuid.uuid5(_NAMESPACE, f"delete {snapshot_name(item)}"))),
            retry=retry), retry, timeout_s)

    return removed(item, "deleted", call, dry_run=dry_run)


def label(disks: compute_v1.DisksClient, operations: compute_v1.ZoneOperationsClient,
          item: Standing, tags: Mapping[str, str], *, retry: gretry.Retry, timeout_s: float,
          dry_run: bool) -> ActionResult:
    project, zone, name = _where(item)

    def write(fingerprint: str, labels: dict[str, str]) -> compute_v1.Operation:
        request = compute_v1.ZoneSetLabelsRequest(label_fingerprint=fingerprint, labels=labels)
        return _wait(operations, item, disks.set_labels_unary(
            project=project, zone=zone, resource=name, zone_set_labels_request_resource=request,
            retry=retry), retry, timeout_s)

    return relabelled(item, tags, lambda: compute_v1.Disk.pb(disks.get(
        project=project, zone=zone, disk=name, retry=retry)), write, dry_run=dry_run)
