"""`costguard prices refresh` and `prices show`: fetch current list prices into the store,
and explain the price an estimate uses for a type.

Refresh asks each provider that has a price API (`FetchesPrices`: AWS's Price List API,
GCP's Cloud Billing Catalog API; the simulated cloud has none) for the regions and types
the fleet in the store uses, unless told which. A provider that cannot be read is reported
and the others still refresh; prices it had fetched before are kept (and age).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from sqlalchemy import distinct, func, select
from sqlmodel import Session

from costguard.costs.price_book import PriceBook, store_list_prices
from costguard.costs.pricing import PriceCatalog, aws_table, table_price
from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, Lifecycle, PriceQuote
from costguard.providers.base import FetchesPrices, Provider
from costguard.store.price_tables import PriceSourceRow
from costguard.store.tables import CostIntervalRow, InstanceRow

STALE_AFTER_DAYS = 30  # a price older than this is named in reports


@dataclass
class RefreshOutcome:
    provider: str
    regions: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    stored: int = 0
    unpriced: list[str] = field(default_factory=list)  # "region/type" the API did not price
    published: datetime | None = None
    error: str | None = None
    note: str | None = None


def fleet_scope(session: Session, provider: str) -> tuple[list[str], list[str]]:
    """The regions and instance types of `provider`'s instances in the store."""
    t = InstanceRow.__table__.c  # type: ignore[attr-defined]
    live = (t.provider == provider) & (t.state != str(InstanceState.TERMINATED))
    regions = session.execute(select(t.region).where(live).distinct()).scalars().all()
    types = session.execute(select(t.instance_type).where(live).distinct()).scalars().all()
    return sorted(regions), sorted(types)


def refresh_prices(
    session: Session, providers: Mapping[str, Provider], now: datetime, *,
    regions: Sequence[str] = (), types: Sequence[str] = (),
) -> list[RefreshOutcome]:
    """Fetch and store list prices from every provider with a price API."""
    outcomes = []
    for name, provider in sorted(providers.items()):
        if not isinstance(provider, FetchesPrices):
            continue
        fleet_regions, fleet_types = fleet_scope(session, name)
        out = RefreshOutcome(name, list(regions) or fleet_regions, list(types) or fleet_types)
        outcomes.append(out)
        if not out.regions or not out.types:
            out.note = ("no instances of this provider in the store yet: run a cycle "
                        "first, or name --region and --type")
            continue
        try:
            fetched = provider.fetch_list_prices(out.regions, out.types)
        except ProviderError as exc:
            out.error = str(exc)
            continue
        out.stored = store_list_prices(session, name, fetched.prices, fetched.source, now,
                                       fetched.published)
        out.published = fetched.published
        priced = {(r, t) for r, t, _ in fetched.prices}
        out.unpriced = [f"{r}/{t}" for r in out.regions for t in out.types
                        if (r, t) not in priced]
    return outcomes


@dataclass(frozen=True)
class PriceLine:
    """One candidate price of a type in a region, and whether estimates use it."""

    provider: str
    region: str
    lifecycle: str
    usd_per_hour: float
    source: str
    as_of: date | None
    fallback: bool
    used: bool

    def age_days(self, today: date) -> int | None:
        return None if self.as_of is None else (today - self.as_of).days


