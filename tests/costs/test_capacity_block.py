"""An EC2 Capacity Block's instance (`InstanceLifecycle: capacity-block`): its own
lifecycle, priced at the on-demand list price as a named fallback (a block's price is set
when it is bought and paid upfront; no price list has it), and no spot saving in reports."""

from __future__ import annotations

from datetime import timedelta

from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import PriceCatalog
from costguard.model import Instance, Lifecycle, PriceQuote
from costguard.report.queries import catalog_spot_price, spend
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.costs.fleet import T0, instance


def _block(inst: Instance) -> Instance:
    return inst.model_copy(update={"lifecycle": Lifecycle.CAPACITY_BLOCK})


def test_a_capacity_block_is_quoted_at_the_on_demand_list_price_as_a_named_fallback() -> None:
    aws = Instance(provider="aws", account="1", region="us-east-1", instance_id="i-1",
                   instance_type="p5.48xlarge", state="running", gpu_count=8, launch_time=T0,
                   observed_at=T0)
    catalog = PriceCatalog()
    on_demand = catalog.quote(aws)
    block = catalog.quote(_block(aws))
    assert on_demand is not None and block is not None
    assert block.usd_per_hour == on_demand.usd_per_hour > 0
    assert block.fallback  # the shipped table is one already; a refreshed list price is not
    assert block.source == (f"{on_demand.source}; a Capacity Block's own price is not "
                            "listed: on-demand as an estimate")


def test_a_refreshed_list_price_stands_in_for_a_block_as_a_fallback() -> None:
    aws = Instance(provider="aws", account="1", region="us-east-1", instance_id="i-1",
                   instance_type="p5.48xlarge", state="running", gpu_count=8, launch_time=T0,
                   observed_at=T0)
    listed = PriceQuote(usd_per_hour=98.32, source="aws price list api")
    catalog = PriceCatalog(providers={"aws": lambda inst: listed})
    assert catalog.quote(aws) == listed
    block = catalog.quote(_block(aws))
    assert block is not None and block.fallback and block.usd_per_hour == 98.32
    assert "Capacity Block" in block.source


def test_a_capacity_block_s_hours_are_no_spot_saving(db: Database) -> None:
    # two p4d.24xlarge for two hours, one on-demand, one in a Capacity Block: the same
    # spend each, and only the on-demand one's hours could have been spot
    catalog = PriceCatalog()
    fleet = [instance("i-od", "p4d.24xlarge", team="a", gpus=8),
             _block(instance("i-cb", "p4d.24xlarge", team="b", gpus=8))]
    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    for hours in (1, 2):
        with db.session() as s:
            accrue(s, T0 + timedelta(hours=hours), catalog.price_of(), Attributor())
    with db.session() as s:
        rep = spend(s, ["team"], T0, T0 + timedelta(hours=2),
                    spot_price=catalog_spot_price(catalog))
    rows = {r.key[0]: r for r in rep.rows}
    assert rows["a"].cost_micros == rows["b"].cost_micros > 0
    assert rows["a"].savings_micros > 0 and rows["b"].savings_micros == 0
    assert rep.total.savings_micros == rows["a"].savings_micros
    with db.session() as s:
        by_lifecycle = spend(s, ["lifecycle"], T0, T0 + timedelta(hours=2))
    assert {r.key[0] for r in by_lifecycle.rows} == {"on-demand", "capacity-block"}
