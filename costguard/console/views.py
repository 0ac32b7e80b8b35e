"""What each console page and API answer shows, read through the queries the CLI uses.

Every figure comes from the same function as its command: spend from `spend_report` (as
`costguard report --format json`), an instance from `explain`, recommendations from
`recommend`, anomalies and budgets from `anomaly list` / `budget status`, the audit log
from `audit_events`; pending actions from `pending_actions`. Nothing here computes a
figure of its own: a page and the CLI cannot disagree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from costguard.clock import utc
from costguard.config import Settings
from costguard.costs.attribution import UNATTRIBUTED
from costguard.costs.rollup import day_floor
from costguard.errors import CostguardError
from costguard.policy.schema import PolicySet
from costguard.report import charts
from costguard.report.queries import daily_series
from costguard.report.render import report_doc
from costguard.report.run import (
    ReportArgumentError,
    parse_filters,
    parse_when,
    reservation_lines,
    spend_report,
    standing_lines,
    with_standing,
)

DEFAULT_WINDOW = "7d"
MAX_WINDOW = timedelta(days=400)
ACTIVITY_SPAN = timedelta(hours=24)


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime
    label: str  # what the person asked for: "7d", or "2026-11-01 → 2026-11-08"
    to_now: bool = True  # no `until` asked: the window runs up to now, what just happened too


def window_of(params: Mapping[str, str], now: datetime) -> Window:
    """`window=7d` (back from now), or `since=`/`until=` (durations or dates), as the
    report's --since/--until read them. Raises ReportArgumentError with what would work."""
    until = parse_when(params["until"], now, "until") if params.get("until") else now
    if params.get("since"):
        since = parse_when(params["since"], now, "since")
        label = f"{since:%Y-%m-%d %H:%M} → {until:%Y-%m-%d %H:%M}"
    else:
        text = params.get("window") or DEFAULT_WINDOW
        since = parse_when(text, until, "window")
        label = text
    if since >= until:
        raise ReportArgumentError(f"since ({since:%Y-%m-%d %H:%M}) must be before until "
                                  f"({until:%Y-%m-%d %H:%M})")
    if until - since > MAX_WINDOW:
        raise ReportArgumentError(f"a window of at most {MAX_WINDOW.days} days, please")
    return Window(since, until, label, to_now=not params.get("until"))


def days_of(since: datetime, until: datetime) -> list[datetime]:
    out, day = [], day_floor(since)
    while day < until:
        out.append(day)
        day += timedelta(days=1)
    return out


def spend_doc(s: Session, settings: Settings, win: Window, by: list[str],
              filters: Mapping[str, str] | list[str] | None = None) -> dict[str, Any]:
    """`costguard report --by ... --since ... --until ... --format json`, as a document,
    without its `waste_beyond_idle` (which judges a week of readings afresh: seconds on a
    big fleet; the console shows the verdicts the cycle stored, `underused`)."""
    wanted = parse_filters(filters)
    report = spend_report(s, settings, by, win.since, win.until, wanted, waste=False)
    return with_standing(report_doc(report), standing_lines(s, wanted, win.until),
                         reservation_lines(s, wanted, win.since, win.until))


def underused(s: Session, settings: Settings, now: datetime) -> dict[str, Any]:
    """Waste beyond idle as the cycle judged it (the stored verdicts, at most a day old):
    the figures of the `costguard_underused_*` metrics."""
    from costguard.recommend.stored import underused_by_team

    teams = underused_by_team(s, settings.recommend, now)
    return {"spend_usd": round(sum(usd for usd, _, _ in teams.values()), 2),
            "monthly_savings_usd": round(sum(save for _, save, _ in teams.values()), 2),
            "instances": sum(n for _, _, n in teams.values()),
            "by_team": {team: {"spend_usd": usd, "monthly_savings_usd": save, "instances": n}
                        for team, (usd, save, n) in sorted(teams.items())}}


def spend_chart(s: Session, dim: str, win: Window, filters: Mapping[str, str]) -> str:
    series = daily_series(s, dim, win.since, win.until, filters)
    costs = {name: {d: c for d, (c, _) in per_day.items()} for name, per_day in series.items()}
    return charts.stacked_days(costs, days_of(win.since, win.until))


