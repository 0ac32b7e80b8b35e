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
from costguard.model import ActionOutcome, ActionResult, Gap
from costguard.providers.gcp.actions import label_diff, op_error, wanted_labels
from costguard.providers.gcp.errors import explain, from_retry_error
from costguard.providers.gcp.gpus import short_name
from costguard.providers.gcp.inventory import labels_as_tags, parse_timestamp
from costguard.providers.gcp.volumes import wait_done
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
    out = StandingList()
    try:
        for page in addresses.aggregated_list(project=project, retry=retry).pages:
            for scoped in page.items.values():
                for found in scoped.addresses:
                    raw = type(found).pb(found)
                    if raw.address_type not in ("", "EXTERNAL"):
                        continue  # an internal address does not bill
                    try:
                        out.items.append(to_address(project, raw, observed_at))
                    except (ValueError, TypeError, OverflowError) as exc:
                        log.warning("%s: address %s left out, not readable (%s)", project,
                                    str(raw.name)[:64], type(exc).__name__)
    except gexc.GoogleAPICallError as exc:
        return StandingList(gaps=[Gap(provider="gcp", scope=project,
                                      error=explain(exc, project))])
    except gexc.RetryError as exc:
        return StandingList(gaps=[Gap(provider="gcp", scope=project,
                                      error=str(from_retry_error(exc, project)))])
    return out


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
    project, region, name = _where(item)
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN, detail=f"would release {name} "
                            f"({item.detail}; GCP has no dry run: it was read, not touched)")
    from costguard.providers.gcp.compute import compute_v1

    try:
        op = addresses.delete_unary(request=compute_v1.DeleteAddressRequest(
            project=project, region=region, address=name,
            request_id=str(uuid.uuid5(_NAMESPACE, f"release {item.resource_id}"))),
            retry=retry)
        op = _wait(operations, item, op, retry, timeout_s)
    except gexc.NotFound:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
    except gexc.GoogleAPICallError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, project))
    error = op_error(op)
    return ActionResult(outcome=ActionOutcome.FAILED if error else ActionOutcome.DONE,
                        detail=error or "released")


def label(addresses: Any, operations: Any, item: Standing, tags: Mapping[str, str], *,
          retry: gretry.Retry, timeout_s: float, dry_run: bool) -> ActionResult:
    project, region, name = _where(item)
    from costguard.providers.gcp.compute import compute_v1

    try:
        raw = type(found := addresses.get(project=project, region=region, address=name,
                                          retry=retry)).pb(found)
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
    try:
        op = addresses.set_labels_unary(
            project=project, region=region, resource=name,
            region_set_labels_request_resource=compute_v1.RegionSetLabelsRequest(
                label_fingerprint=raw.label_fingerprint, labels=wanted), retry=retry)
        op = _wait(operations, item, op, retry, timeout_s)
    except gexc.GoogleAPICallError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, project))
    error = op_error(op)
    return ActionResult(outcome=ActionOutcome.FAILED if error else ActionOutcome.DONE,
                        detail=error or f"labels of {name}: {label_diff(current, wanted)}")
