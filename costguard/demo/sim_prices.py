"""The simulated cloud's prices: the shipped AWS on-demand table, spot at a fixed share of
it, and a disk's gp3 list price (`demo/sim.py`'s provider quotes them; `costs/pricing.py`
prices a simulated instance without building the simulated cloud)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from costguard.model import Instance, Lifecycle, PriceQuote

if TYPE_CHECKING:
    from costguard.providers.aws.pricing import OnDemandTable

SPOT_DISCOUNT = 0.35  # spot price as a share of on-demand
BASE_PRICE_REGION = "us-east-1"  # a sim region the AWS table lacks is priced as this one
DISK_USD_PER_GIB_MONTH = 0.08  # EBS gp3 list price


def sim_price(instance: Instance) -> PriceQuote | None:
    """The sim's list price: the shipped AWS on-demand table for the type in the instance's
    region (BASE_PRICE_REGION's where the table lacks the region); spot at SPOT_DISCOUNT of
    it. Never the refreshed Price List prices: the simulated cloud stays reproducible."""
    from costguard.providers.gcp import pricing, tpus

    if tpus.by_model(instance.gpu_model) is not None:  # a TPU node: GCP's chip-hour price
        quote = pricing.tpu_price(instance)
        return None if quote is None else PriceQuote(
            usd_per_hour=quote.usd_per_hour, source=f"{quote.source}, simulated cloud")
    from costguard.providers.aws.notebooks import ML_PREFIX, ec2_type

    table = _aws_shipped_prices()
    itype = ec2_type(instance.instance_type)  # a notebook's ML type: its EC2 type's price
    found = table.lookup(instance.region, itype) or table.lookup(BASE_PRICE_REGION, itype)
    if found is None:
        return None
    source = f"{found.source}, simulated cloud"
    if instance.instance_type.startswith(ML_PREFIX):
        source += f", a notebook priced as {itype}"
    if instance.lifecycle is Lifecycle.SPOT:
        return PriceQuote(usd_per_hour=round(found.usd_per_hour * SPOT_DISCOUNT, 4),
                          source=f"{source}, spot at {SPOT_DISCOUNT:.0%}")
    return PriceQuote(usd_per_hour=found.usd_per_hour, source=source)


@cache
def _aws_shipped_prices() -> OnDemandTable:
    from costguard.providers.aws.pricing import OnDemandTable

    return OnDemandTable()  # its own instance: never updated by a Price List refresh
