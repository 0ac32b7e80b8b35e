"""The prices accrual charges with: list prices fetched from the clouds' price APIs and
rates learned from imported bills (`PriceRow`), and every price source an interval was
charged with (`PriceSourceRow`). Schema changes go through Alembic (store/tables.py)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import UniqueConstraint
from sqlmodel import Field, SQLModel

from costguard.store.tables import DEFERRED, ts_field


class PriceRow(SQLModel, table=True):
    """An hourly price fetched from a cloud's price API, or learned from an imported bill.

    `instance_id` is empty for a list price (every instance of the type in the region) and
    names one instance for a rate learned from its bill lines (EffectiveCost over usage
    hours, so commitments and negotiated discounts show). `as_of` is when the price was
    known current (the fetch, or the end of the billed period it was learned from)."""

    model_config = DEFERRED

    __tablename__ = "prices"
    __table_args__ = (
        UniqueConstraint("provider", "region", "instance_type", "lifecycle", "instance_id",
                         name="uq_price"),
    )

    id: int | None = Field(default=None, primary_key=True)
    provider: str = Field(max_length=16)
    region: str = Field(max_length=64)
    instance_type: str = Field(max_length=64)
    lifecycle: str = Field(max_length=16)  # on-demand | spot
    instance_id: str = Field(default="", max_length=128)
    usd_per_hour: float = 0.0
    source: str = Field(max_length=96)  # e.g. "aws price list api", "billed (focus)"
    as_of: datetime = ts_field()
    published_at: datetime | None = ts_field(nullable=True)  # the source's own date, if it has one
    fetched_at: datetime = ts_field()


class PriceSourceRow(SQLModel, table=True):
    """Every price source the accrual has charged an interval with: how old that price was
    and whether it was a fallback (a shipped table, an upper bound), so a report can warn."""

    model_config = DEFERRED

    __tablename__ = "price_sources"

    source: str = Field(primary_key=True, max_length=128)  # = cost_intervals.price_source
    as_of: datetime | None = ts_field(nullable=True)
    fallback: bool = False
