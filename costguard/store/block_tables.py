"""Tables of settled readings: one compressed block of raw minutes per instance and hour
(kept `accounting.readings_raw`), and one blob of hourly history per instance and hour (kept
`accounting.readings_history`), both keyed by a small integer per instance
(`reading_series`). Written by `costguard.store.compact` from `gpu_readings`, which keeps
only the hours not yet settled. Split from `costguard.store.tables` by concern; the same
rules hold (an Alembic migration for every change, then the head snapshot)."""

from __future__ import annotations

from sqlalchemy import Index, LargeBinary, SmallInteger, UniqueConstraint
from sqlmodel import Field, SQLModel

from costguard.store.tables import DEFERRED


class ReadingSeriesRow(SQLModel, table=True):
    """An instance whose readings are kept in blocks, by a number the blocks repeat in
    place of the provider and instance id."""

    model_config = DEFERRED

    __tablename__ = "reading_series"
    __table_args__ = (UniqueConstraint("provider", "instance_id", name="uq_reading_series"),)

    id: int | None = Field(default=None, primary_key=True)
    provider: str = Field(max_length=16)
    instance_id: str = Field(max_length=128)


class _HourBlob(SQLModel):
    """An instance's blob of one hour: `hour` in hours since 1970-01-01 UTC, `sources` a
    bit per telemetry source among its readings (a query for an agent's readings needs no
    decoding)."""

    series_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    hour: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    sources: int = Field(sa_type=SmallInteger, nullable=False)
    payload: bytes = Field(sa_type=LargeBinary, nullable=False)


class ReadingBlockRow(_HourBlob, table=True):
    """One instance's raw readings of one hour (`costguard.store.blocks`)."""

    model_config = DEFERRED

    __tablename__ = "reading_blocks"
    __table_args__ = (Index("ix_reading_blocks_hour", "hour"), {"sqlite_with_rowid": False})


class ReadingHourRow(_HourBlob, table=True):
    """One instance's hourly history of one hour, a GPU-hour each (`costguard.store.hours`)."""

    model_config = DEFERRED

    __tablename__ = "reading_hours"
    __table_args__ = (Index("ix_reading_hours_hour", "hour"), {"sqlite_with_rowid": False})
