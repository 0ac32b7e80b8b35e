"""Listing instances: one paged `aggregatedList` per project, mapped to `Instance`.

`instance_id` is the numeric GCE id (stable, unique across projects, and what Cloud
Monitoring calls `resource.labels.instance_id`); the name, which API calls need, is kept
in `Instance.name` and the zone in `Instance.zone`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from costguard.clock import utc
from costguard.model import Gap, Instance, InstanceState, Inventory, Lifecycle
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp import gpus
from costguard.providers.gcp.errors import explain, from_retry_error
from costguard.providers.gcp.lookup import FIELD_MASK_HEADER
from costguard.providers.gcp.owners import owner_from_labels

log = logging.getLogger(__name__)

# What `to_instance` reads of a VM, and what paging and gaps need of a page: the listing
# asks for these alone (a partial response: the `fields` system parameter, sent as the
# X-Goog-FieldMask header). A VM as Compute lists it carries ~3 KB of JSON besides
# (network interfaces, disks with their licences and guest OS features, shielded-VM
# settings ...): parsing it was four times the CPU of parsing what costguard reads.
# tests/providers/gcp/test_gcp_partial_listing.py checks that a VM read through this
# selection maps to the same Instance as the whole VM.
INSTANCE_FIELDS = (
    "id,name,zone,machineType,status,creationTimestamp,lastStartTimestamp,labels,"
    "scheduling(provisioningModel,preemptible),"
    "guestAccelerators(acceleratorType,acceleratorCount),"
    "serviceAccounts/email,metadata/items"
)
_PAGE_FIELDS = "items/*/warning,unreachables,nextPageToken"
LIST_FIELDS = f"items/*/instances({INSTANCE_FIELDS}),{_PAGE_FIELDS}"
# The re-check before acting (lookup.instances, reads.py) reads besides what the stop, the
# relabel and the stopped-cost note need: the label fingerprint and the disks.
# test_gcp_partial_listing.py checks the acting paths read the same through it.
RECHECK_FIELDS = (f"items/*/instances({INSTANCE_FIELDS},labelFingerprint,"
                  f"disks(source,deviceName,autoDelete,type)),{_PAGE_FIELDS}")


class PartialListing:
    """Whether listings ask for a partial response (`GcpSettings.partial_responses`): on
    until the API answers one with 400 (a proxy or an API version that does not take the
    selection), then off for this process, said once in the log."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._lock = threading.Lock()

    @property
    def fields(self) -> str | None:
        return LIST_FIELDS if self._enabled else None

    def recheck_fields(self) -> str | None:
        """The re-check's selection (None: whole VMs, once the API rejected one)."""
        return RECHECK_FIELDS if self._enabled else None

    def rejected(self, project: str, exc: gexc.BadRequest) -> None:
        with self._lock:
            if not self._enabled:
                return
            self._enabled = False
        log.warning("gcp: %s rejected the partial listing (%s); listing whole VMs from now "
                    "on. Set providers.gcp.partial_responses: false to skip the attempt.",
                    project, exc.message)

# SUSPENDED VMs bill for memory/disks like stopped ones and are not running work.
STATES: dict[str, InstanceState] = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "REPAIRING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "PENDING_STOP": InstanceState.STOPPING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "SUSPENDED": InstanceState.STOPPED,
    "STOPPED": InstanceState.STOPPED,
    "TERMINATED": InstanceState.STOPPED,
    "DEPROVISIONING": InstanceState.TERMINATED,
}


COSTGUARD_LABEL = "costguard_"


def labels_as_tags(labels: Mapping[str, str]) -> dict[str, str]:
    """GCE labels as costguard tags. Label keys cannot hold ':', so costguard's own keys are
    written `costguard_protect`, `costguard_snooze-until`; they read back as
    `costguard:protect`, so one policy file serves AWS tags and GCP labels alike."""
    return {(f"costguard:{k[len(COSTGUARD_LABEL):]}" if k.startswith(COSTGUARD_LABEL) else k): v
            for k, v in labels.items()}


def status_name(vm: compute_v1.Instance) -> str:
    # Compute's protos declare enums as strings: `status` is "RUNNING", not an int.
    return str(vm.status)


def to_state(status: str) -> InstanceState:
    return STATES.get(status, InstanceState.PENDING)


def region_of(zone: str) -> str:
    """`us-central1-a` -> `us-central1`."""
    return zone.rsplit("-", 1)[0]


def parse_timestamp(value: str, fallback: datetime) -> datetime:
    if not value:
        return fallback
    try:
        return utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return fallback


