"""On-Demand Capacity Reservations and Capacity Blocks for ML: capacity an AWS account pays
for by the hour whether instances run in it or not (costguard/standing/, `resource:
reservation`).

One scope (account, region) is read with DescribeCapacityReservations, paged by NextToken;
only `active` reservations bill (a `scheduled` one has not started, an `expired` or
`cancelled` one has ended). `TotalInstanceCount` is the capacity, `AvailableInstanceCount`
what no instance uses. An unused slot of an On-Demand Capacity Reservation bills at the
instance type's on-demand rate (the Linux rate from costguard's table: a lower bound for
other platforms, said in its price source). A Capacity Block is paid up front for its term:
its unused hours are money already spent, and no list price is given by the API, so it is
left unpriced (the imported bill has its fee).

For a reservation with unused capacity, one DescribeInstances per scope (running instances
of those types) finds its twins: running on-demand instances of its type, zone and tenancy
that run in no reservation (`CapacityReservationId` absent). Each could run in the
reservation instead of paying on-demand beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costguard.errors import ProviderError
from costguard.model import HOURS_PER_MONTH
from costguard.providers.aws.boundary import aws_call
from costguard.providers.aws.gpu_types import shipped_gpu_table
from costguard.providers.aws.standing import _pages, _parsed, _tags, as_utc, says_gone
from costguard.standing.model import Reserved, Standing, StandingKind

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

log = logging.getLogger(__name__)

BILLING = frozenset({"active"})  # the states in which a reservation bills by the hour
Price = Callable[[str], "tuple[float, str] | None"]  # type -> ($/h on demand, source)


def _twin_key(zone: str, itype: str, tenancy: str) -> tuple[str, str, str]:
    return zone, itype, tenancy or "default"


def twins(ec2: EC2Client, reservations: list[dict[str, Any]]
          ) -> dict[tuple[str, str, str], list[str]]:
    """(zone, type, tenancy) -> running on-demand instances in no reservation, for the
    types of `reservations` that have capacity free (no call when none has)."""
    types = sorted({str(r["InstanceType"]) for r in reservations
                    if int(r.get("AvailableInstanceCount") or 0) > 0})
    if not types:
        return {}
    out: dict[tuple[str, str, str], list[str]] = {}
    for page in _pages(ec2, "describe_instances", "Reservations", Filters=[
            {"Name": "instance-type", "Values": types},
            {"Name": "instance-state-name", "Values": ["running"]}]):
        for raw in page.get("Instances") or []:
            if raw.get("CapacityReservationId") or raw.get("InstanceLifecycle"):
                continue  # in a reservation already, or spot / a Capacity Block's
            placement = raw.get("Placement") or {}
            key = _twin_key(str(placement.get("AvailabilityZone", "")),
                            str(raw.get("InstanceType", "")),
                            str(placement.get("Tenancy", "default")))
            out.setdefault(key, []).append(str(raw["InstanceId"]))
    return out


def to_reservation(raw: dict[str, Any], found_twins: dict[tuple[str, str, str], list[str]],
                   *, account: str, region: str, observed_at: datetime, price: Price
                   ) -> Standing:
    itype = str(raw["InstanceType"])
    total = int(raw["TotalInstanceCount"])
    free = int(raw["AvailableInstanceCount"])
    zone = str(raw.get("AvailabilityZone") or "") or None
    block = raw.get("ReservationType") == "capacity-block"
    platform = str(raw.get("InstancePlatform") or "Linux/UNIX")
    gpu = shipped_gpu_table().get(itype)
    quoted = None if block else price(itype)
    unit: float | None = None
    if block:
        source = "a Capacity Block: paid up front (its fee is on the bill)"
    elif quoted is None:
        source = f"no on-demand price for {itype}"
    else:
        unit, source = quoted
        if platform != "Linux/UNIX":
            source += f"; Linux rate, {platform} bills more"
    reserved = Reserved(
        instance_type=itype, capacity=total, used=max(total - free, 0),
        accelerators=gpu.count if gpu else 0, accelerator=gpu.model if gpu else None,
        unit_usd_per_hour=unit,
        ends_at=as_utc(raw["EndDate"]) if raw.get("EndDate") else None,
        match=str(raw.get("InstanceMatchCriteria") or "open"), block=block,
        twins=tuple(found_twins.get(_twin_key(zone or "", itype, str(raw.get("Tenancy") or "")),
                                    ())) if free else ())
    usd = reserved.unused_usd_per_hour
    return Standing(
        kind=StandingKind.RESERVATION, provider="aws", account=account, region=region,
        zone=zone, resource_id=str(raw["CapacityReservationId"]),
        name=_tags(raw).get("Name"), state=str(raw.get("State", "")),
        in_use=reserved.unused == 0, size_gb=None, detail=reserved.words(),
        created_at=as_utc(raw["CreateDate"]) if raw.get("CreateDate") else None,
        usd_per_month=None if usd is None else usd * HOURS_PER_MONTH,
        price_source=source[:128], tags=_tags(raw), observed_at=observed_at,
        reservation=reserved)


def read_scope(ec2: EC2Client, *, account: str, region: str, observed_at: datetime,
               price: Price) -> list[Standing]:
    """Every active capacity reservation of one (account, region)."""
    scope = f"{account}/{region}"
    with aws_call(scope):
        raws = [dict(r) for r in _pages(ec2, "describe_capacity_reservations",
                                         "CapacityReservations")
                if r.get("State") in BILLING]
        found = twins(ec2, [r for r in raws if "InstanceType" in r])
    return _parsed(lambda raw: to_reservation(raw, found, account=account, region=region,
                                              observed_at=observed_at, price=price),
                   raws, "capacity reservation", scope)


def describe(ec2: EC2Client, item: Standing, observed_at: datetime, price: Price
             ) -> Standing | None:
    """`item` as EC2 shows it now (None: gone, or no longer billing)."""
    try:
        with aws_call(f"{item.account}/{item.region}/{item.resource_id}"):
            raws = [dict(r) for r in _pages(ec2, "describe_capacity_reservations",
                                             "CapacityReservations",
                                             CapacityReservationIds=[item.resource_id])]
            live = [r for r in raws if r.get("State") in BILLING]
            found = twins(ec2, live)
    except ProviderError as exc:
        if says_gone(exc):
            return None
        raise
    if not live:
        return None
    return to_reservation(live[0], found, account=item.account, region=item.region,
                          observed_at=observed_at, price=price)
