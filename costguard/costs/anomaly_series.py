"""Each anomaly rule's spend series, kept from one hourly check to the next.

An hourly rule's baseline reads 14 days of hours (a daily rule's 8 weeks of days): read
whole at every check, that is every cost interval of two weeks, a row per instance and
cycle (~40 M at 10,000 instances on a 5-minute poll), once an hour. A bucket's spend does
not change once the bucket has ended, so `SeriesKeep` keeps each rule's series and reads
only the buckets that ended since the last check, dropping those that left the history.
What is kept is read again whole when an interval written since the last check starts
before the kept buckets' end (a cycle after a downtime, a scope read late: `NewRows`), and
when a rule's span does not follow on from the kept one (a new rule, a clock moved back).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session

from costguard.costs.anomaly import Series, spend_series
from costguard.costs.spend_sums import NewRows
from costguard.policy.schema import AnomalyRule


@dataclass(frozen=True)
class _Kept:
    since: datetime
    until: datetime
    series: Series  # value -> bucket -> micro-dollars, the buckets in [since, until)


class SeriesKeep:
    """`spend_series` of each rule, kept. Call `begin` once a check, before `series`."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, str], _Kept] = {}
        self._new = NewRows()
        self.reads: list[tuple[str, datetime, datetime]] = []  # this check's, in order

    def begin(self, session: Session) -> None:
        self.reads = []
        ends = max((k.until for k in self._kept.values()), default=None)
        if self._new.any_before(session, ends):
            self._kept.clear()

    def series(self, session: Session, rule: AnomalyRule, since: datetime,
               until: datetime) -> Series:
        """`spend_series(session, rule, since, until)`, from what is kept where it can."""
        key = (rule.name, rule.dimension, rule.granularity)
        kept = self._kept.get(key)
        if kept is None or not kept.since <= since <= kept.until <= until:
            out = self._read(session, rule, since, until)
        else:
            out = {value: kept_buckets for value, buckets in kept.series.items()
                   if (kept_buckets := {b: x for b, x in buckets.items() if b >= since})}
            if kept.until < until:
                for value, buckets in self._read(session, rule, kept.until, until).items():
                    out.setdefault(value, {}).update(buckets)
        self._kept[key] = _Kept(since, until, out)
        return out

    def _read(self, session: Session, rule: AnomalyRule, since: datetime,
              until: datetime) -> Series:
        self.reads.append((rule.name, since, until))
        return spend_series(session, rule, since, until)
