"""Current list prices of accelerator-optimized machine types from the Cloud Billing
Catalog API (`services.skus.list` of Compute Engine, service 6F81-5844-456A).

Compute Engine publishes no SKU per machine type: an A2, A3, A4, G2 or G4 VM is billed as
its vCPUs at the family's "Instance Core" rate, its memory at the family's "Instance Ram"
rate and its GPUs at the GPU's rate, each SKU listing the regions it applies to. A whole
machine's hourly price is that sum over its shape (`data/machine_types.json`); a type whose
parts are not all in the catalog for a region is left out, never half-priced. Spot rates
are the "Spot Preemptible" SKUs (usage type Preemptible). N1/N2 VMs with attached GPUs stay
on the shipped per-GPU table: their price depends on what is attached, not on the type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.cloud import billing_v1

from costguard.clock import utc
from costguard.providers.gcp.errors import from_retry_error, translate

COMPUTE_SERVICE = "services/6F81-5844-456A"

_PART = re.compile(r"^(?:Spot Preemptible )?(?P<family>[A-Z][A-Z0-9]*) (?:Predefined )?"
                   r"Instance (?P<what>Core|Ram) running in ")
_GPU = re.compile(r"^(?:Spot Preemptible )?Nvidia (?P<name>.+?) GPU running in ")
_LIFECYCLE = {"OnDemand": "on-demand", "Preemptible": "spot"}
_UNITS = {"core": "h", "ram": "GiBy.h", "gpu": "h"}
# the GPU names SKU descriptions use, as token sets -> Compute Engine accelerator type;
# the first entry whose tokens are all in a description's GPU name wins
_GPU_NAMES: tuple[tuple[frozenset[str], str], ...] = tuple(
    (frozenset(need.split()), accelerator) for need, accelerator in (
        ("a100 80gb", "nvidia-a100-80gb"),
        ("a100", "nvidia-tesla-a100"),
        ("h100 mega", "nvidia-h100-mega-80gb"),
        ("h100", "nvidia-h100-80gb"),
        ("h200", "nvidia-h200-141gb"),
        ("gb200", "nvidia-gb200"),
        ("b200", "nvidia-b200"),
        ("rtx 6000", "nvidia-rtx-pro-6000"),
        ("l4", "nvidia-l4"),
        ("t4", "nvidia-tesla-t4"),
        ("v100", "nvidia-tesla-v100"),
        ("p100", "nvidia-tesla-p100"),
        ("p4", "nvidia-tesla-p4"),
        ("k80", "nvidia-tesla-k80"),
    ))
# SKUs of the same GPU sold another way: not the on-demand or spot rate of a running VM
_OTHER_OFFERS = frozenset({"workstation", "dws", "calendar", "flex", "reserved", "commitment"})


@dataclass(frozen=True)
class MachineShape:
    family: str  # the SKU family: "a2", "a3", ...
    vcpus: int
    memory_gib: float
    gpus: int
    accelerator: str


@cache
def machine_shapes() -> dict[str, MachineShape]:
    """The shipped shapes of accelerator-optimized machine types (`data/machine_types.json`,
    each family with the documentation page it was read from)."""
    text = resources.files("costguard.providers.gcp").joinpath("data/machine_types.json")
    doc: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return {
        name: MachineShape(fam["sku_family"], int(m["vcpus"]), float(m["memory_gib"]),
                           int(m["gpus"]), fam["accelerator"])
        for fam in doc["families"].values() for name, m in fam["machine_types"].items()
    }


def _accelerator(name: str) -> str | None:
    tokens = set(name.lower().replace("tesla", " ").split())
    for need, accelerator in _GPU_NAMES:
        if need <= tokens:
            return accelerator
    return None


def _hourly_usd(sku: Any, unit: str) -> float | None:
    """The rate of the SKU's first tier, when priced in USD per `unit`. (A proto-plus
    repeated field is indexed, never sliced: a slice holds raw protobuf messages.)"""
    if not sku.pricing_info:
        return None
    expr = sku.pricing_info[0].pricing_expression
    if expr.usage_unit != unit:
        return None
    for tier in expr.tiered_rates:
        if tier.start_usage_amount == 0 and tier.unit_price.currency_code == "USD":
            return float(int(tier.unit_price.units) + tier.unit_price.nanos / 1e9)
    return None


# (region, part, name, lifecycle) -> USD per unit-hour; part is core|ram|gpu and name the
# SKU family (core, ram) or the accelerator type (gpu)
Rates = dict[tuple[str, str, str, str], float]


def parse_skus(skus: Iterable[Any], regions: Sequence[str]) -> tuple[Rates, datetime | None]:
    """The Core, Ram and GPU rates of running VMs in `regions`, and the newest SKU
    `effectiveTime` read."""
    wanted = set(regions)
    rates: Rates = {}
    newest: datetime | None = None
    for sku in skus:
        lifecycle = _LIFECYCLE.get(sku.category.usage_type)
        if lifecycle is None or sku.category.resource_family != "Compute":
            continue
        part = _PART.match(sku.description)
        gpu = _GPU.match(sku.description) if part is None else None
        if part is not None:
            kind, name = part["what"].lower(), part["family"].lower()
        elif (gpu is not None and not _OTHER_OFFERS & set(sku.description.lower().split())
              and (accelerator := _accelerator(gpu["name"])) is not None):
            kind, name = "gpu", accelerator
        else:
            continue
        usd = _hourly_usd(sku, _UNITS[kind])
        if usd is None:
            continue
        for region in wanted.intersection(sku.service_regions):
            rates[(region, kind, name, lifecycle)] = usd
        when = sku.pricing_info[0].effective_time
        if when is not None and when.year > 1970:
            newest = max(newest, utc(when)) if newest else utc(when)
    return rates, newest


def machine_prices(
    rates: Rates, regions: Sequence[str], machine_types: Sequence[str]
) -> dict[tuple[str, str, str], float]:
    """(region, machine type, lifecycle) -> USD/h of every type whose Core, Ram and GPU
    rates are all known there."""
    shapes = machine_shapes()
    out: dict[tuple[str, str, str], float] = {}
    for region in regions:
        for mtype in machine_types:
            shape = shapes.get(mtype)
            if shape is None:
                continue
            for lifecycle in ("on-demand", "spot"):
                parts = (rates.get((region, "core", shape.family, lifecycle)),
                         rates.get((region, "ram", shape.family, lifecycle)),
                         rates.get((region, "gpu", shape.accelerator, lifecycle)))
                if None in parts:
                    continue
                core, ram, gpu = (p or 0.0 for p in parts)
                out[(region, mtype, lifecycle)] = round(
                    shape.vcpus * core + shape.memory_gib * ram + shape.gpus * gpu, 6)
    return out


def catalog_client(credentials: Any, endpoint: str | None) -> Any:
    """A Cloud Billing Catalog client over REST (an http:// endpoint is a local fake)."""
    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    return billing_v1.CloudCatalogClient(credentials=credentials, client_options=options,
                                         transport="rest")


def fetch_catalog_prices(
    client: Any, regions: Sequence[str], machine_types: Sequence[str], retry: Any = None,
) -> tuple[dict[tuple[str, str, str], float], datetime | None]:
    """Read Compute Engine's SKUs (paged, 5,000 a page) and price `machine_types`."""
    api, scope = "cloudbilling.googleapis.com", f"{COMPUTE_SERVICE}/skus"
    try:
        pager = client.list_skus(request={"parent": COMPUTE_SERVICE, "currency_code": "USD"},
                                 retry=retry)
        rates, published = parse_skus(pager, regions)
    except gexc.RetryError as exc:
        raise from_retry_error(exc, scope, api) from None
    except gexc.GoogleAPICallError as exc:
        raise translate(exc, scope, api) from None
    return machine_prices(rates, regions, machine_types), published
