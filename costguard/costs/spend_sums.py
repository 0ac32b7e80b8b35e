"""Spend since midnight, since the 1st and over a budget's run-rate window, kept between the
daemon's refreshes of its cost gauges.

The gauges (cost_metrics.py) show each team's spend today and this month and each budget's
spend and forecast, refreshed after every cycle. Summed afresh each time, they read every
cost interval the period holds raw: a row per instance and cycle, ~120,000 an hour at
10,000 instances on a 5-minute poll, 2.9 M by midnight, read four times or more per refresh
(today, this month, each budget twice), and each budget's 7-day window the raw intervals of
its first day too. At 10,000 instances with three budgets that took 20 s of CPU at 01:55
and 55 s at 23:55, after every cycle (BENCHMARKS.md, metrics-refresh-day).

Spend is summed by the interval's start, so the spend of [since, now) is that of
[since, H) plus that of [H, now), H the start of the current hour. `SpendSums` keeps the
first part of each figure and extends it by the hour that ended when a new one begins: a
refresh reads the current hour's intervals, and once an hour the hour just ended. A
budget's run-rate window starts 7 days before the current hour (costs/budgets.py): when
its start moves on, the hour it leaves is read and taken off, while the raw intervals of
that hour are still stored (a rolled-up day is read raw while they are: report/queries.py);
otherwise, and for any other figure whose `since` changes (a new day or month), the figure
is read whole once.

What is kept is forgotten, and read again whole, when an interval written since the last
refresh starts before the kept hour: a cycle after a downtime, or an instance accrued late,
writes such rows (`cost_intervals.id` says which rows are new). Rows are only added, never
changed, and deleted only once rolled up into days with the same sums (costs/rollup.py), so
nothing else can make a kept sum stale. Cost intervals are written by the cycle, one at a
time (the leader's cycle lock), so a row whose id is below the highest seen has been seen.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlmodel import Session

from costguard.clock import utc
from costguard.costs.budgets import SpentIn, month_bounds, spent
from costguard.costs.rollup import RAW, hour_floor
from costguard.policy.spend import Budget

Sums = dict[str, int]
# (session, since, until) -> micro-dollars by key over the intervals starting in [since, until)
Measure = Callable[[Session, datetime, datetime], Sums]


def _add(a: Sums, b: Sums, sign: int = 1) -> Sums:
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0) + sign * value
    return out


class NewRows:
    """The cost intervals written since the last look, by their ids."""

    def __init__(self) -> None:
        self._seen_id = 0

    def any_before(self, session: Session, when: datetime | None) -> bool:
        """Whether an interval written since the last call starts before `when` (None:
        nothing is kept, only remember the newest), or the table went back (emptied,
        another store); then take every row as seen."""
        top = session.execute(select(func.max(RAW.c.id))).scalar() or 0
        late = top < self._seen_id
        if not late and top > self._seen_id and when is not None:
            late = session.execute(select(RAW.c.id).where(
                RAW.c.id > self._seen_id, RAW.c.id <= top, RAW.c.start < when).limit(1)
            ).first() is not None
        self._seen_id = top
        return late


@dataclass(frozen=True)
class _Kept:
    since: datetime
    until: datetime  # an hour's start
    sums: Sums  # of [since, until)


class SpendSums:
    """Figures' sums over their whole hours, from one refresh to the next. Call `begin` once
    a refresh, before `sums`."""

    def __init__(self) -> None:
        self._kept: dict[tuple[Hashable, Hashable], _Kept] = {}  # (figure, role) ->
        self._used: set[tuple[Hashable, Hashable]] = set()
        self._read: dict[tuple[Hashable, datetime, datetime], Sums] = {}
        self._new = NewRows()
        self._raw_from: datetime | None = None
        self.reads: list[tuple[Hashable, datetime, datetime]] = []  # this refresh's, in order

    def begin(self, session: Session) -> None:
        """Drop the figures the last refresh did not use, and everything kept if an interval
        written since then starts before an hour already summed (or the table went back)."""
        self._kept = {k: v for k, v in self._kept.items() if k in self._used}
        self._used.clear()
        self._read.clear()
        self._raw_from = None
        self.reads = []
        summed_to = max((k.until for k in self._kept.values()), default=None)
        if self._new.any_before(session, summed_to):
            self._kept.clear()

    def sums(self, session: Session, figure: Hashable, measure: Measure, since: datetime,
             now: datetime, *, role: Hashable = None, slides: bool = False) -> Sums:
        """`measure` over [since, now): the kept whole hours, and the current hour read.
        `figure` names what `measure` sums (reads of the same span are made once); `role`
        which of its running sums this is (today's, the month's). `slides`: a `since` later
        than the kept one is taken from the kept sums, not read whole (a run-rate window's
        start), where the raw intervals from the kept start on are still stored."""
        hour = hour_floor(now)
        if hour <= since:
            return self._measure(session, figure, measure, since, now)
        key = (figure, role)
        self._used.add(key)
        kept = self._kept.get(key)
        if kept is not None and kept.since != since:
            if slides and kept.since < since <= kept.until and self._raw_kept(session, kept.since):
                gone = self._measure(session, figure, measure, kept.since, since)
                kept = _Kept(since, kept.until, _add(kept.sums, gone, -1))
            else:
                kept = None
        if kept is None or kept.until > hour:  # none yet, or a clock that went back
            kept = _Kept(since, hour, self._measure(session, figure, measure, since, hour))
        elif kept.until < hour:
            ended = self._measure(session, figure, measure, kept.until, hour)
            kept = _Kept(since, hour, _add(kept.sums, ended))
        self._kept[key] = kept
        return _add(kept.sums, self._measure(session, figure, measure, hour, now))

    def _raw_kept(self, session: Session, since: datetime) -> bool:
        """Whether the raw intervals from `since` on are all still stored: spend is then
        additive at any split after it (a split inside a rolled-up day reads that day raw;
        once pruned, the day would be counted whole: report/queries.py)."""
        if self._raw_from is None:
            oldest = session.execute(select(func.min(RAW.c.start))).scalar()
            self._raw_from = utc(oldest) if oldest is not None else datetime.max.replace(
                tzinfo=UTC)
        return self._raw_from <= since

    def _measure(self, session: Session, figure: Hashable, measure: Measure,
                 since: datetime, until: datetime) -> Sums:
        """One read per figure and span in a refresh (today's and the month's current hour
        are the same read)."""
        key = (figure, since, until)
        if key not in self._read:
            self.reads.append(key)
            self._read[key] = measure(session, since, until)
        return self._read[key]


def budget_spent_in(sums: SpendSums, session: Session, now: datetime) -> SpentIn:
    """What `budget_status` reads a budget's spend with, from `sums`: the month's spend, and
    the run-rate window's (its start moves on the hour: `slides`)."""
    month = month_bounds(now)[0]

    def spent_in(budget: Budget, since: datetime, until: datetime) -> int:
        def measure(s: Session, a: datetime, z: datetime) -> Sums:
            return {"": spent(s, budget, a, z)}

        figure = ("budget", budget.name, budget.dimension, budget.value)
        return sums.sums(session, figure, measure, since, until, role=since == month,
                         slides=since != month)[""]

    return spent_in
