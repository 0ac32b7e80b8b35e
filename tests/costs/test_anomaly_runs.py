"""A continuing deviation is one anomaly (#20 item 4): opened once, extended hour by hour,
ended when spend is back; alerted when it opens and when its impact doubles, never every
hour; its causes add up to its impact."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import col, select

from costguard.costs.anomaly import Anomaly, detect_anomalies, give_feedback
from costguard.costs.anomaly_series import SeriesKeep
from costguard.policy.schema import AnomalyRule, Attribution, PolicySet
from costguard.store.db import Database
from costguard.store.tables import AlertRow, AnomalyRow
from tests.costs.fleet import add_interval

FIRST = datetime(2026, 10, 5, tzinfo=UTC)  # a Monday; three weeks of hourly history
SPIKE = FIRST + timedelta(days=21, hours=10)
HOUR = timedelta(hours=1)


def policies() -> PolicySet:
    return PolicySet(
        attribution=Attribution.model_validate({"dimensions": {"team": {"keys": ["team"]}}}),
        anomalies=(AnomalyRule(name="region-hourly", dimension="region", granularity="hour",
                               min_impact_usd=20),))


def steady(db: Database, until: datetime) -> None:
    """us-east-1's usual: four g5 boxes at about $10/h each, every hour since FIRST."""
    rng = random.Random(5)
    with db.session() as s:
        hour = FIRST
        while hour < until:
            for i in range(4):
                add_interval(s, f"i-base{i}", hour, 1, 10.0 * (1 + rng.gauss(0, 0.02)),
                             team="research", itype="g5.12xlarge", gpus=4)
            hour += HOUR


def spike(db: Database, start: datetime, hours: int, boxes: int = 3) -> None:
    """`boxes` p4d instances (idle) on top of the usual, for `hours` hours from `start`."""
    with db.session() as s:
        for h in range(hours):
            for n in range(boxes):
                add_interval(s, f"i-p4d{n}", start + h * HOUR, 1, 32.77, team="research",
                             idle=True)


def judge_hours(db: Database, first: datetime, last: datetime,
                keep: SeriesKeep | None = None) -> list[bool]:
    """detect_anomalies 5 minutes after each hour of [first, last] ends, twice (a daemon
    cycles more often than hourly); whether each hour alerted. `keep`: the series kept
    from one check to the next, as the engine keeps them."""
    alerted = []
    hour = first
    while hour <= last:
        with db.session() as s:
            found: list[Anomaly] = []
            for minutes in (5, 10):
                if keep is not None:
                    keep.begin(s)
                found += detect_anomalies(s, policies(), hour + HOUR + timedelta(minutes=minutes),
                                          keep=keep)
        alerted.append(any(a.alerted for a in found))
        hour += HOUR
    return alerted


def rows(db: Database) -> list[AnomalyRow]:
    with db.session() as s:
        return list(s.exec(select(AnomalyRow).order_by(col(AnomalyRow.bucket_start))))


def anomaly_alerts(db: Database) -> list[AlertRow]:
    with db.session() as s:
        return list(s.exec(select(AlertRow).where(AlertRow.kind == "anomaly")
                           .order_by(col(AlertRow.id))))


