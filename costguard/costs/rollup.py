"""Long history: raw cost intervals rolled up per instance per UTC day, then pruned.

`rollup(session, before)` aggregates every whole UTC day before `before` that is not rolled
up yet (an interval belongs to the day its start falls in) and moves the watermark
`costs.rolled_up_until`. Reports read daily rows before the watermark and raw intervals
after it, so nothing is counted twice and `prune` may delete raw rows behind it.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from sqlalchemy import Float, Table, and_, delete, exists, func, insert, literal, select, update
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import FromClause
from sqlmodel import Session

from costguard.store import control
from costguard.store.rollup_tables import CostDailyRow, CostRunRow, CostSummaryRow
from costguard.store.tables import CostIntervalRow

ROLLED_UP_UNTIL = "costs.rolled_up_until"
# how far the summary and run tables follow the daily rows; reports use them only when
# this equals the rollup watermark
SUMMARY_UNTIL = "costs.summary_until"
RAW: Table = CostIntervalRow.__table__  # type: ignore[attr-defined]
DAILY: Table = CostDailyRow.__table__  # type: ignore[attr-defined]
SUMMARY: Table = CostSummaryRow.__table__  # type: ignore[attr-defined]
RUNS: Table = CostRunRow.__table__  # type: ignore[attr-defined]
# the report dimensions other than the instance (what RUNS keys an instance's days by)
RUN_DIMENSIONS = ("account", "region", "instance_type", "lifecycle", "team", "project", "env",
                  "cost_center")
_SUMMARY_GROUP = ("provider", *RUN_DIMENSIONS, "state", "gpu_count")
_SUMMED = ("instance_seconds", "cost_micros", "idle_cost_micros", "gpu_seconds",
           "idle_gpu_seconds")
_GROUP = ("provider", "instance_id", "account", "region", "instance_type", "lifecycle",
          "state", "gpu_count", "team", "project", "env", "cost_center")


def day_floor(when: datetime) -> datetime:
    when = when.astimezone(UTC)
    return datetime.combine(when.date(), time(), tzinfo=UTC)


def hour_floor(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


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
    if end > start and not summary_current(session):
        rebuild_summaries(session)  # e.g. daily rows from before the summary tables existed
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
        _summarize_day(session, day)
        day = nxt
    if end > start:
        control.put(session, ROLLED_UP_UNTIL, end.isoformat(), end)
        control.put(session, SUMMARY_UNTIL, end.isoformat(), end)
    return _daily_rows(session, start, end) - before_rows


def summary_current(session: Session) -> bool:
    """Whether the summary and run tables hold exactly the daily rows below the watermark."""
    session.flush()
    return control.get_time(session, SUMMARY_UNTIL) == rolled_up_until(session)


def rebuild_summaries(session: Session) -> None:
    """Recompute the summary and run tables from every daily row (after an upgrade, or
    after daily rows were written by anything but `rollup`)."""
    session.execute(delete(SUMMARY))
    session.execute(delete(RUNS))
    days = session.execute(select(DAILY.c.day).distinct().order_by(DAILY.c.day)).scalars()
    for day in list(days):
        _summarize_day(session, day)
    watermark = rolled_up_until(session)
    if watermark is not None:
        control.put(session, SUMMARY_UNTIL, watermark.isoformat(), watermark)


def _summarize_day(session: Session, day: datetime) -> None:
    """Add `day`'s daily rows to the summary and extend (or start) instances' day runs.

    Days must come in increasing order: a run that ended the day before is extended.
    """
    nxt = day + timedelta(days=1)
    in_day = (DAILY.c.day >= day, DAILY.c.day < nxt)
    group = [DAILY.c[c] for c in _SUMMARY_GROUP]
    session.execute(insert(SUMMARY).from_select(
        ["day", *_SUMMARY_GROUP, *_SUMMED],
        select(literal(day, SUMMARY.c.day.type).label("day"), *group,
               *(func.sum(DAILY.c[m]) for m in _SUMMED)).where(*in_day).group_by(*group)))

    def same(run: FromClause, daily: FromClause) -> ColumnElement[bool]:
        r, d = run.c, daily.c
        return and_(r.provider == d.provider, r.instance_id == d.instance_id,
                    *(r[c].is_not_distinct_from(d[c]) for c in RUN_DIMENSIONS))

    d = DAILY.alias("d")
    session.execute(update(RUNS).where(
        RUNS.c.last_day == day - timedelta(days=1),
        exists().where(d.c.day >= day, d.c.day < nxt, same(RUNS, d))).values(last_day=day))
    r = RUNS.alias("r")
    keys = [DAILY.c.provider, DAILY.c.instance_id, *(DAILY.c[c] for c in RUN_DIMENSIONS)]
    session.execute(insert(RUNS).from_select(
        ["provider", "instance_id", *RUN_DIMENSIONS, "first_day", "last_day"],
        select(*keys, literal(day, RUNS.c.first_day.type).label("first_day"),
               literal(day, RUNS.c.last_day.type).label("last_day"))
        .where(*in_day, ~exists().where(r.c.last_day == day, same(r, DAILY)))
        .distinct()))


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