def overview(s: Session, settings: Settings, win: Window, now: datetime) -> dict[str, Any]:
    doc = spend_doc(s, settings, win, ["team"])
    unattributed = sum(r["cost_usd"] for r in doc["rows"] if r["team"] == UNATTRIBUTED)
    return {"doc": doc, "unattributed_usd": round(unattributed, 2),
            "underused": underused(s, settings, now), "chart": spend_chart(s, "team", win, {}),
            "service": service(s, settings, now), "standing": doc.get("paid_not_running", [])}


def service(s: Session, settings: Settings, now: datetime) -> dict[str, Any]:
    """Is the service behind these figures cycling, and what did its last cycle leave out:
    `costguard status` (costguard/daemon/health.py), with the poll interval in minutes."""
    from costguard.daemon.health import DEGRADED_AFTER_CYCLES, status_of

    poll = settings.poll_interval.total_seconds()
    info = status_of(s, now, poll)
    age = info["seconds_since_last_good_cycle"]
    minutes = poll / 60
    return {**info, "poll_minutes": int(minutes) if minutes.is_integer() else round(minutes, 1),
            "minutes_since_last_good_cycle": None if age is None else int(age // 60),
            "degraded_after": DEGRADED_AFTER_CYCLES}


class UnknownTeam(CostguardError, LookupError):
    """A team no spend was ever recorded for (the page answers 404)."""


def team(s: Session, settings: Settings, win: Window, name: str) -> dict[str, Any]:
    from costguard.report.queries import unknown_value

    known = unknown_value(s, "team", name)
    if known is not None:
        raise UnknownTeam(f"no spend was ever recorded for team {name!r}; teams: "
                          f"{', '.join(known) or 'none yet'}")
    doc = spend_doc(s, settings, win, ["instance", "instance-type"], {"team": name})
    return {"doc": doc, "team": name,
            "chart": spend_chart(s, "instance-type", win, {"team": name})}


def instance(s: Session, settings: Settings, policies: PolicySet, ref: str, now: datetime,
             win: Window) -> dict[str, Any]:
    """`costguard explain REF --format json`, its spend over the window, and 24 h of SM
    activity and VRAM per minute (the mean over its GPUs)."""
    from costguard.report.explain import explain
    from costguard.report.run import catalog_for

    answer = explain(s, ref, policies, catalog_for(settings, s), now,
                     recommend=settings.recommend)
    doc = answer.as_json()
    inst = doc["instance"]
    spent = spend_doc(s, settings, win, [], {"instance": inst["id"]})
    from costguard.accelerators import counted, kind_of

    return {"explain": doc, "spend": spent["total"],
            "chart": activity_chart(s, inst["provider"], inst["id"], now),
            # "8 TPU chips", "1 GPU": what it carries, in its kind's words
            "accelerators": counted(inst["instance_type"], inst["gpus"]),
            # whose hours and activity the page shows (a CPU instance's read as GPUs')
            "kind": kind_of(inst["instance_type"], 1)}


def activity_chart(s: Session, provider: str, instance_id: str, now: datetime) -> str:
    from costguard.store.readings import read_minutes

    since = now - ACTIVITY_SPAN
    minutes = read_minutes(s, [(provider, instance_id)], since, now).get(
        (provider, instance_id), [])
    sm: dict[datetime, list[float]] = defaultdict(list)
    vram: dict[datetime, list[float]] = defaultdict(list)
    for m in minutes:
        at = utc(m.minute)
        busy = m.sm_mean if m.sm_mean is not None else m.util_mean
        if busy is not None:
            sm[at].append(busy)
        if m.mem_used_bytes is not None and m.mem_total_bytes:
            vram[at].append(100 * m.mem_used_bytes / m.mem_total_bytes)
    series = {"SM activity": [(t, sum(v) / len(v)) for t, v in sm.items()],
              "VRAM used": [(t, sum(v) / len(v)) for t, v in vram.items()]}
    return charts.percent_lines(series, since, now)


def anomalies(s: Session, win: Window) -> list[dict[str, Any]]:
    from costguard.costs.anomaly import anomalies_since, anomaly_json

    return [anomaly_json(r) for r in anomalies_since(s, win.since)]


def budgets(s: Session, policies: PolicySet, now: datetime) -> list[dict[str, object]]:
    from costguard.costs.budgets import budget_json, budget_statuses

    return [budget_json(st) for st in budget_statuses(s, policies.budgets, now)]


def pending(s: Session, policies: PolicySet) -> list[dict[str, Any]]:
    from costguard.actions.pending import pending_actions
    from costguard.costs.attribution import Attributor

    modes = {p.name: "enforce" if p.is_enforced else "dry-run" for p in policies.policies}
    return [p.as_json() for p in pending_actions(s, modes, Attributor(policies.attribution))]


AUDIT_KINDS = ("finding", "notify", "tag", "stop", "start", "terminate", "scale_in", "snooze",
               "skip")


def audit(s: Session, win: Window, limit: int, policy: str | None = None,
          instance: str | None = None, kind: str | None = None) -> list[dict[str, object]]:
    """The audit trail of the window, newest first, at most `limit` events; narrowed to a
    policy, an instance or a kind of event as `costguard audit` narrows it."""
    from costguard.actions.audit import audit_events

    events = audit_events(s, win.since, None if win.to_now else win.until,
                          instance_id=instance or None, policy=policy or None,
                          kinds=[kind] if kind else ())
    return [e.as_json() for e in reversed(events[-limit:])]


SEARCH_LIMIT = 100


def search(s: Session, policies: PolicySet, text: str) -> list[dict[str, Any]]:
    """Instances inventory lists whose id, name, type or team holds `text` (any case), the
    running ones first, at most SEARCH_LIMIT."""
    from sqlmodel import col, select

    from costguard.costs.attribution import Attributor
    from costguard.store.inventory import to_instance
    from costguard.store.tables import InstanceRow

    needle = text.strip().lower()
    if not needle:
        return []
    attributor = Attributor(policies.attribution)
    found: list[dict[str, Any]] = []
    rows = s.exec(select(InstanceRow).where(col(InstanceRow.gone).is_(False))
                  .order_by(col(InstanceRow.instance_id)))
    for row in rows:
        inst = to_instance(row)
        team = attributor.dimensions(inst).get("team")
        if any(needle in (v or "").lower()
               for v in (inst.instance_id, inst.name, inst.instance_type, team)):
            found.append({"provider": inst.provider, "instance_id": inst.instance_id,
                          "name": inst.name, "instance_type": inst.instance_type,
                          "state": str(inst.state), "team": team,
                          "gpus": inst.gpu_count})
    found.sort(key=lambda f: (f["state"] != "running", f["instance_id"]))
    return found[:SEARCH_LIMIT]


def recommendations(s: Session, settings: Settings, now: datetime,
                    filters: Mapping[str, str] | list[str] | None = None,
                    everything: bool = False) -> dict[str, Any]:
    """`costguard recommend --format json` (`everything`: --all)."""
    from costguard.recommend.render import recommend_doc
    from costguard.recommend.run import recommend
    from costguard.report.run import catalog_for

    cfg = settings.recommend
    recs = recommend(s, now, catalog_for(settings, s).quote, cfg, parse_filters(filters))
    return recommend_doc(recs, cfg, everything)


def clusters(s: Session, settings: Settings, win: Window) -> dict[str, Any]:
    """Each Kubernetes cluster over the window, read from its Prometheus: GPU spend by
    namespace, by workload and by team (`costguard report --by namespace --cluster X
    --format json`), and its underused GPU pods (`costguard recommend --cluster X`). A
    cluster that cannot be read shows why; the others still show."""
    from dataclasses import replace

    from costguard.k8s.recommend import pod_recommendations, recommend_doc
    from costguard.k8s.report import report_doc
    from costguard.report.run import read_clusters

    out: list[dict[str, Any]] = []
    for cfg in settings.kubernetes.clusters:
        try:
            report = read_clusters(settings, [cfg], ("namespace",), win.since, win.until, {},
                                   session=s)
        except CostguardError as exc:
            out.append({"name": cfg.name, "error": str(exc)})
            continue
        pods = pod_recommendations(report, settings.recommend)
        out.append({"name": cfg.name, "namespaces": report_doc(report),
                    "workloads": report_doc(replace(report, by=("namespace", "workload"))),
                    "teams": report_doc(replace(report, by=("team",))),
                    "underused": recommend_doc(pods, settings.recommend, everything=False)})
    return {"clusters": out}
