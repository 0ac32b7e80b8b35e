"""What a stopped GCE VM still costs: its persistent disks, from a shipped table.

The VM is read once (its attached disks) and each zonal persistent disk once (`disks.get`:
size and type, which the attached-disk entry does not carry), only when costguard stops
a VM. Prices per GiB-month by disk type come from `data/disk_prices.json` (capacity only;
source and date in the file). Local SSDs are not counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from costguard.errors import ProviderError
from costguard.model import Instance, PriceQuote
from costguard.providers.gcp.actions import ActionContext, read
from costguard.providers.gcp.terminate import attached_disks

HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class DiskTable:
    gib_month: dict[str, float]
    as_of: str


@cache
def disk_table() -> DiskTable:
    raw = json.loads(resources.files("costguard.providers.gcp").joinpath(
        "data/disk_prices.json").read_text(encoding="utf-8"))
    return DiskTable(raw["gib_month"], raw["as_of"])


def stopped_cost(ctx: ActionContext, disks: compute_v1.DisksClient, instance: Instance
                 ) -> PriceQuote | None:
    """Hourly cost of the VM's persistent disks; None when nothing could be priced."""
    try:
        vm = read(ctx, instance)
    except ProviderError:
        return None
    table = disk_table()
    monthly, priced, unknown = 0.0, [], []
    for d in attached_disks(vm):
        if not d.persistent or d.zone is None:
            continue
        try:
            disk = disks.get(project=instance.account, zone=d.zone, disk=d.name,
                             retry=ctx.retry)
        except (gexc.GoogleAPICallError, gexc.RetryError):
            unknown.append(d.name)
            continue
        dtype = disk.type_.rsplit("/", 1)[-1]
        label = f"{disk.size_gb} GiB {dtype}"
        rate = table.gib_month.get(dtype)
        if rate is None:
            unknown.append(label)
            continue
        monthly += rate * int(disk.size_gb)
        priced.append(label)
    if not priced:
        return None
    source = (f"persistent disks {', '.join(priced)} at us-central1 list prices "
              f"({table.as_of})" + (f"; not priced: {', '.join(unknown)}" if unknown else ""))
    return PriceQuote(usd_per_hour=round(monthly / HOURS_PER_MONTH, 4), source=source)