def to_instance(project: str, vm: compute_v1.Instance, observed_at: datetime) -> Instance:
    # The raw protobuf, not proto-plus: each proto-plus attribute read marshals a new
    # wrapper, and reading a listing of 3,000 VMs that way cost seconds of CPU (as the
    # metrics' time series did). Compute's protos declare every field optional with
    # proto3 defaults ("" / 0 / empty), so unset fields read as they do through proto-plus.
    raw = compute_v1.Instance.pb(vm)
    zone = gpus.short_name(raw.zone)
    machine_type = gpus.short_name(raw.machine_type)
    attached = [
        (gpus.short_name(a.accelerator_type), int(a.accelerator_count))
        for a in raw.guest_accelerators
    ]
    gpu = gpus.detect(machine_type, attached)
    status = str(raw.status)
    model = raw.scheduling.provisioning_model
    spot = model == "SPOT" or bool(raw.scheduling.preemptible)
    # RESERVATION_BOUND: a VM in a calendar-mode reservation (A3+ GPUs, TPUs, for up to 90
    # days), billed for the reservation's time whether it runs or not, as a Capacity Block;
    # FLEX_START (Dynamic Workload Scheduler) and STANDARD are priced as on-demand
    lifecycle = (Lifecycle.SPOT if spot else Lifecycle.CAPACITY_BLOCK
                 if model == "RESERVATION_BOUND" else Lifecycle.ON_DEMAND)
    labels = dict(raw.labels)
    return Instance(
        provider="gcp",
        account=project,
        region=region_of(zone),
        zone=zone,
        instance_id=str(raw.id),
        name=raw.name,
        instance_type=machine_type,
        state=to_state(status),
        state_reason=status if status not in ("RUNNING", "TERMINATED") else None,
        lifecycle=lifecycle,
        gpu_count=gpu.count if gpu else 0,
        gpu_model=(gpu.spec.model if gpu.spec else gpu.accelerator) if gpu else None,
        gpu_memory_mib=gpu.spec.memory_mib if gpu and gpu.spec else None,
        # when it last started, as EC2's LaunchTime is (a VM created a month ago and
        # started an hour ago has run an hour); a VM never started: when it was created
        launch_time=parse_timestamp(raw.last_start_timestamp,
                                    parse_timestamp(raw.creation_timestamp, observed_at)),
        tags=labels_as_tags(labels),
        observed_at=observed_at,
        # the service account the VM runs as: who launched it, as far as the listing says
        launched_by=(raw.service_accounts[0].email or None) if raw.service_accounts else None,
        owner=owner_from_labels(labels, {i.key: i.value for i in raw.metadata.items}),
    )


def _pages(
    client: compute_v1.InstancesClient, project: str, page_size: int, retry: gretry.Retry,
    fields: str | None = None,
) -> Iterator[compute_v1.InstanceAggregatedList]:
    request = compute_v1.AggregatedListInstancesRequest(project=project, max_results=page_size)
    metadata = [(FIELD_MASK_HEADER, fields)] if fields else []
    yield from client.aggregated_list(request=request, retry=retry, metadata=metadata).pages


def _read(
    client: compute_v1.InstancesClient, project: str, page_size: int, retry: gretry.Retry,
    observed_at: datetime, fields: str | None,
) -> Inventory:
    """The project's instances and its unreachable zones; a failed call raises."""
    instances: list[Instance] = []
    gaps: list[Gap] = []
    for page in _pages(client, project, page_size, retry, fields):
        for unreachable in page.unreachables:
            gaps.append(Gap(provider="gcp", scope=f"{project}/{unreachable}",
                            error="zone unreachable; its instances are missing this cycle"))
        for scope, scoped in page.items.items():
            warning: Any = scoped.warning  # compute_v1.Warning shadows the builtin
            if warning and warning.code == "UNREACHABLE":
                gaps.append(Gap(provider="gcp", scope=f"{project}/{scope}",
                                error=f"unreachable: {warning.message}"))
            instances.extend(to_instance(project, vm, observed_at) for vm in scoped.instances)
    return Inventory(instances=instances, gaps=gaps)


def list_project(
    client: compute_v1.InstancesClient,
    project: str,
    *,
    page_size: int,
    retry: gretry.Retry,
    observed_at: datetime,
    partial: PartialListing | None = None,
) -> Inventory:
    """All instances of one project; a failure becomes a gap for the project (or a zone):
    a half-read project is reported as a gap, not as a smaller fleet. With `partial`, VMs
    are read as a partial response while the API takes one: a 400 to it is tried again
    whole, and if that is answered, partial listings stop."""
    fields = partial.fields if partial is not None else None
    try:
        try:
            return _read(client, project, page_size, retry, observed_at, fields)
        except gexc.BadRequest as exc:
            if partial is None or fields is None:
                raise
            whole = _read(client, project, page_size, retry, observed_at, None)
            partial.rejected(project, exc)
            return whole
    except gexc.GoogleAPICallError as exc:
        return Inventory(instances=[], gaps=[
            Gap(provider="gcp", scope=project, error=explain(exc, project))])
    except gexc.RetryError as exc:
        return Inventory(instances=[], gaps=[
            Gap(provider="gcp", scope=project, error=str(from_retry_error(exc, project)))])
