"""The rows a report sums: raw cost intervals and daily rollups of a period as one source.

Raw intervals after the rollup watermark and daily rollups (or their per-day summary)
before it are read together (`facts`), so a period spans retention boundaries without
counting anything twice; `presence` gives the (instance, dimensions) pairs a period holds,
for counting instances, from the instances' day runs where it can. A period that starts or
ends inside a rolled-up day reads that day from its raw intervals while they are kept
(`raw_edges`), and is widened to the whole UTC day (the rollup's grain) once they are
pruned.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Select, String, Subquery, cast, func, literal, null, select
from sqlalchemy import union_all as sa_union_all
from sqlmodel import Session

from costguard.clock import utc
from costguard.costs.rollup import (
    DAILY,
    RAW,
    RUN_DIMENSIONS,
    RUNS,
    SUMMARY,
    day_floor,
    interval_seconds,
    rolled_up_until,
    summary_current,
)

FACT_COLUMNS = ("provider", "instance_id", "account", "region", "instance_type", "lifecycle",
                 "state", "gpu_count", "team", "project", "env", "cost_center")
MEASURES = ("cost_micros", "idle_cost_micros", "gpu_seconds", "idle_gpu_seconds")



def facts(session: Session, since: datetime, until: datetime, *,
          summary: bool = False) -> Subquery:
    """Raw intervals and daily rollups of [since, until) as one row source.

    With `summary`, days before the watermark are read from the per-day summary (no
    `instance_id`: NULL there) when it is current; sums are the same, rows far fewer. A
    period that starts inside a rolled-up day reads that first day from its raw intervals
    while they are kept, and one that ends inside a rolled-up day its last day (both
    `raw_edges`); only once they are pruned is such a day widened to the whole day.
    """
    watermark = rolled_up_until(session)
    parts: list[Select[tuple[object, ...]]] = []
    raw_from = since if watermark is None else max(since, watermark)
    daily_from = day_floor(since)
    first, last = raw_edges(session, since, until, watermark)
    daily_until = until if watermark is None else min(until, watermark)
    if first is not None:
        parts.append(_raw_facts(session, since, first))
        daily_from = first
    if last is not None:
        parts.append(_raw_facts(session, last, until))
        daily_until = last
    if raw_from < until:
        parts.append(_raw_facts(session, raw_from, until))
    if watermark is not None and daily_from < daily_until:
        if summary and summary_current(session):
            parts.append(select(
                *(cast(null(), String).label(c) if c == "instance_id" else SUMMARY.c[c]
                  for c in FACT_COLUMNS),
                *(SUMMARY.c[m] for m in MEASURES), SUMMARY.c.instance_seconds,
            ).where(SUMMARY.c.day >= daily_from, SUMMARY.c.day < daily_until))
        else:
            parts.append(select(
                *(DAILY.c[c] for c in FACT_COLUMNS), *(DAILY.c[m] for m in MEASURES),
                DAILY.c.instance_seconds,
            ).where(DAILY.c.day >= daily_from, DAILY.c.day < daily_until))
    if not parts:  # an empty period: keep the column shape
        parts.append(select(
            *(RAW.c[c] for c in FACT_COLUMNS), *(RAW.c[m] for m in MEASURES),
            literal(0.0).label("instance_seconds")).where(literal(False)))
    if len(parts) == 1:
        return parts[0].subquery("facts")
    return sa_union_all(*parts).subquery("facts")


def _raw_facts(session: Session, lo: datetime, hi: datetime) -> Select[tuple[object, ...]]:
    return select(
        *(RAW.c[c] for c in FACT_COLUMNS), *(RAW.c[m] for m in MEASURES),
        interval_seconds(session).label("instance_seconds"),
    ).where(RAW.c.start >= lo, RAW.c.start < hi)


def raw_edges(session: Session, since: datetime, until: datetime,
              watermark: datetime | None) -> tuple[datetime | None, datetime | None]:
    """The partial rolled-up days a period reads from their raw intervals: (first, last).

    `first`: where a period that starts inside a rolled-up day (before the watermark, not
    at midnight) stops reading that day raw: the next midnight, or the period's end.
    `last`: where a period that ends inside a rolled-up day (not at midnight, not already
    read raw to its end as the first day) starts reading that day raw: its midnight.
    Either is None where that day is not read raw, or where its raw intervals have been
    pruned (the oldest kept starts later): the day is then widened to whole, as its
    rollup holds it. The oldest raw interval is looked up once, and only when needed."""
    if watermark is None or since >= watermark:
        return None, None
    oldest: list[datetime | None] = []

    def kept_from(day: datetime) -> bool:  # the raw intervals from `day` on are kept
        if not oldest:
            found = session.execute(select(func.min(RAW.c.start))).scalar_one_or_none()
            oldest.append(utc(found) if found is not None else None)
        return oldest[0] is not None and oldest[0] <= day

    first = None
    if since != day_floor(since) and kept_from(since):
        first = min(day_floor(since) + timedelta(days=1), watermark, until)
    last = day_floor(until)
    if (last >= watermark or until == last or last < since
            or (first is not None and first >= until) or not kept_from(last)):
        return first, None
    return first, last


_PRESENCE_COLUMNS = ("provider", "instance_id", *RUN_DIMENSIONS)


def presence(session: Session, since: datetime, until: datetime) -> Subquery:
    """(instance, dimensions) that have spend in [since, until), once or more, for counting
    distinct instances: raw intervals after the watermark, and before it the instances'
    day runs that overlap the period (or the daily rows when the runs are not current); a
    first or last day read raw (`raw_edges`) from its raw intervals."""
    watermark = rolled_up_until(session)
    if watermark is None or day_floor(since) >= watermark or not summary_current(session):
        return facts(session, since, until)
    first, last = raw_edges(session, since, until, watermark)
    runs_from = day_floor(since) if first is None else first
    runs_until = min(until, watermark) if last is None else last
    parts: list[Select[tuple[object, ...]]] = []
    if first is not None:
        parts.append(select(*(RAW.c[c] for c in _PRESENCE_COLUMNS)).where(
            RAW.c.start >= since, RAW.c.start < first))
    if last is not None:
        parts.append(select(*(RAW.c[c] for c in _PRESENCE_COLUMNS)).where(
            RAW.c.start >= last, RAW.c.start < until))
    if runs_from < runs_until:
        parts.append(select(*(RUNS.c[c] for c in _PRESENCE_COLUMNS)).where(
            RUNS.c.first_day < runs_until, RUNS.c.last_day >= runs_from))
    if watermark < until:
        parts.append(select(*(RAW.c[c] for c in _PRESENCE_COLUMNS)).where(
            RAW.c.start >= watermark, RAW.c.start < until))
    if not parts:
        return facts(session, since, until)
    if len(parts) == 1:
        return parts[0].subquery("presence")
    return sa_union_all(*parts).subquery("presence")
