"""DescribeCapacityReservations, which moto 5.2 does not implement, served by moto's own EC2
endpoint: a fake that follows the API reference (for the tests and `costguard demo --cloud
aws`, both on moto). Its records carry the fields of the API
reference's `CapacityReservation` shape; moto's serializer writes the answer from botocore's
EC2 service model (the shapes the reference documents), and botocore parses that XML as it
parses EC2's own. Everything else (the instances that could use a reservation) is moto's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

# (account, region) -> the reservations DescribeCapacityReservations answers
HELD: dict[tuple[str, str], list[dict[str, Any]]] = {}
ACCOUNT = "123456789012"  # moto's default account
_PAGE = 2  # a small page, so paging is exercised


def reservation(rid: str, itype: str, total: int, available: int, *, zone: str = "us-east-1a",
                state: str = "active", match: str = "open", kind: str = "default",
                end: datetime | None = None, tags: dict[str, str] | None = None,
                platform: str = "Linux/UNIX", created: datetime | None = None
                ) -> dict[str, Any]:
    """One record, with the fields the API reference gives a `CapacityReservation`."""
    region = zone[:-1]
    return {
        "CapacityReservationId": rid, "OwnerId": ACCOUNT,
        "CapacityReservationArn":
            f"arn:aws:ec2:{region}:{ACCOUNT}:capacity-reservation/{rid}",
        "AvailabilityZoneId": "use1-az1", "InstanceType": itype,
        "InstancePlatform": platform, "AvailabilityZone": zone, "Tenancy": "default",
        "TotalInstanceCount": total, "AvailableInstanceCount": available,
        "EbsOptimized": True, "EphemeralStorage": False, "State": state,
        "StartDate": created or datetime(2026, 11, 1, tzinfo=UTC),
        **({"EndDate": end, "EndDateType": "limited"} if end else {"EndDateType": "unlimited"}),
        "InstanceMatchCriteria": match,
        "CreateDate": created or datetime(2026, 11, 1, tzinfo=UTC),
        "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()],
        "CapacityAllocations": [{"AllocationType": "used", "Count": total - available}],
        "ReservationType": kind,
    }


def _describe(self: EC2Response) -> ActionResult:
    held = HELD.get((self.current_account, self.region), [])
    wanted = self._get_param("CapacityReservationIds", [])
    if wanted:
        unknown = [w for w in wanted if w not in {r["CapacityReservationId"] for r in held}]
        if unknown:
            raise EC2ClientError("InvalidCapacityReservationId.NotFound",
                                 f"The capacity reservation ID '{unknown[0]}' does not exist")
        held = [r for r in held if r["CapacityReservationId"] in wanted]
    start = int(self._get_param("NextToken") or 0)
    page = held[start:start + _PAGE]
    more = start + _PAGE < len(held)
    return ActionResult({"CapacityReservations": page,
                         **({"NextToken": str(start + _PAGE)} if more else {})})


@contextmanager
def serving() -> Iterator[dict[tuple[str, str], list[dict[str, Any]]]]:
    """moto's EC2 answers DescribeCapacityReservations from `HELD` while inside."""
    had = EC2Response.__dict__.get("describe_capacity_reservations")
    EC2Response.describe_capacity_reservations = _describe  # type: ignore[attr-defined]
    HELD.clear()
    try:
        yield HELD
    finally:
        HELD.clear()
        if had is None:
            del EC2Response.describe_capacity_reservations  # type: ignore[attr-defined]
        else:
            EC2Response.describe_capacity_reservations = had  # type: ignore[attr-defined]
