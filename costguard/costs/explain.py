"""Why a dimension value spent more: the instance types, regions and instances behind it.

The anomalous bucket's usual spend is shared out over (instance type, region) groups by their
share of the season before it (the previous week of days, or day of hours); the groups that
spent most above their share are named with their new instances (no cost in the history
before that season) and those of them that sat idle, and since when; for a rule on any
other dimension than team, also the team(s) those instances belong to. What is left is one
"everything else" cause, so the causes add up to the impact. The causes (stored with the
anomaly, and in its alert) list the instance ids; a run of buckets sums them.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session

from costguard.costs.attribution import UNATTRIBUTED
from costguard.costs.baseline import Season
from costguard.policy.schema import AnomalyRule
from costguard.report.facts import facts

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
            actual: float, baseline: float, now: datetime) -> list[dict[str, Any]]:
    """The causes of `value`'s spend of `actual` against a usual `baseline` in `bucket`.

    The baseline is shared out over (instance type, region) groups by their share of the
    season before (or of this bucket, when there was nothing before); each group's cause is
    what it spent above its share. The two groups that grew most are named; what is left of
    the impact is one "everything else" cause, so the causes always add up to the impact
    (`delta_micros`, exactly: round(actual) - round(baseline)).
    """
    now_full = _instance_rows(session, rule, value, bucket, bucket + season.step)
    now_rows = {i: r[:4] for i, r in now_full.items()}
    before_lo = bucket - season.step * season.period
    before_rows = _instances(session, rule, value, before_lo, bucket)
    groups: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for itype, region, cost, _ in now_rows.values():
        groups[(itype, region)][0] += cost
    for itype, region, cost, _ in before_rows.values():
        groups[(itype, region)][1] += cost / season.period
    before_total = sum(b for _, b in groups.values())
    now_total = sum(n for n, _ in groups.values())
    impact = round(actual) - round(baseline)

    def share(now_cost: float, before_cost: float) -> float:
        if before_total > 0:
            return baseline * before_cost / before_total
        return baseline * now_cost / now_total if now_total > 0 else 0.0

    # "new": no cost in the history before the last season (launched within the last week)
    older = _instances(session, rule, value, bucket - season.step * season.history, before_lo)
    ranked = sorted(((key, n - share(n, b)) for key, (n, b) in groups.items()),
                    key=lambda kv: (-kv[1], kv[0]))
    causes: list[dict[str, Any]] = []
    for (itype, region), delta in ranked[:2]:
        if delta <= 0 or (causes and delta < 0.25 * impact):
            break
        ids = {i for i, r in now_rows.items() if (r[0], r[1]) == (itype, region)}
        new = sorted(i for i in ids if i not in older)
        idle = sorted(i for i in (new or sorted(ids))
                      if now_rows[i][3] >= IDLE_SHARE * now_rows[i][2] > 0)
        since = _idle_since(session, rule, value, set(idle), bucket) if idle else None
        teams = sorted({now_full[i][4] for i in (new or ids)})
        causes.append({"instance_type": itype, "region": region, "teams": teams,
                       "delta_micros": round(delta), "delta_usd": round(delta / 1e6, 2),
                       "instances": sorted(ids), "new_instances": new,
                       "idle_instances": idle,
                       "idle_since": since.isoformat() if since else None})
    rest = impact - sum(c["delta_micros"] for c in causes)
    if rest != 0 or not causes:
        causes.append(_rest(rest))
    return causes


def _rest(micros: int) -> dict[str, Any]:
    return {"instance_type": None, "region": None, "rest": True, "delta_micros": micros,
            "delta_usd": round(micros / 1e6, 2), "teams": [], "instances": [],
            "new_instances": [], "idle_instances": [], "idle_since": None}


def merge_causes(run: list[dict[str, Any]], more: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The causes of a run of buckets: the same (instance type, region) summed; the
    "everything else" cause kept last. Deltas still add up to the run's impact."""
    def micros(c: dict[str, Any]) -> int:  # causes stored before 0008 have dollars only
        return int(c.get("delta_micros", round(float(c.get("delta_usd", 0)) * 1e6)))

    by_key: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    for c in [*run, *more]:
        key = (None, None) if c.get("rest") else (c["instance_type"], c["region"])
        have = by_key.get(key)
        if have is None:
            by_key[key] = {**c, "delta_micros": micros(c)}
            continue
        have["delta_micros"] += micros(c)
        for field in ("teams", "instances", "new_instances", "idle_instances"):
            have[field] = sorted(set(have.get(field) or []) | set(c.get(field) or []))
        sinces = [x for x in (have.get("idle_since"), c.get("idle_since")) if x]
        have["idle_since"] = min(sinces) if sinces else None
    for c in by_key.values():
        c["delta_usd"] = round(c["delta_micros"] / 1e6, 2)
    named = sorted((c for k, c in by_key.items() if k != (None, None)),
                   key=lambda c: (-c["delta_micros"], c["instance_type"], c["region"]))
    rest = by_key.get((None, None))
    return [*named, *([rest] if rest is not None and rest["delta_micros"] != 0 else [])]


def headline(rule: AnomalyRule, value: str, impact_micros: int, buckets: int,
             causes: list[dict[str, Any]], now: datetime) -> str:
    """One line: the value, its impact (over how long) and its named causes."""
    unit = "day" if rule.granularity == "day" else "hour"
    span = f"/{unit}" if buckets == 1 else f" over {buckets} {unit}s"
    head = f"{rule.dimension} {value} +${impact_micros / 1e6:,.0f}{span}"
    phrases = []
    for c in [c for c in causes if not c.get("rest")][:2]:  # the two that grew most
        new, idle = c.get("new_instances") or [], c.get("idle_instances") or []
        phrase = (f"{len(new)} new {c['instance_type']} in {c['region']}" if new
                  else f"{c['instance_type']} in {c['region']} +${c['delta_micros'] / 1e6:,.0f}")
        teams = c.get("teams") or []
        if rule.dimension != "team" and teams:
            phrase += f" ({'team' if len(teams) == 1 else 'teams'} {', '.join(teams[:3])}"
            phrase += f" +{len(teams) - 3})" if len(teams) > 3 else ")"
        if idle:
            who = "of them " if new else "instances "
            phrase += f", {len(idle)} {who}idle"
            if c.get("idle_since"):
                since = datetime.fromisoformat(c["idle_since"])
                phrase += f" since {since:%A}" if now - since < timedelta(days=7) else (
                    f" since {since:%Y-%m-%d}")
        phrases.append(phrase)
    if not phrases:
        phrases.append("spread over many instances")
    return f"{head}: {'; '.join(phrases)}"


def cause_lines(causes: list[dict[str, Any]], limit: int = 8) -> list[str]:
    """The causes as lines that name their instances (for alerts and `anomaly show`)."""
    def ids(items: list[str]) -> str:
        more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
        return ", ".join(items[:limit]) + more

    lines = []
    for c in causes:
        if c.get("rest"):
            micros = int(c.get("delta_micros", 0))
            lines.append(f"- everything else: {'+' if micros >= 0 else '-'}"
                         f"${abs(micros) / 1e6:,.2f} against the usual")
            continue
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
