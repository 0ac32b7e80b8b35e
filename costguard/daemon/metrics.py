"""Prometheus metrics of one replica (its own registry, so tests can build several).

Cycle metrics come from the replica that ran the cycle (the leader). Fleet gauges (instances
by state, findings, alerts, idle dollars) are refreshed from the store by the leader after
each cycle; standbys export none of them, so sums across replicas stay right. Scrape every
replica and select with `costguard_leader == 1` when in doubt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from sqlalchemy import func, select
from sqlmodel import Session, col

from costguard.alerts.tables import AlertDeliveryRow
from costguard.recommend.settings import RecommendSettings
from costguard.store.tables import (
    AlertRow,
    GapRow,
    InstanceRow,
    PolicyStateRow,
)

if TYPE_CHECKING:
    from costguard.k8s.provider import WorkloadFigure
    from costguard.policy.spend import Budget

# AlertDeliveryRow statuses (alerts/tables.py); each exported, 0 when none
DELIVERY_STATUSES = ("pending", "sending", "held", "sent", "digested", "failed", "unconfirmed")
STAGE_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class DaemonMetrics:
    def __init__(self, max_instance_series: int = 2000) -> None:
        from costguard.daemon.cost_metrics import CostMetrics

        # the cost gauges: a snapshot rendered after each cycle (daemon/cost_metrics.py)
        self.cost = CostMetrics(max_instance_series)
        r = self.registry = CollectorRegistry()
        self.stage_seconds = Histogram(
            "costguard_cycle_stage_seconds", "Duration of one cycle stage.", ["stage"],
            buckets=STAGE_BUCKETS, registry=r)
        self.cycle_seconds = Histogram(
            "costguard_cycle_seconds", "Duration of a whole cycle.", buckets=STAGE_BUCKETS,
            registry=r)
        self.cycles = Counter("costguard_cycles", "Cycles run, by outcome.", ["status"],
                              registry=r)
        self.errors = Counter(
            "costguard_cycle_errors", "Failures per stage and scope (provider/account/region "
            "for unreadable scopes, `all` for a stage that failed whole).", ["stage", "scope"],
            registry=r)
        self.skipped = Counter(
            "costguard_cycles_skipped", "Ticks skipped because a cycle was still running.",
            registry=r)
        self.last_cycle = Gauge("costguard_last_cycle_timestamp_seconds",
                                "When the last successful cycle finished.", registry=r)
        self.leader = Gauge("costguard_leader", "1 on the replica that runs the scheduler.",
                            registry=r)
        self.instances = Gauge("costguard_instances", "Instances known, by provider and state.",
                               ["provider", "state"], registry=r)
        self.findings = Gauge("costguard_findings", "Findings holding in the last cycle.",
                              ["policy"], registry=r)
        self.policy_states = Gauge("costguard_policy_states",
                                   "(policy, instance) pairs by state.", ["policy", "state"],
                                   registry=r)
        self.actions = Counter("costguard_actions", "Actions taken, by policy and kind.",
                               ["policy", "action"], registry=r)
        self.alerts = Gauge("costguard_alerts", "Alerts in the outbox, by status.", ["status"],
                            registry=r)
        self.deliveries = Gauge(
            "costguard_alert_deliveries", "Alert messages per recipient and channel, by "
            "delivery status (pending, failed, unconfirmed ...).", ["status"], registry=r)
        self.idle_usd_per_hour = Gauge(
            "costguard_idle_usd_per_hour", "Idle GPU dollars accrued over the last hour.",
            registry=r)
        self.underused_usd = Gauge(
            "costguard_underused_spend_usd", "Spend in the efficiency window (7 days by "
            "default) on GPU instances judged underused, per team.", ["team"], registry=r)
        self.underused_savings = Gauge(
            "costguard_underused_savings_usd_per_month", "What the cheaper fits of the "
            "underused GPU instances would save per month, per team.", ["team"], registry=r)
        self.gaps = Gauge("costguard_open_gaps", "Scopes that cannot be read now (1 each).",
                          ["provider", "scope"], registry=r)
        self.readings_dropped = Counter(
            "costguard_cloud_readings_dropped", "Points a cloud's GPU metrics held that no "
            "reading can hold (dropped: no data, never idle), by provider.", ["provider"],
            registry=r)
        self.agent_batches = Counter("costguard_agent_batches",
                                     "Agent telemetry batches stored.", registry=r)
        self.agent_minutes = Counter("costguard_agent_minutes",
                                     "Agent GPU-minute summaries received, by outcome.",
                                     ["outcome"], registry=r)
        self.http = Counter("costguard_http_requests", "HTTP requests, by route and status.",
                            ["route", "status"], registry=r)

    def render(self) -> bytes:
        """The scrape: these few operational series live, the cost snapshot as it was
        rendered after the last cycle."""
        return generate_latest(self.registry) + self.cost.text

    def observe_cycle(self, summary: Any, seconds: float) -> None:
        self.cycle_seconds.observe(seconds)
        self.cycles.labels("ok").inc()
        stage_seconds: Mapping[str, float] = summary.stage_seconds
        for stage, secs in stage_seconds.items():
            self.stage_seconds.labels(stage).observe(secs)
        for gap in summary.gaps:
            self.errors.labels("collect", f"{gap.get('provider')}/{gap.get('scope')}").inc()
        for provider, n in summary.readings_dropped.items():
            self.readings_dropped.labels(provider).inc(n)
        self.findings.clear()
        for policy, n in summary.findings.items():
            self.findings.labels(policy).set(n)
        for kind, per_policy in summary.actions.items():
            if isinstance(per_policy, Mapping):
                for policy, n in per_policy.items():
                    if n:
                        self.actions.labels(policy, kind).inc(n)

    def observe_failure(self, stage: str) -> None:
        self.cycles.labels("failed").inc()
        self.errors.labels(stage, "all").inc()

    def refresh_from_store(self, session: Session, now: datetime,
                           recommend: RecommendSettings | None = None, *,
                           budgets: Sequence[Budget] = (),
                           poll_interval: timedelta = timedelta(minutes=5),
                           workloads: Sequence[WorkloadFigure] = ()) -> None:
        """Fleet gauges from the store (aggregated in SQL); the underused ones from the
        verdicts stored under `recommend`'s thresholds (the configured ones); then the cost
        series' snapshot (cost_metrics.py), from the same last hour of spend."""
        self.instances.clear()
        rows = session.execute(
            select(col(InstanceRow.provider), col(InstanceRow.state), func.count())
            .where(col(InstanceRow.gone).is_(False))
            .group_by(InstanceRow.provider, InstanceRow.state)).all()
        for provider, state, n in rows:
            self.instances.labels(provider, state).set(n)
        self.refresh_alerts(session)
        self.refresh_gaps(session)
        self.policy_states.clear()
        for policy, state, n in session.execute(
                select(col(PolicyStateRow.policy), col(PolicyStateRow.state), func.count())
                .group_by(col(PolicyStateRow.policy), col(PolicyStateRow.state))).all():
            self.policy_states.labels(policy, state).set(n)
        # the report's own query (`costguard report --since 1h`): one figure, every surface
        from costguard.report.queries import spend

        hour = spend(session, ["instance"], now - timedelta(hours=1), now)
        self.idle_usd_per_hour.set(hour.total.idle_cost_micros / 1e6)
        self.refresh_underused(session, now, recommend or RecommendSettings())
        self.cost.refresh(session, now, hour, budgets=budgets, poll_interval=poll_interval,
                          workloads=workloads)

    def refresh_underused(self, session: Session, now: datetime,
                          cfg: RecommendSettings) -> None:
        from costguard.recommend.stored import underused_by_team

        self.underused_usd.clear()
        self.underused_savings.clear()
        for team, (usd, saves, _) in underused_by_team(session, cfg, now).items():
            self.underused_usd.labels(team).set(usd)
            self.underused_savings.labels(team).set(saves)

    def refresh_gaps(self, session: Session) -> None:
        self.gaps.clear()
        for provider, scope in session.execute(
                select(col(GapRow.provider), col(GapRow.scope))
                .where(col(GapRow.resolved_at).is_(None))).all():
            self.gaps.labels(provider, scope).set(1)

    def refresh_alerts(self, session: Session) -> None:
        counts: dict[str, int] = {str(k): int(v) for k, v in session.execute(
            select(col(AlertRow.status), func.count()).group_by(col(AlertRow.status))).all()}
        for status in ("pending", "routed", "failed", "sent"):
            self.alerts.labels(status).set(counts.get(status, 0))
        # routed alerts live on as deliveries: pending, failed and unconfirmed ones are there
        deliveries: dict[str, int] = {str(k): int(v) for k, v in session.execute(
            select(col(AlertDeliveryRow.status), func.count())
            .group_by(col(AlertDeliveryRow.status))).all()}
        for status in DELIVERY_STATUSES:
            self.deliveries.labels(status).set(deliveries.get(status, 0))
