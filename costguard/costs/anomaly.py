"""Spend anomalies: each rule's dimension values against a robust seasonal baseline.

Each cycle judges the last complete bucket (day or hour) of every value of the rule's
dimension. An anomaly is stored once (rule, value, bucket), explained down to instance type,
region, instances and their idle state, and alerted through the outbox. Feedback teaches
the detector: `ack` closes the episode (the next buckets of the same run stay quiet), and
`expected` makes the new level normal: it joins the baseline, and buckets up to 10% above
it stay quiet for four weeks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, Table, func
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from costguard.alerts.outbox import enqueue
from costguard.costs.baseline import Season, judge
from costguard.costs.rollup import DAILY, RAW, bucket_key, day_floor, parse_bucket, rolled_up_until
from costguard.errors import CostguardError
from costguard.policy.schema import AnomalyRule, PolicySet
from costguard.report.queries import UNATTRIBUTED
from costguard.store.tables import AnomalyRow

EXPECTED_MEMORY = timedelta(days=28)
EXPECTED_HEADROOM = 1.10
_COLUMN = {"team": "team", "project": "project", "env": "env", "cost-center": "cost_center",
           "cost_center": "cost_center", "provider": "provider", "account": "account",
           "region": "region", "instance_type": "instance_type",
           "instance-type": "instance_type"}


class AnomalyNotFound(CostguardError, LookupError):
    def __init__(self, anomaly_id: int) -> None:
        super().__init__(f"No anomaly by the id of {anomaly_id} was found "
                         "(list them with `costguard anomaly list`)")


@dataclass(frozen=True)
class Anomaly:
    id: int
    rule: str
    value: str
    bucket: datetime
    actual_micros: int
    baseline_micros: int
    explanation: str
    alerted: bool


def last_complete_bucket(now: datetime, granularity: str) -> datetime:
    if granularity == "hour":
        return now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(
            hours=1)
    return day_floor(now) - timedelta(days=1)


def spend_series(session: Session, rule: AnomalyRule, since: datetime,
                 until: datetime) -> dict[str, dict[datetime, float]]:
    """Micro-dollars per dimension value per bucket in [since, until)."""
    column = _COLUMN.get(rule.dimension)
    if column is None:
        raise CostguardError(f"anomaly rule {rule.name!r}: dimension {rule.dimension!r} is "
                             "not kept with costs (use team, project, env, cost-center, "
                             "provider, account, region or instance_type)")
    out: dict[str, dict[datetime, float]] = defaultdict(dict)
    watermark = rolled_up_until(session) if rule.granularity == "day" else None
    raw_from = max(since, watermark) if watermark else since
    sources: list[tuple[Table, ColumnElement[datetime], datetime, datetime]] = [
        (RAW, RAW.c.start, raw_from, until)]
    if watermark is not None and since < watermark:
        sources.append((DAILY, DAILY.c.day, since, min(until, watermark)))
    for table, when, lo, hi in sources:
        if lo >= hi:
            continue
        key = bucket_key(session, when, rule.granularity)
        value = func.coalesce(table.c[column], UNATTRIBUTED)
        stmt = (sa_select(value, key, func.sum(table.c.cost_micros))
                .where(when >= lo, when < hi)
                .group_by(value, key))
        for v, bucket, micros in session.execute(stmt):
            b = parse_bucket(str(bucket))
            out[str(v)][b] = out[str(v)].get(b, 0.0) + float(micros or 0)
    return dict(out)


def detect_anomalies(session: Session, policy_set: PolicySet, now: datetime) -> list[Anomaly]:
    """Judge the last complete bucket of every rule; store, explain and alert new anomalies."""
    found: list[Anomaly] = []
    for rule in policy_set.anomalies:
        season = Season.for_granularity(rule.granularity)
        bucket = last_complete_bucket(now, rule.granularity)
        since = bucket - season.step * season.history
        series = spend_series(session, rule, since, bucket + season.step)
        feedback = _feedback(session, rule.name, since)
        for value, values in sorted(series.items()):
            if (value, bucket) in feedback["any"]:
                continue  # judged before
            verdict = judge(values, bucket, season, sensitivity=rule.sensitivity,
                            min_impact=rule.min_impact_usd * 1e6,
                            excluded=frozenset(b for v, b in feedback["exclude"] if v == value))
            if not verdict.anomalous:
                continue
            found.append(_record(session, rule, value, bucket, verdict.actual, verdict.baseline,
                                 season, now))
    return found


def _feedback(session: Session, rule: str, since: datetime) -> dict[str, set[tuple[str, datetime]]]:
    rows = session.exec(select(AnomalyRow).where(
        col(AnomalyRow.rule) == rule, col(AnomalyRow.bucket_start) >= since)).all()
    return {
        "any": {(r.value, r.bucket_start) for r in rows},
        # past anomalies stay out of baselines, unless someone said they were expected
        "exclude": {(r.value, r.bucket_start) for r in rows if r.status != "expected"},
    }


def _quiet_reason(rule: AnomalyRule, value: str, bucket: datetime, actual: float,
                  season: Season, session: Session) -> str | None:
    previous = session.exec(select(AnomalyRow).where(
        col(AnomalyRow.rule) == rule.name, col(AnomalyRow.value) == value,
        col(AnomalyRow.bucket_start) == bucket - season.step)).first()
    if previous is not None and previous.status in ("acked", "quiet"):
        return "quiet"  # the same run as an acknowledged anomaly
    expected = session.exec(select(AnomalyRow).where(
        col(AnomalyRow.rule) == rule.name, col(AnomalyRow.value) == value,
        col(AnomalyRow.status) == "expected",
        col(AnomalyRow.bucket_start) >= bucket - EXPECTED_MEMORY)).all()
    if any(actual <= e.actual_micros * EXPECTED_HEADROOM for e in expected):
        return "quiet"  # within what someone said to expect
    return None


def _record(session: Session, rule: AnomalyRule, value: str, bucket: datetime, actual: float,
            baseline: float, season: Season, now: datetime) -> Anomaly:
    from costguard.costs.explain import cause_lines, explain

    causes, text = explain(session, rule, value, bucket, season, actual - baseline, now)
    status = _quiet_reason(rule, value, bucket, actual, season, session) or "open"
    row = AnomalyRow(rule=rule.name, dimension=rule.dimension, value=value,
                     granularity=rule.granularity, bucket_start=bucket,
                     actual_micros=round(actual), baseline_micros=round(baseline),
                     impact_micros=round(actual - baseline), explanation=text, causes=causes,
                     status=status, detected_at=now)
    session.add(row)
    session.flush()
    alerted = False
    if status == "open":
        alerted = enqueue(
            session, dedupe_key=f"anomaly:{rule.name}:{value}:{bucket.isoformat()}",
            kind="anomaly", severity="warning", subject=text,
            body=(f"{text}\n" + "".join(f"{line}\n" for line in cause_lines(causes)) +
                  f"Usual for this {'weekday' if rule.granularity == 'day' else 'hour'}:"
                  f" ${baseline / 1e6:,.2f}; this {rule.granularity}: ${actual / 1e6:,.2f}.\n"
                  f"If this is fine: costguard anomaly expected {row.id}  "
                  f"(or ack {row.id} to silence this run)"),
            now=now, policy=rule.name, team=value if rule.dimension == "team" else None,
            context={"anomaly_id": row.id, "rule": rule.name, "value": value,
                     "bucket": bucket.isoformat(), "causes": causes})
    return Anomaly(id=row.id or 0, rule=rule.name, value=value, bucket=bucket,
                   actual_micros=row.actual_micros, baseline_micros=row.baseline_micros,
                   explanation=text, alerted=alerted)


def give_feedback(session: Session, anomaly_id: int, verdict: str, now: datetime) -> AnomalyRow:
    """Record `ack` (handled; silence this run) or `expected` (new normal) on an anomaly."""
    row = session.get(AnomalyRow, anomaly_id)
    if row is None:
        raise AnomalyNotFound(anomaly_id)
    row.status = {"ack": "acked", "expected": "expected"}[verdict]
    row.feedback_at = now
    session.add(row)
    return row
