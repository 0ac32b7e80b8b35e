"""Hourly prices of Compute Engine VMs from the shipped table `data/gce_gpu_prices.json`.

Accelerator-optimized types (a2, a3, g2) are priced whole. N1/N2 shapes are priced per
vCPU and GiB, plus each attached GPU. Anything else is unknown (None), never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from costguard.model import Instance, Lifecycle, PriceQuote, as_of_date
from costguard.providers.gcp import gpus, tpus

# GiB of memory per vCPU of predefined shapes.
_SHAPES: dict[str, dict[str, float]] = {
    "n1": {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9},
    "n2": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
}
_PREDEFINED = re.compile(
    r"^(?P<family>[a-z0-9]+)-(?P<shape>standard|highmem|highcpu)-(?P<vcpus>\d+)$"
)
# custom-8-30720 (n1), n2-custom-8-32768, optionally -ext for extended memory.
_CUSTOM = re.compile(r"^(?:(?P<family>[a-z0-9]+)-)?custom-(?P<vcpus>\d+)-(?P<mib>\d+)(?:-ext)?$")


@dataclass(frozen=True)
class Shape:
    family: str
    vcpus: int
    memory_gib: float


def shape_of(machine_type: str) -> Shape | None:
    m = _PREDEFINED.match(machine_type)
    if m:
        per_vcpu = _SHAPES.get(m["family"], {}).get(m["shape"])
        if per_vcpu is None:
            return None
        vcpus = int(m["vcpus"])
        return Shape(m["family"], vcpus, vcpus * per_vcpu)
    m = _CUSTOM.match(machine_type)
    if m:
        return Shape(m["family"] or "n1", int(m["vcpus"]), int(m["mib"]) / 1024)
    return None


@cache
def load_table() -> dict[str, Any]:
    text = resources.files("costguard.providers.gcp").joinpath("data/gce_gpu_prices.json")
    table: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return table


def _rate(entry: dict[str, float], spot: bool) -> float:
    return entry["spot" if spot else "on_demand"]


def price(instance: Instance, table: dict[str, Any] | None = None) -> PriceQuote | None:
    """The hourly price of `instance` as it runs (spot or on-demand), or None if unknown."""
    if tpus.by_model(instance.gpu_model) is not None:
        return tpu_price(instance)
    table = table or load_table()
    region = table["regions"].get(instance.region)
    if region is None:
        return None
    spot = instance.lifecycle == Lifecycle.SPOT
    kind = "spot" if spot else "on-demand"
    source = f"gcp {kind} table {table['as_of']} ({instance.region}, approximate list price)"
    whole = region["machine_types"].get(instance.instance_type)
    if whole is not None:
        return PriceQuote(usd_per_hour=_rate(whole, spot), source=source,
                          as_of=as_of_date(table["as_of"]), fallback=True)
    shape = shape_of(instance.instance_type)
    family = region["families"].get(shape.family) if shape else None
    if shape is None or family is None:
        return None
    usd = shape.vcpus * _rate(family["vcpu"], spot) + shape.memory_gib * _rate(
        family["ram_gib"], spot
    )
    if instance.gpu_count:
        spec = gpus.spec_for(instance.gpu_model, instance.gpu_memory_mib)
        gpu_entry = region["gpus"].get(spec.accelerator) if spec else None
        if gpu_entry is None:
            return None  # a GPU we cannot price: an honest None beats a VM-only number
        usd += instance.gpu_count * _rate(gpu_entry, spot)
    return PriceQuote(usd_per_hour=round(usd, 6), source=source,
                      as_of=as_of_date(table["as_of"]), fallback=True)


def tpu_price(instance: Instance) -> PriceQuote | None:
    """A TPU node's (or a GKE TPU host's) chips at the generation's on-demand chip-hour list
    price (`data/tpu_types.json`); spot and reserved chips are unpriced, never guessed."""
    if instance.lifecycle is not Lifecycle.ON_DEMAND:
        return None
    usd = tpus.list_price(instance.gpu_model, instance.gpu_count)
    if usd is None:
        return None
    table = tpus.load_table()
    return PriceQuote(usd_per_hour=usd,
                      source=f"gcp TPU on-demand table {table['as_of']} ({instance.gpu_count} x "
                             f"{instance.gpu_model} chip-hour, approximate list price)",
                      as_of=as_of_date(table["as_of"]), fallback=True)
