"""Long history: raw cost intervals rolled up per instance per UTC day, then pruned.

`rollup(session, before)` aggregates every whole UTC day before `before` that is not rolled
up yet (an interval belongs to the day its start falls in) and moves the watermark
`costs.rolled_up_until`. Reports read daily rows before the watermark and raw intervals
after it, so nothing is counted twice and `prune` may delete raw rows behind it.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from sqlalchemy import Float, Table, delete, func, insert, literal, select
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session

from costguard.store import control
from costguard.store.tables import CostDailyRow, CostIntervalRow

ROLLED_UP_UNTIL = "costs.rolled_up_until"
RAW: Table = CostIntervalRow.__table__  # type: ignore[attr-defined]
DAILY: Table = CostDailyRow.__table__  # type: ignore[attr-defined]
_GROUP = ("provider", "instance_id", "account", "region", "instance_type", "lifecycle",
          "state", "gpu_count", "team", "project", "env", "cost_center")


def day_floor(when: datetime) -> datetime:
    when = when.astimezone(UTC)
    return datetime.combine(when.date(), time(), tzinfo=UTC)


def interval_seconds(session: Session) -> ColumnElement[float]:
    """`end - start` in seconds, in the dialect at hand."""
    if session.get_bind().dialect.name == "postgresql":
        return func.cast(func.extract("epoch", RAW.c.end - RAW.c.start), Float)
    return (func.julianday(RAW.c.end) - func.julianday(RAW.c.start)) * 86400.0


def rolled_up_until(session: Session) -> datetime | None:
    return control.get_time(session, ROLLED_UP_UNTIL)


def rollup(session: Session, before: datetime) -> int:
    """Roll up whole days before `before` (floored to midnight UTC); returns daily rows added."""
    end = day_floor(before)
    start = rolled_up_until(session)
    if start is None:
        first = session.execute(select(func.min(RAW.c.start))).scalar()
        if first is None:
            return 0
        start = day_floor(first)
    # counted, not read from rowcount: drivers disagree on it for INSERT ... SELECT
    before_rows = _daily_rows(session, start, end)
    seconds = interval_seconds(session)
    day = start
    while day < end:
        nxt = day + timedelta(days=1)
        cols = [RAW.c[name] for name in _GROUP]
        stmt = select(
            literal(day, DAILY.c.day.type).label("day"), *cols,
            func.cast(func.round(func.sum(seconds)), DAILY.c.instance_seconds.type),
            func.sum(RAW.c.cost_micros), func.sum(RAW.c.idle_cost_micros),
            func.sum(RAW.c.gpu_seconds), func.sum(RAW.c.idle_gpu_seconds),
        ).where(RAW.c.start >= day, RAW.c.start < nxt).group_by(*cols)
        session.execute(insert(DAILY).from_select(
            ["day", *_GROUP, "instance_seconds", "cost_micros", "idle_cost_micros",
             "gpu_seconds", "idle_gpu_seconds"], stmt))
        day = nxt
    if end > start:
        control.put(session, ROLLED_UP_UNTIL, end.isoformat(), end)
    return _daily_rows(session, start, end) - before_rows


def _daily_rows(session: Session, start: datetime, end: datetime) -> int:
    return int(session.execute(select(func.count()).select_from(DAILY).where(
        DAILY.c.day >= start, DAILY.c.day < end)).scalar() or 0)


def prune(session: Session, older_than: datetime) -> int:
    """Delete raw intervals that start before both `older_than` and the rollup watermark."""
    watermark = rolled_up_until(session)
    if watermark is None:
        return 0
    cutoff = min(older_than, watermark)
    result = session.execute(delete(RAW).where(RAW.c.start < cutoff))
    return max(result.rowcount or 0, 0)  # type: ignore[attr-defined]


def bucket_key(session: Session, column: ColumnElement[datetime],
               granularity: str) -> ColumnElement[str]:
    """`column` truncated to its UTC day or hour as text (`YYYY-MM-DD` / `YYYY-MM-DD HH`)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.to_char(column, "YYYY-MM-DD" if granularity == "day" else "YYYY-MM-DD HH24")
    # SQLite keeps datetimes as ISO text, so a prefix is the truncation
    return func.substr(column, 1, 10 if granularity == "day" else 13)


def parse_bucket(text: str) -> datetime:
    if len(text) == 10:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    return datetime.fromisoformat(text[:10] + "T" + text[11:13] + ":00").replace(tzinfo=UTC)
