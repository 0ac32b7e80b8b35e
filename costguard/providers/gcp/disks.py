"""What a stopped GCE VM still costs: its persistent disks, from a shipped table.

Size and type come from the disk resource (the attached-disk entry of the VM does not carry
the type). After a batched stop, `stopped_costs` prices every stopped VM at once: the VMs
as read back after the stop name their disks, and one `disks.aggregatedList` filtered by
those names (lookup.py) reads them all. For a VM stopped on its own, `stopped_cost` reads
the VM (`instances.get`) and each zonal persistent disk (`disks.get`). Prices per
GiB-month by disk type come from `data/disk_prices.json` (capacity only; source and date in
the file). Local SSDs are not counted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from costguard.errors import ProviderError
from costguard.model import HOURS_PER_MONTH, Instance, PriceQuote, as_of_date
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp import lookup
from costguard.providers.gcp.actions import ActionContext, read
from costguard.providers.gcp.terminate import Disk, attached_disks


@dataclass(frozen=True)
class DiskTable:
    gib_month: dict[str, float]
    as_of: str


@cache
def disk_table() -> DiskTable:
    raw = json.loads(resources.files("costguard.providers.gcp").joinpath(
        "data/disk_prices.json").read_text(encoding="utf-8"))
    return DiskTable(raw["gib_month"], raw["as_of"])


def _priced(vm: compute_v1.Instance) -> list[Disk]:
    """The VM's disks that cost money while it is stopped and that we price: zonal
    persistent disks."""
    return [d for d in attached_disks(vm) if d.persistent and d.zone is not None]


def quote(disks: Sequence[tuple[str, compute_v1.Disk | None]]) -> PriceQuote | None:
    """Hourly cost of (name, disk) pairs, None for a disk that could not be read; None when
    nothing could be priced."""
    table = disk_table()
    monthly, priced, unknown = 0.0, [], []
    for name, disk in disks:
        if disk is None:
            unknown.append(name)
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
    return PriceQuote(usd_per_hour=round(monthly / HOURS_PER_MONTH, 4), source=source,
                      as_of=as_of_date(table.as_of), fallback=True)


def stopped_cost(ctx: ActionContext, disks: compute_v1.DisksClient, instance: Instance
                 ) -> PriceQuote | None:
    """Hourly cost of the VM's persistent disks; None when nothing could be priced."""
    try:
        vm = read(ctx, instance)
    except ProviderError:
        return None
    found: list[tuple[str, compute_v1.Disk | None]] = []
    for d in _priced(vm):
        try:
            found.append((d.name, disks.get(project=instance.account, zone=d.zone,
                                            disk=d.name, retry=ctx.retry)))
        except (gexc.GoogleAPICallError, gexc.RetryError):
            found.append((d.name, None))
    return quote(found)


def stopped_costs(client: compute_v1.DisksClient,
                  vms: Sequence[tuple[Instance, compute_v1.Instance]], *,
                  page_size: int, retry: gretry.Retry) -> dict[str, PriceQuote | None]:
    """`stopped_cost` for many VMs (each with its VM as just read), by instance id: one
    filtered disks.aggregatedList per project (and name chunk). A VM whose disks could not
    be listed, or whose disk names cannot go in a filter, is left out."""
    by_project: dict[str, list[tuple[Instance, list[Disk]]]] = {}
    for inst, vm in vms:
        mine = _priced(vm)
        if all(lookup.filterable(d.name) for d in mine):
            by_project.setdefault(inst.account, []).append((inst, mine))
    out: dict[str, PriceQuote | None] = {}
    for project, members in by_project.items():
        names = {d.name for _, mine in members for d in mine}
        listed = lookup.disks(client, project, names, page_size=page_size,
                              retry=retry) if names else {}
        if listed is None:
            continue
        for inst, mine in members:
            out[inst.instance_id] = quote(
                [(d.name, listed.get((d.zone or "", d.name))) for d in mine])
    return out