def explain_price(
    session: Session, catalog: PriceCatalog, instance_type: str, *,
    provider: str | None = None, region: str | None = None,
) -> tuple[list[PriceLine], list[tuple[str, str, float, str, date]]]:
    """Every price known for `instance_type` (shipped table, fetched list price) by region
    and lifecycle, marking the one an estimate uses; and the rates learned from bills for
    instances of the type: (provider, instance id, USD/h, source, as of)."""
    book = PriceBook.load(session)
    catalog = PriceCatalog(catalog.providers, catalog.overrides, book)
    keys = {(p, r, lc) for (p, r, t, lc) in book.list_prices if t == instance_type}
    keys |= _table_keys(instance_type)
    lines = []
    for prov, reg, lifecycle in sorted(keys):
        if (provider and prov != provider) or (region and reg != region):
            continue
        inst = _probe(prov, reg, instance_type, lifecycle)
        used = catalog.quote(inst)
        stored = book.list_price(inst)
        candidates: list[PriceQuote] = [q for q in (table_price(inst),) if q is not None]
        if stored is not None:
            candidates.append(stored.quote())
        if used is not None and all(used.source != c.source for c in candidates):
            candidates.append(used)  # an override or a discounted price
        for q in candidates:
            lines.append(PriceLine(prov, reg, lifecycle, q.usd_per_hour, q.source, q.as_of,
                                   q.fallback, used is not None and q.source == used.source))
    learned = [
        (prov, iid, p.usd_per_hour, p.label, p.as_of)
        for (prov, iid, _), p in sorted(book.learned.items())
        if _type_of(session, prov, iid) == instance_type and (not provider or prov == provider)
    ]
    return lines, learned


def _type_of(session: Session, provider: str, instance_id: str) -> str | None:
    row = session.get(InstanceRow, (provider, instance_id))
    return row.instance_type if row is not None else None


def _table_keys(instance_type: str) -> set[tuple[str, str, str]]:
    """(provider, region, lifecycle) of the shipped tables that price `instance_type`."""
    from costguard.providers.gcp import pricing as gcp_pricing

    keys = {("aws", region, "on-demand") for region, itype in aws_table().priced()
            if itype == instance_type}
    for region, doc in gcp_pricing.load_table()["regions"].items():
        if instance_type in doc["machine_types"] or gcp_pricing.shape_of(instance_type):
            keys |= {("gcp", region, "on-demand"), ("gcp", region, "spot")}
    return keys


def _probe(provider: str, region: str, instance_type: str, lifecycle: str) -> Instance:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return Instance(provider=provider, account="", region=region, instance_id="",
                    instance_type=instance_type, lifecycle=Lifecycle(lifecycle),
                    state=InstanceState.RUNNING, launch_time=epoch, observed_at=epoch)


@dataclass(frozen=True)
class PriceWarning:
    """Spend in a report window charged at a price that was a fallback, or old when used."""

    source: str
    instances: int
    cost_micros: int
    fallback: bool
    age_days: int | None  # how old the price was at the latest interval it charged

    @property
    def text(self) -> str:
        why = ("a fallback, not the cloud's own price" if self.fallback
               else f"{self.age_days} days old when used")
        return (f"${self.cost_micros / 1e6:,.2f} on {self.instances} instance(s) priced from "
                f"'{self.source}' ({why})")


def price_warnings(session: Session, since: datetime, until: datetime) -> list[PriceWarning]:
    """The price sources that charged the window's raw intervals and were a fallback or more
    than `STALE_AFTER_DAYS` old when used, dearest first. Intervals already rolled up into
    days and pruned carry no source: only the raw retention is checked."""
    c = CostIntervalRow.__table__.c  # type: ignore[attr-defined]
    rows = session.execute(
        select(c.price_source, func.max(c.end), func.count(distinct(c.instance_id)),
               func.sum(c.cost_micros))
        .where(c.start < until, c.end > since, c.cost_micros > 0)
        .group_by(c.price_source)).all()
    kinds = {r.source: r for r in session.exec(select(PriceSourceRow)).scalars()}  # type: ignore[call-overload]
    out = []
    for source, last_end, instances, cost in rows:
        kind = kinds.get(source)
        if kind is None:
            continue
        age = None if kind.as_of is None else (_aware(last_end) - kind.as_of).days
        if kind.fallback or (age is not None and age > STALE_AFTER_DAYS):
            out.append(PriceWarning(source, int(instances), int(cost or 0), kind.fallback, age))
    return sorted(out, key=lambda w: -w.cost_micros)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)
