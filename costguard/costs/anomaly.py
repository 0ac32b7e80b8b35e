"""Spend anomalies: each rule's dimension values against a robust seasonal baseline.

Each cycle judges the last complete bucket (day or hour) of every value of the rule's
dimension. As AWS Cost Anomaly Detection does, a continuing deviation is one anomaly: it
opens on the first anomalous bucket, each next anomalous bucket extends it (its spend, usual
spend and impact are sums over its buckets; its causes, down to instance type, region,
instances and their idle state, add up to its impact), and it ends at the first bucket back
to normal. It is alerted through the outbox when it opens and again each time its impact
doubles, never every hour. Feedback teaches the detector: `ack` silences the rest of the
run, and `expected` makes the new level normal: it joins the baseline, and buckets up to
10% above it stay quiet for four weeks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Table, func
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, or_, select

from costguard.alerts.outbox import enqueue
from costguard.clock import utc
from costguard.costs.attribution import UNATTRIBUTED
from costguard.costs.baseline import Season, judge
from costguard.costs.rollup import DAILY, RAW, bucket_key, day_floor, parse_bucket, rolled_up_until
from costguard.errors import CostguardError
from costguard.policy.schema import AnomalyRule, PolicySet
from costguard.store.tables import AnomalyRow

if TYPE_CHECKING:
    from costguard.costs.anomaly_series import SeriesKeep

EXPECTED_MEMORY = timedelta(days=28)
EXPECTED_HEADROOM = 1.10
GROWTH_REALERT = 2.0  # an open anomaly is alerted again each time its impact doubles
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


# dimension value -> bucket -> micro-dollars
Series = dict[str, dict[datetime, float]]


def spend_series(session: Session, rule: AnomalyRule, since: datetime,
                 until: datetime) -> Series:
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


def detect_anomalies(session: Session, policy_set: PolicySet, now: datetime, *,
                     keep: SeriesKeep | None = None) -> list[Anomaly]:
    """Judge the last complete bucket of every rule's values: open an anomaly, extend the
    one still going on, or end it when spend is back to normal. Returns the anomalies that
    were opened or grew this time. `keep`: the series kept from the last check (the engine's:
    costs/anomaly_series.py; `begin` it first), else read whole."""
    found: list[Anomaly] = []
    # buckets before the store's first cost are unknown, not $0; nothing is judged until a
    # whole season is known: a new store's first days are never anomalous
    first = _first_cost(session) if policy_set.anomalies else None
    for rule in policy_set.anomalies:
        season = Season.for_granularity(rule.granularity)
        bucket = last_complete_bucket(now, rule.granularity)
        if first is None or bucket - first < season.step * season.period:
            continue  # less than one season (a day of hours, a week of days) is known
        since = bucket - season.step * season.history
        series = (spend_series(session, rule, since, bucket + season.step) if keep is None
                  else keep.series(session, rule, since, bucket + season.step))
        runs = _runs(session, rule.name, since)
        going = {r.value: r for r in runs if r.ended_at is None}
        past = [bucket - season.step * k for k in range(1, season.history + 1)]
        unknown = frozenset(b for b in past if b + season.step <= first)
        for value in sorted(set(series) | set(going)):
            run = going.get(value)
            if run is not None and _last(run) >= bucket:
                continue  # judged before
            if run is not None and _last(run) < bucket - season.step:
                _end(session, run, _last(run) + season.step)  # a bucket went unjudged
                run = None
            values = series.get(value, {})
            excluded = unknown | frozenset(b for r in runs if r.value == value
                                           and r.status != "expected"
                                           for b in _buckets(r, season))
            verdict = judge(values, bucket, season, sensitivity=rule.sensitivity,
                            min_impact=rule.min_impact_usd * 1e6, excluded=excluded)
            if not verdict.anomalous:
                if run is not None:
                    _end(session, run, bucket)  # spend came back to normal
                continue
            if run is None:
                found.append(_open(session, rule, value, bucket, verdict.actual,
                                   verdict.baseline, season, now))
            else:
                found.append(_extend(session, rule, run, bucket, verdict.actual,
                                     verdict.baseline, season, now))
    return found


def anomalies_since(session: Session, start: datetime) -> list[AnomalyRow]:
    """Every anomaly run reaching into [start, now), newest first (`anomaly list`, the
    console's anomalies page and API)."""
    return list(session.exec(select(AnomalyRow).where(or_(
        col(AnomalyRow.bucket_start) >= start, col(AnomalyRow.last_bucket) >= start,
    )).order_by(col(AnomalyRow.bucket_start).desc())))


def anomaly_json(r: AnomalyRow, *, causes: bool = False) -> dict[str, Any]:
    """One anomaly as `anomaly list --format json` writes it (`causes`: as `show` does)."""
    last = r.last_bucket or r.bucket_start
    out: dict[str, Any] = {
        "id": r.id, "rule": r.rule, "dimension": r.dimension, "value": r.value,
        "granularity": r.granularity, "bucket_start": r.bucket_start.isoformat(),
        "last_bucket": last.isoformat(), "buckets": r.buckets,
        "ended_at": r.ended_at.isoformat() if r.ended_at else None,
        "ongoing": r.ended_at is None,
        "actual_usd": r.actual_micros / 1e6, "baseline_usd": r.baseline_micros / 1e6,
        "impact_usd": r.impact_micros / 1e6, "status": r.status,
        "explanation": r.explanation}
    if causes:
        out["causes"] = list(r.causes or [])
    return out


def _first_cost(session: Session) -> datetime | None:
    """When the store's cost history begins (raw intervals or their daily rollup)."""
    firsts = [session.execute(sa_select(func.min(RAW.c.start))).scalar(),
              session.execute(sa_select(func.min(DAILY.c.day))).scalar()]
    known = [utc(f) if isinstance(f, datetime) else parse_bucket(str(f))
             for f in firsts if f is not None]
    return min(known, default=None)


def _last(run: AnomalyRow) -> datetime:
    return run.last_bucket or run.bucket_start


def _buckets(run: AnomalyRow, season: Season) -> list[datetime]:
    out, b = [], run.bucket_start
    while b <= _last(run):
        out.append(b)
        b += season.step
    return out


def _runs(session: Session, rule: str, since: datetime) -> list[AnomalyRow]:
    """The rule's anomalies that reach into [since, ...) or are still going on."""
    return list(session.exec(select(AnomalyRow).where(
        col(AnomalyRow.rule) == rule,
        or_(col(AnomalyRow.ended_at).is_(None), col(AnomalyRow.last_bucket) >= since,
            col(AnomalyRow.bucket_start) >= since))))


def _end(session: Session, run: AnomalyRow, at: datetime) -> None:
    run.ended_at = at
    session.add(run)


def _expected(rule: AnomalyRule, value: str, bucket: datetime, actual: float,
              session: Session) -> bool:
    """Within 10% of a level someone marked expected in the last four weeks."""
    expected = session.exec(select(AnomalyRow).where(
        col(AnomalyRow.rule) == rule.name, col(AnomalyRow.value) == value,
        col(AnomalyRow.status) == "expected",
        col(AnomalyRow.bucket_start) >= bucket - EXPECTED_MEMORY)).all()
    return any(actual <= e.actual_micros / max(e.buckets, 1) * EXPECTED_HEADROOM
               for e in expected)


def _open(session: Session, rule: AnomalyRule, value: str, bucket: datetime, actual: float,
          baseline: float, season: Season, now: datetime) -> Anomaly:
    from costguard.costs.explain import explain, headline

    causes = explain(session, rule, value, bucket, season, actual, baseline, now)
    impact = round(actual) - round(baseline)
    status = "quiet" if _expected(rule, value, bucket, actual, session) else "open"
    row = AnomalyRow(rule=rule.name, dimension=rule.dimension, value=value,
                     granularity=rule.granularity, bucket_start=bucket, last_bucket=bucket,
                     buckets=1, actual_micros=round(actual), baseline_micros=round(baseline),
                     impact_micros=impact,
                     explanation=headline(rule, value, impact, 1, causes, now), causes=causes,
                     status=status, detected_at=now)
    session.add(row)
    session.flush()
    alerted = status == "open" and _alert(session, rule, row, now, grew_from=None)
    return _anomaly(row, alerted)


def _extend(session: Session, rule: AnomalyRule, run: AnomalyRow, bucket: datetime,
            actual: float, baseline: float, season: Season, now: datetime) -> Anomaly:
    """One more anomalous bucket of a run: its sums, causes and headline grow; alerted again
    (if open) once its impact has doubled since it was last alerted."""
    from costguard.costs.explain import explain, headline, merge_causes

    causes = explain(session, rule, run.value, bucket, season, actual, baseline, now)
    run.causes = merge_causes(list(run.causes or []), causes)
    run.actual_micros += round(actual)
    run.baseline_micros += round(baseline)
    run.impact_micros += round(actual) - round(baseline)
    run.buckets += 1
    run.last_bucket = bucket
    run.explanation = headline(rule, run.value, run.impact_micros, run.buckets, run.causes, now)
    session.add(run)
    session.flush()
    grew = (run.status == "open" and run.alerted_impact_micros > 0
            and run.impact_micros >= GROWTH_REALERT * run.alerted_impact_micros)
    alerted = grew and _alert(session, rule, run, now, grew_from=run.alerted_impact_micros)
    return _anomaly(run, alerted)


def _alert(session: Session, rule: AnomalyRule, row: AnomalyRow, now: datetime, *,
           grew_from: int | None) -> bool:
    from costguard.costs.explain import cause_lines

    unit = "weekday" if rule.granularity == "day" else "hour"
    last = _last(row)
    key = f"anomaly:{rule.name}:{row.value}:{row.bucket_start.isoformat()}"
    subject = row.explanation
    lead = ""
    if grew_from is not None:
        key += f":grew:{last.isoformat()}"
        subject = f"still growing: {row.explanation}"
        lead = (f"Anomaly {row.id} has gone on since {row.bucket_start:%Y-%m-%d %H:%M} UTC "
                f"({row.buckets} {rule.granularity}s): its impact is now "
                f"${row.impact_micros / 1e6:,.2f}, ${grew_from / 1e6:,.2f} when last alerted.\n")
    sent = enqueue(
        session, dedupe_key=key, kind="anomaly", severity="warning", subject=subject,
        body=(lead + f"{row.explanation}\n" +
              "".join(f"{line}\n" for line in cause_lines(list(row.causes or []))) +
              f"Usual for {'this ' + unit if row.buckets == 1 else 'these ' + unit + 's'}: "
              f"${row.baseline_micros / 1e6:,.2f}; spent: ${row.actual_micros / 1e6:,.2f}.\n"
              f"If this is fine: costguard anomaly expected {row.id}  "
              f"(or ack {row.id} to silence the rest of it)"),
        now=now, policy=rule.name, team=row.value if rule.dimension == "team" else None,
        context={"anomaly_id": row.id, "rule": rule.name, "value": row.value,
                 "bucket": row.bucket_start.isoformat(), "last_bucket": last.isoformat(),
                 "impact_usd": row.impact_micros / 1e6, "causes": row.causes})
    if sent:
        row.alerted_impact_micros = row.impact_micros
        session.add(row)
    return sent


def _anomaly(row: AnomalyRow, alerted: bool) -> Anomaly:
    return Anomaly(id=row.id or 0, rule=row.rule, value=row.value, bucket=row.bucket_start,
                   actual_micros=row.actual_micros, baseline_micros=row.baseline_micros,
                   explanation=row.explanation, alerted=alerted)


def give_feedback(session: Session, anomaly_id: int, verdict: str, now: datetime) -> AnomalyRow:
    """Record `ack` (handled; silence this run) or `expected` (new normal) on an anomaly."""
    row = session.get(AnomalyRow, anomaly_id)
    if row is None:
        raise AnomalyNotFound(anomaly_id)
    row.status = {"ack": "acked", "expected": "expected"}[verdict]
    row.feedback_at = now
    session.add(row)
    return row
