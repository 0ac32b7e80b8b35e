"""Tables of imported bills: the day sums of what the clouds charged, and the keys of the
lines already in them (billing/store.py, billing/line_keys.py). Split from
`costguard.store.tables` by concern; the same rules hold (an Alembic migration for every
change, then the head snapshot)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, Index, Integer, LargeBinary, UniqueConstraint
from sqlmodel import Field, SQLModel

from costguard.store.tables import DEFERRED, ts_field


class BillingCostRow(SQLModel, table=True):
    """What the bills charged, summed per UTC day and per everything a report splits by
    (source, provider, account, region, service, resource, attribution, charge category and
    class, currency): one row where an hourly export has 24 lines. `charge_start` and
    `charge_end` are the earliest start and latest end of the day's lines; `lines` counts
    them. Which lines are in the sums is kept in `billing_line_keys`."""

    model_config = DEFERRED

    __tablename__ = "billing_costs"
    __table_args__ = (
        UniqueConstraint("source", "day", "group_key", name="uq_billing_cost"),
        Index("ix_billing_costs_start", "charge_start"),
    )

    id: int | None = Field(default=None, primary_key=True)
    source: str = Field(max_length=32)  # focus | aws-cur | gcp-export | aws-ce
    day: int = Field(sa_column=Column(Integer, nullable=False))  # days since 1970-01-01, UTC
    # 64-bit hash of the day and every column below but the sums: the row a line adds to
    group_key: int = Field(sa_column=Column(BigInteger, nullable=False))
    imported_at: datetime = ts_field()  # the latest import that added to the row
    charge_start: datetime = ts_field()
    charge_end: datetime = ts_field()
    provider: str | None = Field(default=None, max_length=32)
    account: str | None = Field(default=None, max_length=128)
    region: str | None = Field(default=None, max_length=64)
    service: str | None = Field(default=None, max_length=128)
    resource_id: str | None = Field(default=None, max_length=512)
    billed_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    effective_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    lines: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    team: str | None = Field(default=None, max_length=128)
    project: str | None = Field(default=None, max_length=128)
    env: str | None = Field(default=None, max_length=64)
    cost_center: str | None = Field(default=None, max_length=128)
    # FOCUS ChargeCategory (Usage, Purchase, Tax, Credit, Adjustment) and ChargeClass
    # (Correction); the currency the cloud billed in (amounts above are in USD)
    charge_category: str | None = Field(default=None, max_length=32)
    charge_class: str | None = Field(default=None, max_length=32)
    currency: str | None = Field(default=None, max_length=8)


class BillingLineKeyRow(SQLModel, table=True):
    """The keys of imported bill lines (64-bit hashes of a line's content and its occurrence
    in its file), per source and day of the charge (days since 1970-01-01, UTC), as blobs
    of 8-byte little-endian integers: each import adds one chunk a day (billing.line_keys).
    Re-importing a line whose key is here adds nothing."""

    model_config = DEFERRED

    __tablename__ = "billing_line_keys"

    source: str = Field(primary_key=True, max_length=32)
    day: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    chunk: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    line_keys: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class BillingLegacyKeyRow(SQLModel, table=True):
    """Lines imported before billing_costs (revision 0013) by their old key (SHA-256 of the
    line's content as JSON): an export they came from adds nothing when imported again."""

    model_config = DEFERRED

    __tablename__ = "billing_legacy_keys"
    __table_args__ = {"sqlite_with_rowid": False}

    source: str = Field(primary_key=True, max_length=32)
    line_key: str = Field(primary_key=True, max_length=64)