@pytest.mark.parametrize("kept", [False, True], ids=["read-whole", "series-kept"])
def test_six_anomalous_hours_are_one_anomaly_alerted_as_it_opens_and_doubles(
        db: Database, kept: bool) -> None:
    steady(db, SPIKE + 10 * HOUR)
    spike(db, SPIKE, 6)
    keep = SeriesKeep() if kept else None
    alerted = judge_hours(db, SPIKE - 2 * HOUR, SPIKE + 8 * HOUR, keep)
    if keep is not None:  # an hour's first check reads the hour that ended, nothing else
        with db.session() as s:
            keep.begin(s)
            detect_anomalies(s, policies(), SPIKE + 10 * HOUR + timedelta(minutes=5),
                             keep=keep)
        assert [z - a for _, a, z in keep.reads] == [HOUR]
    (run,) = rows(db)
    assert run.bucket_start.replace(tzinfo=UTC) == SPIKE
    assert run.buckets == 6
    assert run.last_bucket is not None and run.last_bucket.replace(tzinfo=UTC) == SPIKE + 5 * HOUR
    assert run.ended_at is not None and run.ended_at.replace(tzinfo=UTC) == SPIKE + 6 * HOUR
    # the impact is about 3 x $32.77 an hour for six hours, and the causes add up to it
    assert 6 * 3 * 32.77 * 0.9 < run.impact_micros / 1e6 < 6 * 3 * 32.77 * 1.1
    assert sum(c["delta_micros"] for c in run.causes) == run.impact_micros
    assert run.causes[0]["instance_type"] == "p4d.24xlarge"
    assert run.causes[0]["new_instances"] == ["i-p4d0", "i-p4d1", "i-p4d2"]
    assert "over 6 hours" in run.explanation
    # alerted as it opened, then each time its impact doubled (about 2x, 4x): three alerts
    # over six anomalous hours (the hours around it are normal), not six
    assert alerted[:3] == [False, False, True] and not any(alerted[8:])
    assert sum(alerted) == 3
    subjects = [a.subject for a in anomaly_alerts(db)]
    assert len(subjects) == 3
    assert [s.startswith("still growing") for s in subjects] == [False, True, True]


def test_an_acknowledged_anomaly_stays_quiet_for_the_rest_of_its_run(db: Database) -> None:
    steady(db, SPIKE + 10 * HOUR)
    spike(db, SPIKE, 6)
    judge_hours(db, SPIKE - HOUR, SPIKE)
    (run,) = rows(db)
    with db.session() as s:
        give_feedback(s, run.id or 0, "ack", SPIKE + HOUR)
    assert judge_hours(db, SPIKE + HOUR, SPIKE + 8 * HOUR) == [False] * 8
    (run,) = rows(db)
    assert (run.status, run.buckets) == ("acked", 6)
    assert len(anomaly_alerts(db)) == 1


def test_spend_back_to_normal_ends_it_and_a_later_spike_is_a_new_anomaly(db: Database) -> None:
    steady(db, SPIKE + 12 * HOUR)
    spike(db, SPIKE, 2)
    spike(db, SPIKE + 6 * HOUR, 2)
    judge_hours(db, SPIKE, SPIKE + 9 * HOUR)
    first, second = rows(db)
    assert (first.buckets, second.buckets) == (2, 2)
    assert first.ended_at is not None and first.ended_at.replace(tzinfo=UTC) == SPIKE + 2 * HOUR
    assert second.bucket_start.replace(tzinfo=UTC) == SPIKE + 6 * HOUR
    for run in (first, second):
        assert sum(c["delta_micros"] for c in run.causes) == run.impact_micros


def test_an_hour_left_unjudged_ends_the_run(db: Database) -> None:
    # the daemon was down for an hour: the run it was extending ends where it was last seen
    steady(db, SPIKE + 8 * HOUR)
    spike(db, SPIKE, 6)
    judge_hours(db, SPIKE, SPIKE + HOUR)
    judge_hours(db, SPIKE + 3 * HOUR, SPIKE + 3 * HOUR)
    first, second = rows(db)
    assert first.buckets == 2
    assert first.ended_at is not None and first.ended_at.replace(tzinfo=UTC) == SPIKE + 2 * HOUR
    assert second.bucket_start.replace(tzinfo=UTC) == SPIKE + 3 * HOUR


def test_a_new_store_has_no_anomalies_against_an_empty_past(db: Database) -> None:
    # the first hours of a store: before them is unknown, not $0 (the demo's first two days
    # used to be one long "anomaly" of everything against nothing), and nothing is judged
    # before a whole day of hours is known
    with db.session() as s:
        for h in range(8):
            add_interval(s, "i-first", SPIKE + h * HOUR, 1, 40.0, team="research")
    spike(db, SPIKE + 4 * HOUR, 4)
    assert judge_hours(db, SPIKE, SPIKE + 7 * HOUR) == [False] * 8
    assert rows(db) == []
