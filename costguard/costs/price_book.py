"""Prices kept in the store: list prices fetched from the clouds' price APIs (`costguard
prices refresh`) and hourly rates learned from imported bills (per instance).

A `PriceBook` is the store's prices read at once; the `PriceCatalog` consults it. Rates
learned from a bill win over any list price for their instance (they already hold the
commitments and negotiated discounts the account gets); a fetched list price wins over a
shipped table (a fallback), never over a live quote such as today's spot price.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from costguard.model import Instance, PriceQuote
from costguard.store.price_tables import PriceRow, PriceSourceRow
from costguard.store.upsert import upsert

# (region, instance type, lifecycle) -> USD per hour, as a price API answered
ListPrices = Mapping[tuple[str, str, str], float]


@dataclass(frozen=True)
class StoredPrice:
    usd_per_hour: float
    source: str
    as_of: date

    def quote(self) -> PriceQuote:
        return PriceQuote(usd_per_hour=self.usd_per_hour, source=self.label, as_of=self.as_of)

    @property
    def label(self) -> str:
        return f"{self.source} {self.as_of.isoformat()}"


class PriceBook:
    """The store's prices, keyed for lookups by instance."""

    def __init__(self, rows: Iterable[PriceRow] = ()) -> None:
        self.list_prices: dict[tuple[str, str, str, str], StoredPrice] = {}
        self.learned: dict[tuple[str, str, str], StoredPrice] = {}
        for r in rows:
            price = StoredPrice(r.usd_per_hour, r.source, r.as_of.date())
            if r.instance_id:
                self.learned[(r.provider, r.instance_id, r.lifecycle)] = price
            else:
                self.list_prices[(r.provider, r.region, r.instance_type, r.lifecycle)] = price

    @classmethod
    def load(cls, session: Session) -> PriceBook:
        return cls(session.exec(select(PriceRow)).scalars())  # type: ignore[call-overload]

    @property
    def learned_instance_ids(self) -> frozenset[str]:
        return frozenset(iid for _, iid, _ in self.learned)

    def list_price(self, inst: Instance) -> StoredPrice | None:
        return self.list_prices.get(
            (inst.provider, inst.region, inst.instance_type, str(inst.lifecycle)))

    def learned_price(self, inst: Instance) -> StoredPrice | None:
        return self.learned.get((inst.provider, inst.instance_id, str(inst.lifecycle)))


def store_list_prices(
    session: Session, provider: str, prices: ListPrices, source: str, now: datetime,
    published: datetime | None = None,
) -> int:
    """Keep fetched list prices (replacing older ones of the same key); returns how many."""
    rows = [
        {"provider": provider, "region": region, "instance_type": itype,
         "lifecycle": lifecycle, "instance_id": "", "usd_per_hour": usd, "source": source,
         "as_of": now, "published_at": published, "fetched_at": now}
        for (region, itype, lifecycle), usd in sorted(prices.items())
    ]
    _upsert_prices(session, rows)
    return len(rows)


def store_learned_rates(
    session: Session, rates: Iterable[tuple[Instance, float, datetime]], source: str,
    now: datetime,
) -> int:
    """Keep per-instance rates learned from a bill: (instance, USD/h, end of the billed
    period). A rate from an older period never replaces one from a newer period."""
    known = {
        (r.provider, r.instance_id, r.lifecycle): r.as_of
        for r in session.exec(select(PriceRow).where(  # type: ignore[call-overload]
            PriceRow.instance_id != "")).scalars()  # type: ignore[arg-type]
    }
    rows = []
    for inst, usd, period_end in rates:
        key = (inst.provider, inst.instance_id, str(inst.lifecycle))
        if key in known and known[key] > period_end:
            continue
        rows.append({"provider": inst.provider, "region": inst.region,
                     "instance_type": inst.instance_type, "lifecycle": str(inst.lifecycle),
                     "instance_id": inst.instance_id, "usd_per_hour": round(usd, 6),
                     "source": source, "as_of": period_end, "published_at": None,
                     "fetched_at": now})
    _upsert_prices(session, rows)
    return len(rows)


def _upsert_prices(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        upsert(session, PriceRow.__table__, rows,  # type: ignore[attr-defined]
               ["provider", "region", "instance_type", "lifecycle", "instance_id"])


def record_sources(session: Session, quotes: Iterable[PriceQuote]) -> None:
    """Remember the age and kind of every price source an interval was charged with."""
    rows = {q.source[:128]: {"source": q.source[:128], "as_of": _midnight(q.as_of),
                             "fallback": q.fallback} for q in quotes}
    if rows:
        upsert(session, PriceSourceRow.__table__, list(rows.values()),  # type: ignore[attr-defined]
               ["source"])


def _midnight(day: date | None) -> datetime | None:
    return None if day is None else datetime(day.year, day.month, day.day, tzinfo=UTC)
