"""Compute Engine static external addresses that bill while held by nothing running
(costguard/standing/, `resource: address`).

One project is read with `addresses.aggregatedList` (every region, paged); internal
addresses are left out (they do not bill). An address's `users` are what holds it: a VM
(named `ZONE/NAME`, which the standing stage finds in the inventory, so an address held
only by stopped VMs is unused since the latest stop) or a forwarding rule (in use). Google
does not say since when an address has been unused: costguard counts from its first sight.
Global addresses (load balancers') are not read yet.

Google's unused static IP rate is not in costguard's tables yet (no sourced copy of the
price page), so an address is unpriced unless an imported bill names it (bills win, as on
AWS). Release is `addresses.delete` (GCE refuses an address in use), labels
`addresses.setLabels` with the fingerprint just read; each region operation is waited on.
GCP has no DryRun flag: a dry run reads the address and says what would happen.
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
from costguard.standing.model import Standing, StandingKind, StandingList

log = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("0d7e2c4a-91b3-4f5e-8a26-3c9b1e7f4d52")
UNPRICED = "no unused static IP price in costguard's tables (the bill's, once imported)"


def clients(credentials: gcredentials.Credentials | None, endpoint: str | None
            ) -> tuple[Any, Any]:
    """An AddressesClient and a RegionOperationsClient like the instances client (imported
    here: a cycle that governs no address never loads them)."""
    from google.cloud.compute_v1.services.addresses import AddressesClient
    from google.cloud.compute_v1.services.region_operations import RegionOperationsClient

    options = ClientOptions(api_endpoint=endpoint) if endpoint else ClientOptions()
    return (AddressesClient(credentials=credentials, client_options=options),
            RegionOperationsClient(credentials=credentials, client_options=options))


def holder_of(url: str) -> str:
    """`ZONE/NAME` for a VM's URL, else the user's kind and name (`forwardingRules/fr-1`)."""
    parts = url.rstrip("/").split("/")
    if len(parts) >= 4 and parts[-2] == "instances" and parts[-4] == "zones":
        return f"{parts[-3]}/{parts[-1]}"
    return "/".join(parts[-2:])


def to_address(project: str, raw: Any, observed_at: datetime) -> Standing:
    """One regional address (the raw protobuf) as a `Standing`."""
    users = tuple(holder_of(u) for u in raw.users)
    return Standing(
        kind=StandingKind.ADDRESS, provider="gcp", account=project,
        region=short_name(raw.region), resource_id=str(raw.id), name=raw.name,
        state=str(raw.status), in_use=bool(users), used_by=users, detail=raw.address,
        created_at=parse_timestamp(raw.creation_timestamp, observed_at),
        usd_per_month=None, price_source=UNPRICED,
        tags=labels_as_tags(dict(raw.labels)), observed_at=observed_at)


def list_project(addresses: Any, project: str, *, retry: gretry.Retry,
                 observed_at: datetime) -> StandingList:
    """Every external regional address of one project; a project not read is a gap."""
    def read() -> StandingList:
        raws = [type(a).pb(a) for page in addresses.aggregated_list(
            project=project, retry=retry).pages for scoped in page.items.values()
            for a in scoped.addresses]
        return StandingList(items=parsed(
            project, "address", [r for r in raws if r.address_type in ("", "EXTERNAL")],
            lambda raw: to_address(project, raw, observed_at)))  # internal ones do not bill

    return listed(project, read)


def _where(item: Standing) -> tuple[str, str, str]:
    return item.account, item.region, item.name or ""


def describe(addresses: Any, item: Standing, *, retry: gretry.Retry, observed_at: datetime
             ) -> Standing | None:
    project, region, name = _where(item)
    try:
        found = addresses.get(project=project, region=region, address=name, retry=retry)
    except gexc.NotFound:
        return None
    except gexc.GoogleAPICallError as exc:
        raise ProviderError("gcp", item.resource_id, explain(exc, project)) from exc
    raw = type(found).pb(found)
    return None if str(raw.id) != item.resource_id else to_address(project, raw, observed_at)


def _wait(operations: Any, item: Standing, op: Any, retry: gretry.Retry, timeout_s: float
          ) -> Any:
    project, region, _ = _where(item)
    return wait_done(op, lambda name: operations.wait(project=project, region=region,
                                                      operation=name, retry=retry),
                     item.resource_id, timeout_s)


def delete(addresses: Any, operations: Any, item: Standing, *, retry: gretry.Retry,
           timeout_s: float, dry_run: bool) -> ActionResult:
    """Release the address."""
    from costguard.providers.gcp.compute import compute_v1

    project, region, name = _where(item)

    def call() -> Any:
        return _wait(operations, item, addresses.delete_unary(
            request=compute_v1.DeleteAddressRequest(
                project=project, region=region, address=name,
                request_id=str(uuid.uuid5(_NAMESPACE, f"release {item.resource_id}"))),
            retry=retry), retry, timeout_s)

    return removed(item, "released", call, dry_run=dry_run)


def label(addresses: Any, operations: Any, item: Standing, tags: Mapping[str, str], *,
          retry: gretry.Retry, timeout_s: float, dry_run: bool) -> ActionResult:
    from costguard.providers.gcp.compute import compute_v1

    project, region, name = _where(item)

    def write(fingerprint: str, labels: dict[str, str]) -> Any:
        return _wait(operations, item, addresses.set_labels_unary(
            project=project, region=region, resource=name,
            region_set_labels_request_resource=compute_v1.RegionSetLabelsRequest(
                label_fingerprint=fingerprint, labels=labels), retry=retry), retry, timeout_s)

    def read() -> Any:
        found = addresses.get(project=project, region=region, address=name, retry=retry)
        return type(found).pb(found)

    return relabelled(item, tags, read, write, dry_run=dry_run)
