"""Listing instances: one paged `aggregatedList` per project, mapped to `Instance`.

`instance_id` is the numeric GCE id (stable, unique across projects, and what Cloud
Monitoring calls `resource.labels.instance_id`); the name, which API calls need, is kept
in `Instance.name` and the zone in `Instance.zone`.
"""

from __future__ import annotations

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
from costguard.providers.gcp.owners import owner_from_labels

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
    spot = (raw.scheduling.provisioning_model == "SPOT" or bool(raw.scheduling.preemptible))
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
        lifecycle=Lifecycle.SPOT if spot else Lifecycle.ON_DEMAND,
        gpu_count=gpu.count if gpu else 0,
        gpu_model=(gpu.spec.model if gpu.spec else gpu.accelerator) if gpu else None,
        gpu_memory_mib=gpu.spec.memory_mib if gpu and gpu.spec else None,
        launch_time=parse_timestamp(raw.creation_timestamp, observed_at),
        tags=labels_as_tags(labels),
        observed_at=observed_at,
        # the service account the VM runs as: who launched it, as far as the listing says
        launched_by=(raw.service_accounts[0].email or None) if raw.service_accounts else None,
        owner=owner_from_labels(labels, {i.key: i.value for i in raw.metadata.items}),
    )


def _pages(
    client: compute_v1.InstancesClient, project: str, page_size: int, retry: gretry.Retry
) -> Iterator[compute_v1.InstanceAggregatedList]:
    request = compute_v1.AggregatedListInstancesRequest(project=project, max_results=page_size)
    yield from client.aggregated_list(request=request, retry=retry).pages


def list_project(
    client: compute_v1.InstancesClient,
    project: str,
    *,
    page_size: int,
    retry: gretry.Retry,
    observed_at: datetime,
) -> Inventory:
    """All instances of one project; a failure becomes a gap for the project (or a zone)."""
    instances: list[Instance] = []
    gaps: list[Gap] = []
    try:
        for page in _pages(client, project, page_size, retry):
            for unreachable in page.unreachables:
                gaps.append(
                    Gap(
                        provider="gcp",
                        scope=f"{project}/{unreachable}",
                        error="zone unreachable; its instances are missing this cycle",
                    )
                )
            for scope, scoped in page.items.items():
                warning: Any = scoped.warning  # compute_v1.Warning shadows the builtin
                if warning and warning.code == "UNREACHABLE":
                    gaps.append(
                        Gap(
                            provider="gcp",
                            scope=f"{project}/{scope}",
                            error=f"unreachable: {warning.message}",
                        )
                    )
                instances.extend(to_instance(project, vm, observed_at) for vm in scoped.instances)
    except gexc.GoogleAPICallError as exc:
        gaps.append(Gap(provider="gcp", scope=project, error=explain(exc, project)))
        # A half-read project is reported as a gap, not as a smaller fleet.
        instances = []
    except gexc.RetryError as exc:
        gaps.append(Gap(provider="gcp", scope=project, error=str(from_retry_error(exc, project))))
        instances = []
    return Inventory(instances=instances, gaps=gaps)
