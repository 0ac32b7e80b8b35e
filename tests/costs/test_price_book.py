"""Prices kept in the store: which price an estimate uses, and that every interval's price
source is remembered with its age and kind (so reports can warn)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from sqlmodel import select

from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.price_book import (
    PriceBook,
    store_learned_rates,
    store_list_prices,
)
from costguard.costs.pricing import CustomPrice, Discount, PriceCatalog, PriceOverrides
from costguard.model import Instance, InstanceState, Lifecycle, PriceQuote
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.price_tables import PriceSourceRow
from costguard.store.tables import CostIntervalRow
from tests.costs.fleet import T0

FETCHED = datetime(2026, 11, 20, 6, 0, tzinfo=UTC)


def gcp(iid: str, itype: str = "a2-highgpu-1g", spot: bool = False) -> Instance:
    return Instance(provider="gcp", account="ml-prod", region="us-central1", instance_id=iid,
                    instance_type=itype, state=InstanceState.RUNNING, gpu_count=1,
                    gpu_model="A100", gpu_memory_mib=40 * 1024,
                    lifecycle=Lifecycle.SPOT if spot else Lifecycle.ON_DEMAND,
                    launch_time=T0, observed_at=T0)


def book_with(db: Database, prices: dict[tuple[str, str, str], float]) -> PriceBook:
    with db.session() as s:
        store_list_prices(s, "gcp", prices, "gcp cloud billing catalog", FETCHED)
    with db.session() as s:
        return PriceBook.load(s)


def test_a_fetched_list_price_replaces_the_shipped_table_and_says_how_old_it_is(
        db: Database) -> None:
    inst = gcp("vm-1", spot=True)
    shipped = PriceCatalog().quote(inst)
    assert shipped is not None and shipped.fallback  # the shipped table, before any fetch

    book = book_with(db, {("us-central1", "a2-highgpu-1g", "spot"): 1.102003})
    quote = PriceCatalog(book=book).quote(inst)

    assert quote == PriceQuote(usd_per_hour=1.102003,
                               source="gcp cloud billing catalog 2026-11-20",
                               as_of=date(2026, 11, 20), fallback=False)
    assert shipped.usd_per_hour != quote.usd_per_hour
    # another region or lifecycle keeps the shipped table
    assert PriceCatalog(book=book).quote(gcp("vm-2")) == PriceCatalog().quote(gcp("vm-2"))


def test_a_live_quote_wins_over_a_fetched_list_price(db: Database) -> None:
    book = book_with(db, {("us-central1", "a2-highgpu-1g", "on-demand"): 9.0})
    live = PriceQuote(usd_per_hour=2.5, source="spot price history", as_of=date(2026, 11, 24))
    cat = PriceCatalog(providers={"gcp": lambda _: live}, book=book)
    assert cat.quote(gcp("vm-1")) == live


def test_a_rate_learned_from_the_bill_is_that_instance_s_alone_and_takes_no_discount(
        db: Database) -> None:
    with db.session() as s:
        store_learned_rates(s, [(gcp("vm-billed"), 2.2, FETCHED)], "learned from bill (focus)",
                            FETCHED)
    with db.session() as s:
        book = PriceBook.load(s)
    discount = Discount(provider="gcp", percent=10, note="EDP")
    cat = PriceCatalog(overrides=PriceOverrides(discounts=(discount,)), book=book)

    learned = cat.quote(gcp("vm-billed"))
    other = cat.quote(gcp("vm-other"))

    assert learned is not None and learned.usd_per_hour == 2.2
    assert learned.source == "learned from bill (focus) 2026-11-20"
    assert other is not None and other.source.endswith("EDP 10% off")
    assert cat.named_instance_ids == {"vm-billed"}
    # an override still wins over what was learned
    custom = CustomPrice(instance_id="vm-billed", usd_per_hour=1.0, note="reserved")
    assert PriceCatalog(overrides=PriceOverrides(prices=(custom,)), book=book).quote(
        gcp("vm-billed")).usd_per_hour == 1.0  # type: ignore[union-attr]


def test_an_older_bill_never_replaces_a_rate_learned_from_a_newer_one(db: Database) -> None:
    inst = gcp("vm-1")
    with db.session() as s:
        store_learned_rates(s, [(inst, 2.0, FETCHED)], "learned from bill (focus)", FETCHED)
        store_learned_rates(s, [(inst, 3.0, FETCHED - timedelta(days=40))],
                            "learned from bill (focus)", FETCHED)
    with db.session() as s:
        assert PriceBook.load(s).learned_price(inst).usd_per_hour == 2.0  # type: ignore[union-attr]


def test_accrual_remembers_each_price_source_with_its_age_and_kind(db: Database) -> None:
    fleet = [gcp("vm-fetched", spot=True), gcp("vm-table")]
    book = book_with(db, {("us-central1", "a2-highgpu-1g", "spot"): 1.102003})
    cat = PriceCatalog(book=book)
    with db.session() as s:
        record_inventory(s, "gcp", fleet, T0, complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=2), cat.price_of(), Attributor())
    with db.session() as s:
        sources = {r.source: (r.as_of, r.fallback) for r in s.exec(select(PriceSourceRow))}
        charged = {r.instance_id: r.price_source for r in s.exec(select(CostIntervalRow))}

    assert sources[charged["vm-fetched"]] == (datetime(2026, 11, 20, tzinfo=UTC), False)
    table_as_of, fallback = sources[charged["vm-table"]]
    assert fallback and table_as_of is not None and table_as_of < datetime(2026, 11, 24,
                                                                           tzinfo=UTC)


def test_a_report_names_spend_priced_from_a_fallback_or_a_stale_price(db: Database) -> None:
    import io
    import json
    from types import SimpleNamespace

    from rich.console import Console

    from costguard.report.render import to_json, to_table
    from costguard.report.run import spend_report

    stale_fetch = T0 - timedelta(days=45)
    with db.session() as s:
        store_list_prices(s, "gcp", {("us-central1", "a2-highgpu-1g", "spot"): 1.1},
                          "gcp cloud billing catalog", stale_fetch)
        record_inventory(s, "gcp", [gcp("vm-stale", spot=True), gcp("vm-table")], T0,
                         complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=3), PriceCatalog(book=PriceBook.load(s)).price_of(),
               Attributor())
    with db.session() as s:
        report = spend_report(s, SimpleNamespace(), ["team"], T0, T0 + timedelta(hours=3))
    out = io.StringIO()
    to_table(report, Console(file=out, width=80))

    stale, fallback = sorted(report.price_warnings, key=lambda t: "fallback" in t)
    assert "on 1 instance(s) priced from 'gcp cloud billing catalog" in stale
    assert "45 days old when used" in stale
    assert fallback.startswith("$11.02 on 1 instance(s) priced from 'gcp on-demand table")
    assert "(a fallback, not the cloud's own price)" in fallback
    assert json.loads(to_json(report))["price_warnings"] == list(report.price_warnings)
    assert "Prices to check:" in out.getvalue()
    assert "costguard prices refresh" in out.getvalue()


def test_a_current_fetched_price_draws_no_warning(db: Database) -> None:
    from types import SimpleNamespace

    from costguard.report.run import spend_report

    with db.session() as s:
        store_list_prices(s, "gcp", {("us-central1", "a2-highgpu-1g", "on-demand"): 3.67},
                          "gcp cloud billing catalog", T0 - timedelta(days=2))
        record_inventory(s, "gcp", [gcp("vm-1")], T0, complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=3), PriceCatalog(book=PriceBook.load(s)).price_of(),
               Attributor())
    with db.session() as s:
        report = spend_report(s, SimpleNamespace(), ["team"], T0, T0 + timedelta(hours=3))
    assert report.total.cost_micros == round(3.67 * 3 * 1e6)
    assert report.price_warnings == ()
