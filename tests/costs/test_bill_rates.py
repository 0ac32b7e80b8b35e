"""Bills teach the estimates: an instance's effective hourly rate from its own bill lines
(EffectiveCost over the hours costguard saw it run) replaces its list price."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from costguard.billing.importer import import_focus
from costguard.billing.rates import instance_ref, learn_rates
from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.price_book import PriceBook
from costguard.costs.pricing import PriceCatalog
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.costs.fleet import T0, instance

HEADER = ("BilledCost,EffectiveCost,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,"
          "ResourceId,ServiceName,ProviderName,SubAccountId,RegionId\n")
ARN = "arn:aws:ec2:us-east-1:111111111111:instance/{}"


def line(hour: int, billed: float, effective: float, resource: str,
         category: str = "Usage") -> str:
    start = T0 + timedelta(hours=hour)
    return (f"{billed},{effective},{category},{start:%Y-%m-%dT%H:%M:%SZ},"
            f"{start + timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ},{resource},"
            "Amazon Elastic Compute Cloud,AWS,111111111111,us-east-1\n")


@pytest.mark.parametrize(("resource", "expected"), [
    ("arn:aws:ec2:us-east-1:111111111111:instance/i-0abc", "i-0abc"),
    ("i-0abc", "i-0abc"),
    ("//compute.googleapis.com/projects/ml-prod/zones/us-central1-a/instances/4711", "4711"),
    ("arn:aws:ec2:us-east-1:111111111111:volume/vol-1", None),
    ("", None), (None, None),
])
def test_a_resource_id_names_an_instance_in_every_cloud_s_spelling(
        resource: str | None, expected: str | None) -> None:
    assert instance_ref(resource) == expected


def test_a_savings_plan_rate_from_the_bill_replaces_the_list_price(
        db: Database, tmp_path: Path) -> None:
    # aws-shaped ids on the sim provider are not billed: the bill names provider "aws"
    fleet = [instance("i-sp", "p4d.24xlarge", gpus=8).model_copy(update={"provider": "aws"}),
             instance("i-late", "g5.xlarge", gpus=1).model_copy(update={"provider": "aws"})]
    with db.session() as s:
        record_inventory(s, "aws", fleet[:1], T0, complete=True)
    with db.session() as s:  # costguard watches i-sp for 4 hours at the list price
        accrue(s, T0 + timedelta(hours=4), PriceCatalog().price_of(), Attributor())
    export = tmp_path / "focus.csv"
    # 3 billed hours of i-sp at a Savings Plan rate of $12/h (list $21.96), a tax line, and
    # i-late, which costguard never watched
    export.write_text(HEADER + "".join(line(h, 21.957642, 12.0, ARN.format("i-sp"))
                                       for h in range(3))
                      + line(0, 5.0, 5.0, ARN.format("i-sp"), category="Tax")
                      + line(0, 1.006, 0.7, ARN.format("i-late")))
    with db.session() as s:
        import_focus(s, export, Attributor(), T0 + timedelta(hours=5))
        learned = learn_rates(s, T0 + timedelta(hours=5))
    assert (learned.learned, learned.not_watched) == (1, ["aws:i-late"])
    with db.session() as s:
        quote = PriceCatalog(book=PriceBook.load(s)).quote(fleet[0])
    assert quote is not None and quote.usd_per_hour == 12.0
    assert quote.source.startswith("learned from the bill") and not quote.fallback
    assert quote.as_of == (T0 + timedelta(hours=3)).date()


def test_an_instance_watched_for_part_of_the_billed_period_keeps_its_list_price(
        db: Database, tmp_path: Path) -> None:
    inst = instance("i-new", "g5.xlarge", gpus=1,
                    at=T0 + timedelta(hours=2)).model_copy(update={"provider": "aws"})
    with db.session() as s:
        record_inventory(s, "aws", [inst], T0 + timedelta(hours=2), complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=4), PriceCatalog().price_of(), Attributor())
    export = tmp_path / "focus.csv"
    export.write_text(HEADER + "".join(line(h, 1.006, 0.5, ARN.format("i-new"))
                                       for h in range(4)))
    with db.session() as s:
        import_focus(s, export, Attributor(), datetime(2026, 3, 20, tzinfo=UTC))
        learned = learn_rates(s, datetime(2026, 3, 20, tzinfo=UTC))
    assert (learned.learned, learned.not_watched) == (0, ["aws:i-new"])


def test_a_rate_no_instance_could_cost_is_not_learned(
        db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # broken usage lines ($5e9 for an hour) taught a rate whose cost intervals did not fit
    # a 64-bit integer: accrual failed at every cycle after. It is left out, and logged
    box = instance("i-odd", "p4d.24xlarge", gpus=8).model_copy(update={"provider": "aws"})
    with db.session() as s:
        record_inventory(s, "aws", [box], T0, complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=4), PriceCatalog().price_of(), Attributor())
    export = tmp_path / "focus.csv"
    export.write_text(HEADER + "".join(line(h, 5e9, 5e9, ARN.format("i-odd"))
                                       for h in range(3)))
    with db.session() as s, caplog.at_level("WARNING", logger="costguard.billing.rates"):
        import_focus(s, export, Attributor(), T0 + timedelta(hours=5))
        learned = learn_rates(s, T0 + timedelta(hours=5))
    assert learned.learned == 0
    assert ("not learned from the bill: aws:i-odd at 5000000000.00 USD/h (EffectiveCost "
            "2026-03-08 05:00 to 2026-03-08 08:00 over 3.0 h run)") in caplog.text
    with db.session() as s:
        catalog = PriceCatalog(book=PriceBook.load(s))
        quote = catalog.quote(box)
        assert quote is not None and not quote.source.startswith("learned")
        accrue(s, T0 + timedelta(hours=6), catalog.price_of(), Attributor())  # goes on
