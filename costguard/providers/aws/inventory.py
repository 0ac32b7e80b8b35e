"""Reading one (account, region) scope: DescribeInstances pages into `Instance` values."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from costguard.clock import utc
from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.providers.aws.boundary import aws_call
from costguard.providers.aws.gpu_types import GpuSpec, GpuTypeCatalog, shipped_gpu_table
from costguard.providers.aws.instance_xml import lean_records
from costguard.providers.aws.owners import GroupSizes, owner_from_tags, with_group_sizes

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

log = logging.getLogger(__name__)

PAGE_SIZE = 1000  # DescribeInstances maximum

EC2_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    # shutting-down ends in terminated and is no longer billed as running compute.
    "shutting-down": InstanceState.TERMINATED,
    "terminated": InstanceState.TERMINATED,
}


@dataclass(frozen=True)
class HostNames:
    """Names the CloudWatch agent may report as `host` for an instance."""

    private_dns: str | None
    hostname: str | None  # first label of the private DNS name: what `hostname` prints


@dataclass(frozen=True)
class ScopeResult:
    instances: list[Instance]
    hosts: dict[str, HostNames]
    pages: int


def describe_pages(ec2: EC2Client, scope: str) -> Iterator[list[dict[str, Any]]]:
    """Each page's instances, following NextToken ourselves (a page holds up to 1000)."""
    token: str | None = None
    with aws_call(scope):
        while True:
            kwargs: dict[str, Any] = {"MaxResults": PAGE_SIZE}
            if token:
                kwargs["NextToken"] = token
            with lean_records():
                page = ec2.describe_instances(**kwargs)
            yield [
                dict(raw)
                for reservation in page.get("Reservations", [])
                for raw in reservation.get("Instances", [])
            ]
            token = page.get("NextToken")
            if not token:
                return


def read_scope(
    ec2: EC2Client,
    *,
    account: str,
    region: str,
    catalog: GpuTypeCatalog,
    observed_at: datetime,
    autoscaling: Callable[[], Any] | None = None,
    group_sizes: GroupSizes | None = None,
) -> ScopeResult:
    """One scope's instances. `autoscaling` hands out the scope's Auto Scaling client, asked
    for only when some instance belongs to a group (to size the groups, one call per 50 not
    in `group_sizes`)."""
    scope = f"{account}/{region}"
    raws: list[dict[str, Any]] = []
    pages = 0
    for page in describe_pages(ec2, scope):
        raws += page
        pages += 1
    specs = _gpu_specs(ec2, catalog, region, {r["InstanceType"] for r in raws})
    instances = [
        to_instance(
            r, account=account, region=region, gpu=specs[r["InstanceType"]], observed_at=observed_at
        )
        for r in raws
    ]
    if autoscaling is not None and any(i.owner for i in instances):
        instances = with_group_sizes(instances, autoscaling(), f"{account}/{region}",
                                     group_sizes or GroupSizes(timedelta(0)), observed_at)
    hosts = {r["InstanceId"]: host_names(r) for r in raws}
    return ScopeResult(instances, hosts, pages)


def _gpu_specs(
    ec2: EC2Client, catalog: GpuTypeCatalog, region: str, types: set[str]
) -> dict[str, GpuSpec]:
    try:
        return catalog.resolve(ec2, region, types)
    except ProviderError as exc:
        # GPU details are enrichment: without DescribeInstanceTypes the shipped table still
        # knows the common GPU types, and the scope's instances are not lost.
        log.warning("GPU details from the shipped table only (%s)", exc)
        table = shipped_gpu_table()
        return {t: table.get(t, GpuSpec.none()) for t in types}


def lifecycle_of(raw: dict[str, Any]) -> Lifecycle:
    # Decided here, never with the `instance-lifecycle` filter (moto ignores it, and a filter
    # would need a second call for the on-demand half).
    kind = raw.get("InstanceLifecycle")
    if kind == "spot" or raw.get("SpotInstanceRequestId"):
        return Lifecycle.SPOT
    if kind == "capacity-block":
        return Lifecycle.CAPACITY_BLOCK
    # "scheduled" (Scheduled Instances, retired) and "interruptible-capacity-reservation"
    # are priced as on-demand
    return Lifecycle.ON_DEMAND


def state_reason_of(raw: dict[str, Any]) -> str | None:
    code = (raw.get("StateReason") or {}).get("Code")
    return str(code) if code else None


def host_names(raw: dict[str, Any]) -> HostNames:
    dns = raw.get("PrivateDnsName") or None
    return HostNames(private_dns=dns, hostname=dns.split(".", 1)[0] if dns else None)


def to_instance(
    raw: dict[str, Any], *, account: str, region: str, gpu: GpuSpec, observed_at: datetime
) -> Instance:
    tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}
    return Instance(
        provider="aws",
        account=account,
        region=region,
        zone=(raw.get("Placement") or {}).get("AvailabilityZone") or None,
        instance_id=raw["InstanceId"],
        name=tags.get("Name"),
        instance_type=raw["InstanceType"],
        state=EC2_STATES.get(raw["State"]["Name"], InstanceState.PENDING),
        state_reason=state_reason_of(raw),
        lifecycle=lifecycle_of(raw),
        gpu_count=gpu.count,
        gpu_model=gpu.model,
        gpu_memory_mib=gpu.memory_mib,
        launch_time=utc(raw["LaunchTime"]),
        tags=tags,
        observed_at=observed_at,
        launched_by=(raw.get("IamInstanceProfile") or {}).get("Arn") or None,
        owner=owner_from_tags(tags, region),
    )
