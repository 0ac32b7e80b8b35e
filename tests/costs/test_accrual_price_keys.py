"""Accrual looks prices up once per price key: the key must hold every field an override or
a provider's quote can depend on, or one instance's price leaks to its look-alikes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import select

from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import CustomPrice, Discount, DiskPrice, PriceCatalog, PriceOverrides
from costguard.model import Instance, InstanceState, PriceQuote
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.tables import CostIntervalRow
from tests.costs.fleet import T0, instance

P4D = 21.957642  # sim list price = the shipped AWS table, us-east-1
OTHER = "222222222222"


def charged(db: Database, fleet: list[Instance], cat: PriceCatalog,
            hours: int = 1) -> dict[str, tuple[float, int, str]]:
    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=hours), cat.price_of(), Attributor(),
               disk_price_of=cat.disk)
    with db.session() as s:
        return {r.instance_id: (r.usd_per_hour, r.cost_micros, r.price_source)
                for r in s.exec(select(CostIntervalRow))}


def test_an_account_discount_stays_with_its_account(db: Database) -> None:
    fleet = [instance("i-1", "p4d.24xlarge", gpus=8),
             instance("i-2", "p4d.24xlarge", gpus=8, account=OTHER),
             instance("i-3", "p4d.24xlarge", gpus=8)]
    cat = PriceCatalog(overrides=PriceOverrides(discounts=(
        Discount(provider="sim", family="p4d", account=OTHER, percent=30, note="EDP"),)))
    got = charged(db, fleet, cat)
    assert got["i-1"][:2] == (P4D, round(P4D * 1e6))
    assert got["i-3"][:2] == (P4D, round(P4D * 1e6))
    assert got["i-2"][:2] == (round(P4D * 0.7, 6), round(P4D * 0.7 * 1e6))
    assert got["i-2"][2].endswith("EDP 30% off")


@pytest.mark.parametrize("first", ["i-named", "i-plain"])
def test_a_custom_price_for_one_instance_is_that_instance_s_alone(
        db: Database, first: str) -> None:
    # either one looked up first: a cache keyed without the instance id would leak both ways
    ids = [first, "i-plain" if first == "i-named" else "i-named"]
    fleet = [instance(i, "p4d.24xlarge", gpus=8) for i in ids]
    cat = PriceCatalog(overrides=PriceOverrides(prices=(
        CustomPrice(instance_id="i-named", usd_per_hour=10.0, note="reserved"),)))
    got = charged(db, fleet, cat)
    assert got["i-named"] == (10.0, 10_000_000, "reserved")
    assert got["i-plain"][:2] == (P4D, round(P4D * 1e6))


def test_a_provider_quote_per_zone_is_not_shared_across_zones(db: Database) -> None:
    def by_zone(inst: Instance) -> PriceQuote:  # as AWS spot history: a price per zone
        return PriceQuote(usd_per_hour=2.0 if inst.zone == "us-east-1a" else 3.0,
                          source=f"zone {inst.zone}")

    fleet = [instance("i-a", "g5.xlarge", gpus=1).model_copy(update={"zone": "us-east-1a"}),
             instance("i-b", "g5.xlarge", gpus=1).model_copy(update={"zone": "us-east-1b"})]
    got = charged(db, fleet, PriceCatalog(providers={"sim": by_zone}))
    assert got == {"i-a": (2.0, 2_000_000, "zone us-east-1a"),
                   "i-b": (3.0, 3_000_000, "zone us-east-1b")}


def test_disk_prices_for_one_account_stay_with_it(db: Database) -> None:
    fleet = [instance("i-1", "p4d.24xlarge", gpus=8, state=InstanceState.STOPPED),
             instance("i-2", "p4d.24xlarge", gpus=8, state=InstanceState.STOPPED,
                      account=OTHER)]
    cat = PriceCatalog(overrides=PriceOverrides(disks=(
        DiskPrice(provider="sim", account=OTHER, usd_per_hour=0.25),)))
    with db.session() as s:  # stopped from the start: the first cycle accrues disks only
        record_inventory(s, "sim", fleet, T0, complete=True)
    got = charged(db, fleet, cat, hours=2)
    assert got == {"i-2": (0.25, 500_000, "attached disks")}


def test_an_unknown_lookup_is_asked_per_instance(db: Database) -> None:
    asked: list[str] = []

    def by_tag(inst: Instance) -> PriceQuote:  # reads a field no price key holds
        asked.append(inst.instance_id)
        return PriceQuote(usd_per_hour=float(inst.tags.get("rate", "1")), source="tag")

    fleet = [instance("i-1", "m5.large").model_copy(update={"tags": {"rate": "4"}}),
             instance("i-2", "m5.large").model_copy(update={"tags": {"rate": "5"}})]
    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=1), {"sim": by_tag}, Attributor())
    with db.session() as s:
        got = {r.instance_id: r.cost_micros for r in s.exec(select(CostIntervalRow))}
    assert got == {"i-1": 4_000_000, "i-2": 5_000_000}
    assert sorted(asked) == ["i-1", "i-2"]
