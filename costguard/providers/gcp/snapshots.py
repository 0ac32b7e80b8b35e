"""Compute Engine disk snapshots nothing needs (costguard/standing/, `resource: snapshot`).

One project is read with `snapshots.list` (global, paged), and what needs a snapshot with
`images.list` (an image's `sourceSnapshot`), `instanceTemplates.aggregatedList` (global and
regional templates: a disk's `initializeParams.sourceSnapshot`) and `disks.aggregatedList`
(a disk made from it, as on AWS: conservative). A snapshot the GKE PD CSI driver took for
a VolumeSnapshot (its `description`) is Kubernetes's. A snapshot a snapshot schedule made
(`autoCreated`) is its schedule's to expire; one costguard took before deleting a disk
(labelled `costguard_snapshot-of`) is kept: both count as in use. Google does not say when
a snapshot stopped being needed: the clock starts at costguard's first sight.

Unpriced unless an imported bill names it (Google's snapshot rates are not in a sourced
table here). Delete is `snapshots.delete`, labels `snapshots.setLabels` with the fingerprint
just read, each global operation waited on. GCP has no DryRun flag: a dry run reads the
snapshot and says what would happen.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.api_core.client_options import ClientOptions
from google.auth import credentials as gcredentials

from costguard.errors import ProviderError
from costguard.model import ActionResult
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.errors import explain
from costguard.providers.gcp.gpus import short_name
from costguard.providers.gcp.inventory import labels_as_tags, parse_timestamp
from costguard.providers.gcp.standing_calls import (
    listed,
    parsed,
    relabelled,
    removed,
    wait_done,
)
from costguard.providers.gcp.terminate import SNAPSHOT_OF_LABEL
from costguard.standing.kubernetes import description_meta, volume_snapshot_of
from costguard.standing.model import Standing, StandingKind, StandingList

log = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("3e81b0c7-5d2f-4a96-b7e4-1f6a9c2d8e03")
UNPRICED = "no snapshot price in costguard's tables (the bill's, once imported)"


class Clients:
    """The clients a snapshot listing and its actions use, made when first needed."""

    def __init__(self, credentials: gcredentials.Credentials | None, endpoint: str | None,
                 disks: compute_v1.DisksClient) -> None:
        from google.cloud.compute_v1.services.global_operations import GlobalOperationsClient
        from google.cloud.compute_v1.services.images import ImagesClient
        from google.cloud.compute_v1.services.instance_templates import (
            InstanceTemplatesClient,
        )
        from google.cloud.compute_v1.services.snapshots import SnapshotsClient

        options = ClientOptions(api_endpoint=endpoint) if endpoint else ClientOptions()
        self.snapshots = SnapshotsClient(credentials=credentials, client_options=options)
        self.images = ImagesClient(credentials=credentials, client_options=options)
        self.templates = InstanceTemplatesClient(credentials=credentials,
                                                 client_options=options)
        self.operations = GlobalOperationsClient(credentials=credentials,
                                                 client_options=options)
        self.disks = disks

    def close(self) -> None:
        for client in (self.snapshots, self.images, self.templates, self.operations):
            client.transport.close()  # type: ignore[no-untyped-call]


def needs(c: Clients, project: str, retry: gretry.Retry) -> dict[str, list[str]]:
    """Snapshot name -> what needs it: images, instance templates, disks made from it."""
    out: dict[str, list[str]] = {}
    for image in c.images.list(project=project, retry=retry):
        raw = type(image).pb(image)
        if raw.source_snapshot:
            out.setdefault(short_name(raw.source_snapshot), []).append(f"image {raw.name}")
    for page in c.templates.aggregated_list(project=project, retry=retry).pages:
        for scoped in page.items.values():
            for template in scoped.instance_templates:
                raw = type(template).pb(template)
                for disk in raw.properties.disks:
                    snap = disk.initialize_params.source_snapshot
                    if snap:
                        out.setdefault(short_name(snap), []).append(
                            f"instance template {raw.name}")
    request = compute_v1.AggregatedListDisksRequest(project=project)
    for page in c.disks.aggregated_list(request=request, retry=retry).pages:
        for scoped in page.items.values():
            for disk in scoped.disks:
                raw = compute_v1.Disk.pb(disk)
                if raw.source_snapshot:
                    out.setdefault(short_name(raw.source_snapshot), []).append(
                        f"disk {raw.name}")
    return out


def to_snapshot(project: str, raw: Any, needed: Mapping[str, list[str]],
                observed_at: datetime) -> Standing:
    """One snapshot (the raw protobuf) as a `Standing`."""
    labels = dict(raw.labels)
    held = list(needed.get(raw.name, []))
    claimed = volume_snapshot_of(description_meta(raw.description))  # a VolumeSnapshot's
    if claimed:
        held.append(claimed)
    if raw.auto_created:
        held.append(f"snapshot schedule {short_name(raw.source_snapshot_schedule_policy)}"
                    if raw.source_snapshot_schedule_policy else "a snapshot schedule")
    if SNAPSHOT_OF_LABEL in labels:
        held.append(f"kept by costguard: taken before deleting {labels[SNAPSHOT_OF_LABEL]}")
    return Standing(
        kind=StandingKind.SNAPSHOT, provider="gcp", account=project, region="global",
        resource_id=str(raw.id), name=raw.name, state=str(raw.status), in_use=bool(held),
        used_by=tuple(held), size_gb=int(raw.disk_size_gb),
        detail=short_name(raw.source_disk) if raw.source_disk else "",
        created_at=parse_timestamp(raw.creation_timestamp, observed_at),
        usd_per_month=None, price_source=UNPRICED, tags=labels_as_tags(labels),
        observed_at=observed_at)


def list_project(c: Clients, project: str, *, retry: gretry.Retry, observed_at: datetime
                 ) -> StandingList:
    """Every snapshot of one project, with what needs it; a project not read is a gap
    (nothing concluded from a half-read one)."""
    def read() -> StandingList:
        needed = needs(c, project, retry)
        raws = [type(s).pb(s) for s in c.snapshots.list(project=project, retry=retry)]
        return StandingList(items=parsed(project, "snapshot", raws, lambda raw: to_snapshot(
            project, raw, needed, observed_at)))

    return listed(project, read)


def describe(c: Clients, item: Standing, *, retry: gretry.Retry, observed_at: datetime
             ) -> Standing | None:
    try:
        found = c.snapshots.get(project=item.account, snapshot=item.name, retry=retry)
        raw = type(found).pb(found)
        if str(raw.id) != item.resource_id:
            return None  # another snapshot under the name
        needed = needs(c, item.account, retry)
    except gexc.NotFound:
        return None
    except gexc.GoogleAPICallError as exc:
        raise ProviderError("gcp", item.resource_id, explain(exc, item.account)) from exc
    return to_snapshot(item.account, raw, needed, observed_at)


def _wait(c: Clients, item: Standing, op: Any, retry: gretry.Retry, timeout_s: float) -> Any:
    return wait_done(op, lambda name: c.operations.wait(project=item.account, operation=name,
                                                        retry=retry),
                     item.resource_id, timeout_s)


def delete(c: Clients, item: Standing, *, retry: gretry.Retry, timeout_s: float,
           dry_run: bool) -> ActionResult:
    def call() -> Any:
        return _wait(c, item, c.snapshots.delete_unary(request=compute_v1.DeleteSnapshotRequest(
            project=item.account, snapshot=item.name or "",
            request_id=str(uuid.uuid5(_NAMESPACE, f"delete {item.resource_id}"))),
            retry=retry), retry, timeout_s)

    return removed(item, "deleted", call, dry_run=dry_run)


def label(c: Clients, item: Standing, tags: Mapping[str, str], *, retry: gretry.Retry,
          timeout_s: float, dry_run: bool) -> ActionResult:
    def write(fingerprint: str, labels: dict[str, str]) -> Any:
        return _wait(c, item, c.snapshots.set_labels_unary(
            project=item.account, resource=item.name or "",
            global_set_labels_request_resource=compute_v1.GlobalSetLabelsRequest(
                label_fingerprint=fingerprint, labels=labels), retry=retry), retry, timeout_s)

    def read() -> Any:
        found = c.snapshots.get(project=item.account, snapshot=item.name or "", retry=retry)
        return type(found).pb(found)

    return relabelled(item, tags, read, write, dry_run=dry_run)
