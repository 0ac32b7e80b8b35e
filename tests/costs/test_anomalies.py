"""Anomaly detection: planted anomalies on six months of weekly-seasonal noise, root causes
named down to instances and idle state, and feedback that quiets what is expected."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from sqlmodel import col, select

from costguard.costs.anomaly import detect_anomalies, give_feedback
from costguard.costs.baseline import Season, scan
from costguard.policy.schema import AnomalyRule, Attribution, PolicySet
from costguard.store.db import Database
from costguard.store.tables import AlertRow, AnomalyRow
from tests.costs.fleet import add_interval

START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
DAYS = 240  # two months of warm-up, then six months judged
MIN_IMPACT = 200.0


def noisy_week(rng: random.Random, base: float) -> dict[datetime, float]:
    series = {}
    for d in range(DAYS):
        day = START + timedelta(days=d)
        weekly = 1.0 if day.weekday() < 5 else 0.45
        series[day] = max(0.0, base * weekly * (1 + rng.gauss(0, 0.08)))
    return series


def test_planted_anomalies_are_all_found_and_noise_rarely_alerts() -> None:
    rng = random.Random(7)
    season = Season.for_granularity("day")
    judged = [START + timedelta(days=d) for d in range(60, DAYS)]
    teams, false_positives, planted_total = 12, 0, 0
    for _ in range(teams):
        base = rng.uniform(3_000, 15_000)
        series = noisy_week(rng, base)
        planted = set(rng.sample(judged, 4))
        for day in planted:
            # an excess well over the impact floor and the day's usual spread
            series[day] += max(MIN_IMPACT * 2, base * rng.uniform(0.5, 1.5))
        planted_total += len(planted)
        found = {v.bucket for v in scan(series, judged, season, sensitivity=3.0,
                                        min_impact=MIN_IMPACT)}
        assert planted <= found, f"missed {sorted(planted - found)}"
        false_positives += len(found - planted)
    months = len(judged) / 30
    assert false_positives / teams / months < 1.0
    assert planted_total == 4 * teams


def test_small_excesses_below_the_impact_floor_are_ignored() -> None:
    series = {START + timedelta(days=d): 100.0 for d in range(70)}
    day = START + timedelta(days=69)
    series[day] = 250.0  # 2.5x, but only $150
    assert scan(series, [day], Season.for_granularity("day"), sensitivity=3.0,
                min_impact=MIN_IMPACT) == []


def policies() -> PolicySet:
    return PolicySet(
        attribution=Attribution.model_validate({"dimensions": {"team": {"keys": ["team"]}}}),
        anomalies=(AnomalyRule(name="team-daily", dimension="team", min_impact_usd=500),))


FIRST = datetime(2026, 9, 7, tzinfo=UTC)  # Monday; 8 weeks of history
SPIKE = FIRST + timedelta(days=59)  # Thursday Nov 5


def plant_p4d_launch(db: Database) -> None:
    """Research's usual g5 fleet, and six p4d launched on Tuesday Nov 3, four idle."""
    rng = random.Random(3)
    with db.session() as s:
        for d in range(60):
            day = FIRST + timedelta(days=d)
            for i in range(4):  # research's usual g5 fleet, ~$1,000/day
                add_interval(s, f"i-base{i}", day, 24, 10.4 * (1 + rng.gauss(0, 0.03)),
                             team="research", itype="g5.12xlarge", gpus=4)
            add_interval(s, "i-vision", day, 24, 5.0, team="vision", itype="g5.xlarge", gpus=1)
        for n in range(6):  # six p4d launched on Tuesday Nov 3, four idle from the start
            for d in (57, 58, 59):
                add_interval(s, f"i-p4d{n}", FIRST + timedelta(days=d), 24, 32.77,
                             team="research", itype="p4d.24xlarge", idle=n < 4)


def test_anomaly_names_new_instances_their_type_region_and_idle_since(db: Database) -> None:
    plant_p4d_launch(db)
    spike = SPIKE
    now = spike + timedelta(days=1, minutes=5)
    with db.session() as s:
        found = detect_anomalies(s, policies(), now)
    assert [(a.value, a.bucket) for a in found] == [("research", spike)]
    text = found[0].explanation
    assert text.startswith("team research +$")
    assert "6 new p4d.24xlarge in us-east-1, 4 of them idle since Tuesday" in text
    with db.session() as s:
        assert detect_anomalies(s, policies(), now) == []  # judged once
        alerts = s.exec(select(AlertRow).where(AlertRow.kind == "anomaly")).all()
        assert [a.subject for a in alerts] == [text]
        give_feedback(s, found[0].id, "expected", now)
    with db.session() as s:  # the next day at the same level stays quiet: it was expected
        for n in range(6):
            add_interval(s, f"i-p4d{n}", spike + timedelta(days=1), 24, 32.77,
                         team="research", itype="p4d.24xlarge", idle=n < 4)
        for i in range(4):
            add_interval(s, f"i-base{i}", spike + timedelta(days=1), 24, 10.4,
                         team="research", itype="g5.12xlarge", gpus=4)
    with db.session() as s:
        again = detect_anomalies(s, policies(), now + timedelta(days=1))
        rows = s.exec(select(AnomalyRow).order_by(col(AnomalyRow.bucket_start))).all()
        n_alerts = len(s.exec(select(AlertRow).where(AlertRow.kind == "anomaly")).all())
    # one anomaly, two days long: the run someone said to expect goes on, unalerted
    assert [(r.status, r.buckets, r.ended_at) for r in rows] == [("expected", 2, None)]
    assert [a.alerted for a in again] == [False] and n_alerts == 1


def test_causes_name_the_instances_and_other_dimensions_name_the_team(db: Database) -> None:
    plant_p4d_launch(db)
    by_account = PolicySet(anomalies=(AnomalyRule(
        name="account-daily", dimension="account", min_impact_usd=500),))
    with db.session() as s:
        found = detect_anomalies(s, by_account, SPIKE + timedelta(days=1, minutes=5))
        alert = s.exec(select(AlertRow).where(AlertRow.kind == "anomaly")).one()
        row = s.exec(select(AnomalyRow)).one()
    assert [a.value for a in found] == ["111111111111"]
    assert ("6 new p4d.24xlarge in us-east-1 (team research), 4 of them idle since Tuesday"
            in found[0].explanation)
    p4d = [f"i-p4d{n}" for n in range(6)]
    cause = row.causes[0]
    assert (cause["teams"], cause["new_instances"], cause["idle_instances"]) == (
        ["research"], p4d, p4d[:4])
    assert cause["idle_since"].startswith("2026-11-03")
    assert "- p4d.24xlarge in us-east-1 (research): +$" in alert.body
    assert f"new: {', '.join(p4d)}; idle since 2026-11-03: {', '.join(p4d[:4])}" in alert.body

    from typer.testing import CliRunner

    from costguard.costs.commands import anomaly_app

    shown = CliRunner().invoke(anomaly_app, ["show", str(row.id)],
                               env={"COSTGUARD_DATABASE_URL": db.engine.url.render_as_string(
                                   hide_password=False)})
    assert shown.exit_code == 0, shown.output
    assert found[0].explanation in shown.output
    assert f"idle since 2026-11-03: {', '.join(p4d[:4])}" in shown.output
    assert f"costguard anomaly expected {row.id}" in shown.output
    missing = CliRunner().invoke(anomaly_app, ["show", "999"], env={
        "COSTGUARD_DATABASE_URL": db.engine.url.render_as_string(hide_password=False)})
    assert missing.exit_code == 2 and "No anomaly by the id of 999" in missing.output
