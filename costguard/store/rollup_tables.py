"""Tables of the spend history reports read: per instance and UTC day, per day over every
report dimension, and each instance's runs of days (costs/rollup.py). Split from
`costguard.store.tables` by concern; the same rules hold (an Alembic migration for every
change, then the head snapshot)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, Index
from sqlmodel import Field, SQLModel

from costguard.store.tables import DEFERRED, ts_field


class CostDailyRow(SQLModel, table=True):
    """Raw cost intervals rolled up per instance, UTC day and attribution (long history).

    An interval belongs to the day its `start` falls in, as in reports over raw intervals,
    so a day-aligned report gives the same cents from either source.
    """

    model_config = DEFERRED

    __tablename__ = "cost_daily"
    __table_args__ = (
        Index("ix_cost_daily_day", "day"),
        Index("ix_cost_daily_instance_day", "provider", "instance_id", "day"),
    )

    id: int | None = Field(default=None, primary_key=True)
    day: datetime = ts_field()  # midnight UTC
    provider: str = Field(max_length=16)
    instance_id: str = Field(max_length=128)
    account: str = Field(max_length=128)
    region: str = Field(max_length=64)
    instance_type: str = Field(max_length=64)
    lifecycle: str = Field(max_length=16)
    state: str = Field(default="running", max_length=16)
    gpu_count: int = 0
    instance_seconds: int = 0
    cost_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    idle_cost_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    gpu_seconds: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    idle_gpu_seconds: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    team: str | None = Field(default=None, max_length=128)
    project: str | None = Field(default=None, max_length=128)
    env: str | None = Field(default=None, max_length=64)
    cost_center: str | None = Field(default=None, max_length=128)


class ReportDimensions(SQLModel):
    """The report dimensions other than the instance, as the summary tables below key them
    (a mixin: no table of its own; migration 0004 creates these columns in both tables)."""

    model_config = DEFERRED

    provider: str = Field(max_length=16)
    account: str = Field(max_length=128)
    region: str = Field(max_length=64)
    instance_type: str = Field(max_length=64)
    lifecycle: str = Field(max_length=16)
    team: str | None = Field(default=None, max_length=128)
    project: str | None = Field(default=None, max_length=128)
    env: str | None = Field(default=None, max_length=64)
    cost_center: str | None = Field(default=None, max_length=128)


class CostSummaryRow(ReportDimensions, table=True):
    """Daily rollups summed per UTC day over every report dimension (no instance): what
    grouped reports read. Filled by the rollup for the days it adds (see costs/rollup.py)."""

    model_config = DEFERRED

    __tablename__ = "cost_daily_summary"
    __table_args__ = (Index("ix_cost_daily_summary_day", "day"),)

    id: int | None = Field(default=None, primary_key=True)
    day: datetime = ts_field()  # midnight UTC
    state: str = Field(default="running", max_length=16)
    gpu_count: int = 0
    instance_seconds: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    cost_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    idle_cost_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    gpu_seconds: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    idle_gpu_seconds: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class CostRunRow(ReportDimensions, table=True):
    """A maximal run of consecutive days [first_day, last_day] on which an instance has daily
    rows with these dimensions: exact distinct-instance counts over any day range without
    reading the daily rows (an instance counts where one of its runs overlaps the range)."""

    model_config = DEFERRED

    __tablename__ = "cost_instance_runs"
    __table_args__ = (
        Index("ix_cost_instance_runs_instance", "provider", "instance_id", "last_day"),
        Index("ix_cost_instance_runs_last_day", "last_day"),
    )

    id: int | None = Field(default=None, primary_key=True)
    instance_id: str = Field(max_length=128)
    first_day: datetime = ts_field()
    last_day: datetime = ts_field()
