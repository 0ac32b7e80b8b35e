"""What a stopped EC2 instance still costs: its attached EBS volumes, from a shipped table.

One DescribeVolumes call (filtered on the attachment) per instance, only when costguard
stops one (the action alert says what the box still costs). Prices per GB-month by volume
type, plus provisioned IOPS (io1/io2, gp3 above 3,000) and gp3 throughput above 125 MB/s,
come from `data/ebs_prices.json` (source and date in the file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from costguard.errors import ProviderError
from costguard.model import HOURS_PER_MONTH, Instance, PriceQuote, as_of_date
from costguard.providers.aws.boundary import aws_call

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

# the tag on a snapshot costguard takes of a volume before deleting it (terminate.py, the
# standing volumes' delete): the volume's, or the instance's, id
SNAPSHOT_OF_TAG = "costguard:snapshot-of"


@dataclass(frozen=True)
class EbsTable:
    gb_month: dict[str, float]
    iops_month: dict[str, float]
    throughput_month: dict[str, float]
    as_of: str
    snapshot_gb_month: dict[str, float]  # by storage tier: standard, archive
    public_ipv4_hour: float  # an Elastic IP, associated or not


@cache
def ebs_table() -> EbsTable:
    raw = json.loads(resources.files("costguard.providers.aws").joinpath(
        "data/ebs_prices.json").read_text(encoding="utf-8"))
    return EbsTable(raw["gb_month"], raw["iops_month"], raw["throughput_mbps_month"],
                    raw["as_of"], raw["snapshot_gb_month"], raw["public_ipv4_hour"])


def volume_usd_per_month(volume: dict[str, Any], table: EbsTable) -> float | None:
    """Monthly list price of one volume, or None for a type the table does not know."""
    vtype = str(volume.get("VolumeType", ""))
    per_gb = table.gb_month.get(vtype)
    if per_gb is None:
        return None
    usd = per_gb * int(volume.get("Size", 0))
    iops = int(volume.get("Iops") or 0)
    if vtype in ("io1", "io2"):
        usd += iops * table.iops_month[vtype]
    elif vtype == "gp3":
        usd += max(0, iops - 3000) * table.iops_month["gp3_above_3000"]
        throughput = int(volume.get("Throughput") or 125)
        usd += max(0, throughput - 125) * table.throughput_month["gp3_above_125"]
    return usd


def stopped_cost(ec2: EC2Client, instance: Instance) -> PriceQuote | None:
    """Hourly cost of the EBS volumes attached to `instance`; None when unknown."""
    scope = f"{instance.account}/{instance.region}/{instance.instance_id}/volumes"
    try:
        with aws_call(scope):
            page = ec2.describe_volumes(Filters=[
                {"Name": "attachment.instance-id", "Values": [instance.instance_id]}])
    except ProviderError:
        return None
    table = ebs_table()
    priced: list[str] = []
    unknown: list[str] = []
    monthly = 0.0
    for vol in page.get("Volumes", []):
        usd = volume_usd_per_month(dict(vol), table)
        label = f"{vol.get('Size')} GB {vol.get('VolumeType')}"
        if usd is None:
            unknown.append(label)
            continue
        monthly += usd
        priced.append(label)
    if not priced:
        return None
    source = (f"EBS {', '.join(priced)} at us-east-1 list prices ({table.as_of})"
              + (f"; not priced: {', '.join(unknown)}" if unknown else ""))
    return PriceQuote(usd_per_hour=round(monthly / HOURS_PER_MONTH, 4), source=source,
                      as_of=as_of_date(table.as_of), fallback=True)
