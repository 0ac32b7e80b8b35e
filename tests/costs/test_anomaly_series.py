"""The anomaly rules' spend series kept from one hourly check to the next
(costs/anomaly_series.py): always what `spend_series` reads whole, read only for the buckets
that ended since, and whole again after an interval written late or a gap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from costguard.costs.anomaly import spend_series
from costguard.costs.anomaly_series import SeriesKeep
from costguard.costs.baseline import Season
from costguard.costs.rollup import day_floor, rollup
from costguard.policy.schema import AnomalyRule
from costguard.store.db import Database
from tests.costs.fleet import add_interval

NOW = datetime(2026, 10, 20, 21, 5, tzinfo=UTC)
HOUR = timedelta(hours=1)
HOURLY = AnomalyRule(name="region-hourly", dimension="region", granularity="hour",
                     min_impact_usd=20)
DAILY = AnomalyRule(name="team-daily", dimension="team", granularity="day", min_impact_usd=200)


def accrue(db: Database, start: datetime, end: datetime) -> None:
    """Hourly intervals of three instances in two regions over [start, end)."""
    with db.session() as s:
        t = start
        while t < end:
            for k in range(3):
                add_interval(s, f"i-{k}", t, 1, 2.0 + k + t.hour / 10, team=("a", "b")[k % 2],
                             region=("us-east-1", "eu-west-1")[k % 2])
            t += HOUR


def span(rule: AnomalyRule, now: datetime) -> tuple[datetime, datetime]:
    """The span detect_anomalies reads for the rule at `now`."""
    season = Season.for_granularity(rule.granularity)
    step = season.step
    bucket = (now.replace(minute=0, second=0, microsecond=0) - step if step == HOUR
              else day_floor(now) - step)
    return bucket - step * season.history, bucket + step


def test_kept_series_are_those_read_whole_and_read_only_the_ended_buckets(
        db: Database) -> None:
    accrue(db, day_floor(NOW) - timedelta(days=60), NOW - timedelta(minutes=5))
    with db.session() as s:
        rollup(s, NOW)
    keep = SeriesKeep()
    now = NOW
    reads = []
    for check in range(10):  # 21:05, 21:35, 22:05 ... over midnight, and its rollup
        if check:
            accrue(db, now - timedelta(minutes=35), now - timedelta(minutes=5))
        if now.hour == 0 and now.minute == 35:
            with db.session() as s:
                rollup(s, now)
        if check == 8:  # a scope read late: an interval in an hour already kept
            with db.session() as s:
                add_interval(s, "late", now - 5 * HOUR, 1, 50.0, team="a", region="us-east-1")
        with db.session() as s:
            keep.begin(s)
            for rule in (HOURLY, DAILY):
                since, until = span(rule, now)
                assert keep.series(s, rule, since, until) == spend_series(s, rule, since, until)
        reads.append([(name, z - a) for name, a, z in keep.reads])
        now += timedelta(minutes=30)
    # a baseline's history and the bucket judged
    two_weeks, eight_weeks = 14 * 24 * HOUR + HOUR, timedelta(weeks=8, days=1)
    assert reads == [
        [("region-hourly", two_weeks), ("team-daily", eight_weeks)],  # 21:05: whole
        [],  # 21:35: no bucket ended since 21:05
        [("region-hourly", HOUR)], [],  # 22:05, 22:35
        [("region-hourly", HOUR)], [],  # 23:05, 23:35
        [("region-hourly", HOUR), ("team-daily", timedelta(days=1))],  # 00:05: a new day
        [],  # 00:35, after the rollup of the day before: its sums are the same
        [("region-hourly", two_weeks), ("team-daily", eight_weeks)],  # 01:05: the late row
        [],  # 01:35
    ]
