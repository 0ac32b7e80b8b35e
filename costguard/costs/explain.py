"""Why a dimension value spent more: the instance types, regions and instances behind it.

The anomalous bucket is compared with the average of the season before it (the previous
week of days, or day of hours) per (instance type, region); the group that grew most is
named with its new instances (no cost in the history before that season) and those of them
that sat idle, and since when; for a rule on any other dimension than team, also the team(s)
those instances belong to. The causes (stored with the anomaly, and in its alert) list the
instance ids.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session

from costguard.costs.baseline import Season
from costguard.policy.schema import AnomalyRule
from costguard.report.queries import UNATTRIBUTED, facts

IDLE_SHARE = 0.5
_COLUMN = {"team": "team", "project": "project", "env": "env", "cost-center": "cost_center",
           "cost_center": "cost_center", "provider": "provider", "account": "account",
           "region": "region", "instance_type": "instance_type",
           "instance-type": "instance_type"}


def _instances(session: Session, rule: AnomalyRule, value: str, lo: datetime,
               hi: datetime) -> dict[str, tuple[str, str, int, int]]:
    """instance id -> (instance type, region, cost, idle cost) in [lo, hi)."""
    return {i: r[:4] for i, r in _instance_rows(session, rule, value, lo, hi).items()}


def _instance_rows(session: Session, rule: AnomalyRule, value: str, lo: datetime,
                   hi: datetime) -> dict[str, tuple[str, str, int, int, str]]:
    """instance id -> (instance type, region, cost, idle cost, team) in [lo, hi)."""
    f = facts(session, lo, hi)
    dim = func.coalesce(f.c[_COLUMN[rule.dimension]], UNATTRIBUTED)
    stmt = (select(f.c.instance_id, func.max(f.c.instance_type), func.max(f.c.region),
                   func.sum(f.c.cost_micros), func.sum(f.c.idle_cost_micros),
                   func.max(func.coalesce(f.c.team, UNATTRIBUTED)))
            .where(dim == value).group_by(f.c.instance_id))
    return {str(i): (str(t), str(r), int(c or 0), int(ic or 0), str(team))
            for i, t, r, c, ic, team in session.execute(stmt)}


def _idle_since(session: Session, rule: AnomalyRule, value: str, ids: set[str],
                bucket: datetime) -> datetime | None:
    """The earliest day from which all of `ids` have been idle (at most a week back)."""
    since: datetime | None = None
    day = bucket.replace(hour=0, minute=0, second=0, microsecond=0)
    for _ in range(7):
        per = _instances(session, rule, value, day, day + timedelta(days=1))
        idle = [per[i] for i in ids if i in per]
        if not idle or any(ic < IDLE_SHARE * c or c == 0 for _, _, c, ic in idle):
            break
        since = day
        day -= timedelta(days=1)
    return since


def explain(session: Session, rule: AnomalyRule, value: str, bucket: datetime, season: Season,
            impact: float, now: datetime) -> tuple[list[dict[str, Any]], str]:
    """(causes, one-line explanation) of an anomaly of `value` in `bucket`."""
    now_full = _instance_rows(session, rule, value, bucket, bucket + season.step)
    now_rows = {i: r[:4] for i, r in now_full.items()}
    before_lo = bucket - season.step * season.period
    before_rows = _instances(session, rule, value, before_lo, bucket)
    groups: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for itype, region, cost, _ in now_rows.values():
        groups[(itype, region)][0] += cost
    for itype, region, cost, _ in before_rows.values():
        groups[(itype, region)][1] += cost / season.period
    # "new": no cost in the history before the last season (launched within the last week)
    older = _instances(session, rule, value, bucket - season.step * season.history, before_lo)
    ranked = sorted(groups.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))
    unit = "day" if rule.granularity == "day" else "hour"
    head = f"{rule.dimension} {value} +${impact / 1e6:,.0f}/{unit}"
    causes: list[dict[str, Any]] = []
    phrases: list[str] = []
    for (itype, region), (cost_now, cost_before) in ranked[:2]:
        delta = cost_now - cost_before
        if delta <= 0 or (causes and delta < 0.25 * impact):
            break
        ids = {i for i, r in now_rows.items() if (r[0], r[1]) == (itype, region)}
        new = sorted(i for i in ids if i not in older)
        idle = sorted(i for i in (new or sorted(ids))
                      if now_rows[i][3] >= IDLE_SHARE * now_rows[i][2] > 0)
        since = _idle_since(session, rule, value, set(idle), bucket) if idle else None
        teams = sorted({now_full[i][4] for i in (new or ids)})
        phrase = (f"{len(new)} new {itype} in {region}" if new
                  else f"{itype} in {region} +${delta / 1e6:,.0f}")
        if rule.dimension != "team":
            phrase += f" ({'team' if len(teams) == 1 else 'teams'} {', '.join(teams[:3])}"
            phrase += f" +{len(teams) - 3})" if len(teams) > 3 else ")"
        if idle:
            who = "of them " if new else "instances "
            phrase += f", {len(idle)} {who}idle"
            if since is not None:
                phrase += f" since {since:%A}" if now - since < timedelta(days=7) else (
                    f" since {since:%Y-%m-%d}")
        phrases.append(phrase)
        causes.append({"instance_type": itype, "region": region, "teams": teams,
                       "delta_usd": round(delta / 1e6, 2), "instances": sorted(ids),
                       "new_instances": new,
                       "idle_instances": idle,
                       "idle_since": since.isoformat() if since else None})
    if not phrases:
        phrases.append("spread over many instances")
    return causes, f"{head}: {'; '.join(phrases)}"


def cause_lines(causes: list[dict[str, Any]], limit: int = 8) -> list[str]:
    """The causes as lines that name their instances (for alerts and `anomaly show`)."""
    def ids(items: list[str]) -> str:
        more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
        return ", ".join(items[:limit]) + more

    lines = []
    for c in causes:
        teams = c.get("teams") or []
        line = (f"- {c['instance_type']} in {c['region']}"
                f"{' (' + ', '.join(teams) + ')' if teams else ''}: "
                f"+${c['delta_usd']:,.2f} against the usual")
        if c.get("new_instances"):
            line += f"; new: {ids(c['new_instances'])}"
        elif c.get("instances"):
            line += f"; instances: {ids(c['instances'])}"
        if c.get("idle_instances"):
            since = f" since {c['idle_since'][:10]}" if c.get("idle_since") else ""
            line += f"; idle{since}: {ids(c['idle_instances'])}"
        lines.append(line)
    return lines
