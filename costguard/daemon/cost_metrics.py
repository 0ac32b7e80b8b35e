"""Cost metrics for Prometheus, in OpenCost's spirit: what each instance costs per hour, what
its GPUs cost, what of it was idle, each team's spend today and this month, and budgets.

They are computed from the store once after each cycle (by the leader, as the fleet gauges
are) and rendered into a text snapshot then; a scrape only copies those bytes, so scraping
often costs next to nothing however large the fleet, and the gauges are emptied once
rendered (only the snapshot is kept between cycles).

    costguard_instance_hourly_cost_usd{provider,account,region,instance,instance_type,team,
                                       lifecycle,owner}   the price it accrues at now
    costguard_instance_gpu_hourly_cost_usd{same}           that price per GPU (GPU instances)
    costguard_instance_idle_cost_usd{same}                 its idle spend over the last hour
    costguard_team_hourly_cost_usd{team}                   the sum of the team's prices now
    costguard_team_spend_usd{team,period="day"|"month"}    spend since 00:00 UTC / the 1st
    costguard_budget_usd / _spent_usd / _forecast_usd{budget,dimension,value}
    costguard_cost_instances_folded                        instances past the series cap
    costguard_workload_hourly_cost_usd{cluster,namespace,kind,workload,team}
                                  a Kubernetes workload's share of its nodes' prices now
    costguard_workload_gpus{same}                          the GPUs its pods hold
    costguard_namespace_hourly_cost_usd{cluster,namespace} the namespace's workloads' sum
    costguard_accelerator_hourly_cost_usd{accelerator}     running instances' prices by kind
                                  (GPU, TPU, Trainium, Inferentia, none: accelerators.py)
    costguard_accelerators_running{accelerator}            their GPUs, TPU chips, devices

Per-instance series are capped (`console.max_instance_series`, the costliest first): the
rest are folded into one series per team with `instance="(other)"` and the other labels
empty, so `sum()` over a metric stays the fleet's total whatever the cap.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from sqlalchemy import and_, func, select
from sqlmodel import Session

from costguard.accelerators import kind_of
from costguard.costs.attribution import UNATTRIBUTED
from costguard.costs.budgets import budget_statuses, month_bounds
from costguard.costs.rollup import day_floor
from costguard.costs.spend_sums import SpendSums, budget_spent_in
from costguard.policy.spend import Budget
from costguard.report.figures import Report
from costguard.report.owners import owner_values
from costguard.report.queries import spend
from costguard.standing.report import paid_not_running
from costguard.store.tables import CostIntervalRow, InstanceRow

if TYPE_CHECKING:
    from costguard.k8s.provider import WorkloadFigure

LABELS = ("provider", "account", "region", "instance", "instance_type", "team", "lifecycle",
          "owner")
_INSTANCE, _TEAM = LABELS.index("instance"), LABELS.index("team")
_TYPE = LABELS.index("instance_type")
OTHER = "(other)"
# an interval older than this is not "now": the instance stopped being accrued (gone, or
# the cycles stopped); a running instance is accrued every poll
MIN_LOOKBACK = timedelta(minutes=30)
# an interval spans the time since the last accrual, a poll interval while the daemon runs:
# the scan starts this far back (on the index of `start`). Only the first cycle after an
# outage longer than this leaves its instances out of that one snapshot.
MAX_INTERVAL = timedelta(hours=6)


@dataclass(frozen=True)
class Priced:
    labels: tuple[str, ...]  # in LABELS order
    usd_per_hour: float
    gpus: int


def running_prices(session: Session, now: datetime, lookback: timedelta) -> list[Priced]:
    """Each running instance's price now: its latest cost interval (ending within
    `lookback`), with the attribution and owner it has."""
    c = CostIntervalRow.__table__.c  # type: ignore[attr-defined]
    # `start` bounds the scan to the index's newest range; `end` picks the intervals that
    # reach into the lookback (an interval spans at most the time since the last accrual)
    latest = (select(c.provider, c.instance_id, func.max(c.start).label("start"))
              .where(c.start >= now - MAX_INTERVAL, c.end >= now - lookback)
              .group_by(c.provider, c.instance_id).subquery("latest"))
    i = InstanceRow.__table__.c  # type: ignore[attr-defined]
    rows = session.execute(
        select(c.provider, c.account, c.region, c.instance_id, c.instance_type, c.team,
               c.lifecycle, c.state, c.usd_per_hour, c.gpu_count, i.owner, i.gone)
        .join(latest, and_(c.provider == latest.c.provider,
                           c.instance_id == latest.c.instance_id, c.start == latest.c.start))
        .join(InstanceRow.__table__, and_(i.provider == c.provider,  # type: ignore[attr-defined]
                                          i.instance_id == c.instance_id), isouter=True)
    ).all()
    out = []
    for (provider, account, region, iid, itype, team, lifecycle, state, usd, gpus, owner,
         gone) in rows:
        if state != "running" or gone:
            continue
        labels = (provider, account, region, iid, itype, team or UNATTRIBUTED, lifecycle,
                  owner_values(owner)["owner"])
        out.append(Priced(labels, float(usd), int(gpus or 0)))
    return out


class CostMetrics:
    """The cost gauges, in a registry of their own, and their last rendering."""

    def __init__(self, max_instance_series: int = 2000) -> None:
        self.max_instance_series = max_instance_series
        r = self.registry = CollectorRegistry()
        self.hourly = Gauge("costguard_instance_hourly_cost_usd",
                            "What the instance costs per hour now (its price: on-demand, spot "
                            "or learned from the bill).", LABELS, registry=r)
        self.gpu_hourly = Gauge("costguard_instance_gpu_hourly_cost_usd",
                                "The instance's hourly cost per GPU (GPU instances).", LABELS,
                                registry=r)
        self.idle = Gauge("costguard_instance_idle_cost_usd",
                          "Idle GPU spend of the instance over the last hour.", LABELS,
                          registry=r)
        self.team_hourly = Gauge("costguard_team_hourly_cost_usd",
                                 "What the team's running instances cost per hour now.",
                                 ["team"], registry=r)
        self.team_spend = Gauge("costguard_team_spend_usd",
                                "The team's spend since 00:00 UTC (period=day) or since the "
                                "1st of the month (period=month).", ["team", "period"],
                                registry=r)
        budget_labels = ["budget", "dimension", "value"]
        self.budget = Gauge("costguard_budget_usd", "The monthly budget.", budget_labels,
                            registry=r)
        self.budget_spent = Gauge("costguard_budget_spent_usd",
                                  "Spend this month of the budget's dimension value.",
                                  budget_labels, registry=r)
        self.budget_forecast = Gauge("costguard_budget_forecast_usd",
                                     "Spend forecast to the month's end (run rate).",
                                     budget_labels, registry=r)
        self.folded = Gauge("costguard_cost_instances_folded",
                            "Running instances folded into instance=\"(other)\" series by "
                            "the per-instance cap (console.max_instance_series).", registry=r)
        wl = ["cluster", "namespace", "kind", "workload", "team"]
        self.workload_hourly = Gauge(
            "costguard_workload_hourly_cost_usd", "What a Kubernetes workload's pods request "
            "of their nodes' prices, per hour now (docs/kubernetes.md).", wl, registry=r)
        self.workload_gpus = Gauge("costguard_workload_gpus",
                                   "The GPUs a Kubernetes workload's pods hold.", wl,
                                   registry=r)
        self.namespace_hourly = Gauge(
            "costguard_namespace_hourly_cost_usd", "What a namespace's GPU workloads cost "
            "per hour now.", ["cluster", "namespace"], registry=r)
        self.kind_hourly = Gauge(
            "costguard_accelerator_hourly_cost_usd", "What the running instances cost per "
            "hour now, by accelerator kind (GPU, TPU, Trainium, Inferentia, none).",
            ["accelerator"], registry=r)
        self.kind_count = Gauge(
            "costguard_accelerators_running", "Accelerators of the running instances (GPUs, "
            "TPU chips, Neuron devices), by kind.", ["accelerator"], registry=r)
        self.standing_monthly = Gauge(
            "costguard_paid_not_running_usd_per_month", "What unused volumes, snapshots, "
            "addresses and reserved capacity cost a month, by team and kind (docs/storage.md, "
            "docs/reservations.md).", ["team", "kind"],
            registry=r)
        self.standing_count = Gauge(
            "costguard_paid_not_running_resources", "Unused volumes, snapshots and addresses, "
            "and reservations with capacity unused, by team and kind.", ["team", "kind"],
            registry=r)
        # today's, this month's and the budgets' spend over whole hours, kept between
        # refreshes so that each reads the current hour, not the day (spend_sums.py)
        self.sums = SpendSums()
        self.text = b""  # the snapshot a scrape serves
        self.refreshed_at: datetime | None = None
        # the gauges with labels: set, rendered into `text`, and emptied again
        self._labelled = (
            self.hourly, self.gpu_hourly, self.idle, self.team_hourly, self.team_spend,
            self.budget, self.budget_spent, self.budget_forecast, self.workload_hourly,
            self.workload_gpus, self.namespace_hourly, self.kind_hourly, self.kind_count,
            self.standing_monthly, self.standing_count)

    def refresh(self, session: Session, now: datetime, hour: Report, *,
                budgets: Sequence[Budget] = (),
                poll_interval: timedelta = timedelta(minutes=5),
                workloads: Sequence[WorkloadFigure] = ()) -> None:
        """Recompute every cost gauge from the store and `hour` (the report's spend by
        instance over the last hour), and the Kubernetes workloads' from `workloads` (the
        k8s provider's last listing), then render the snapshot. The series are not kept
        between cycles (thousands of gauge children, a lock and a dict each: ~9 MB at the
        cap): a scrape serves the snapshot, and a refresh that fails keeps the last one."""
        try:
            self._fill(session, now, hour, budgets, poll_interval, workloads)
            self.text = generate_latest(self.registry)
            self.refreshed_at = now
        finally:
            for gauge in self._labelled:
                gauge.clear()

    def _fill(self, session: Session, now: datetime, hour: Report, budgets: Sequence[Budget],
              poll_interval: timedelta, workloads: Sequence[WorkloadFigure]) -> None:
        priced = running_prices(session, now, max(3 * poll_interval, MIN_LOOKBACK))
        idle = {row.key[0]: row.idle_cost_micros / 1e6 for row in hour.rows}
        priced.sort(key=lambda p: (-p.usd_per_hour, p.labels))
        shown, rest = priced[:self.max_instance_series], priced[self.max_instance_series:]
        for p in shown:
            self.hourly.labels(*p.labels).set(p.usd_per_hour)
            if p.gpus:
                self.gpu_hourly.labels(*p.labels).set(p.usd_per_hour / p.gpus)
            self.idle.labels(*p.labels).set(idle.get(p.labels[_INSTANCE], 0.0))
        folded: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for p in rest:
            acc = folded[p.labels[_TEAM]]
            acc[0] += p.usd_per_hour
            acc[1] += p.gpus
            acc[2] += idle.get(p.labels[_INSTANCE], 0.0)
        for team, (usd, gpus, idle_usd) in folded.items():
            labels = {name: "" for name in LABELS} | {"instance": OTHER, "team": team}
            self.hourly.labels(**labels).set(usd)
            if gpus:
                self.gpu_hourly.labels(**labels).set(usd / gpus)
            self.idle.labels(**labels).set(idle_usd)
        self.folded.set(len(rest))
        per_team: dict[str, float] = defaultdict(float)
        for p in priced:
            per_team[p.labels[_TEAM]] += p.usd_per_hour
        for team, usd in per_team.items():
            self.team_hourly.labels(team).set(usd)
        per_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for p in priced:
            acc = per_kind[kind_of(p.labels[_TYPE], p.gpus)]
            acc[0] += p.usd_per_hour
            acc[1] += p.gpus
        for kind, (usd, count) in per_kind.items():
            self.kind_hourly.labels(kind).set(usd)
            self.kind_count.labels(kind).set(count)
        self.sums.begin(session)
        for period, since in (("day", day_floor(now)), ("month", month_bounds(now)[0])):
            for team, micros in self.sums.sums(session, "team", _team_spend, since, now,
                                               role=period).items():
                self.team_spend.labels(team, period).set(micros / 1e6)
        spent_in = budget_spent_in(self.sums, session, now)
        for st in budget_statuses(session, budgets, now, spent_in=spent_in):
            key = (st.budget, st.dimension, st.value)
            self.budget.labels(*key).set(st.budget_micros / 1e6)
            self.budget_spent.labels(*key).set(st.actual_micros / 1e6)
            self.budget_forecast.labels(*key).set(st.forecast_micros / 1e6)
        for line in paid_not_running(session, now):
            self.standing_monthly.labels(line.team, line.kind).set(line.usd_per_month)
            self.standing_count.labels(line.team, line.kind).set(line.count)
        self._workloads(workloads)

    def _workloads(self, workloads: Sequence[WorkloadFigure]) -> None:
        per_namespace: dict[tuple[str, str], float] = defaultdict(float)
        for w in workloads:
            labels = (w.cluster, w.namespace, w.kind, w.name, w.team)
            self.workload_hourly.labels(*labels).set(w.usd_per_hour)
            self.workload_gpus.labels(*labels).set(w.gpus)
            per_namespace[(w.cluster, w.namespace)] += w.usd_per_hour
        for (cluster, namespace), usd in per_namespace.items():
            self.namespace_hourly.labels(cluster, namespace).set(usd)


def _team_spend(session: Session, since: datetime, until: datetime) -> dict[str, int]:
    return {row.key[0]: row.cost_micros for row in spend(session, ["team"], since, until).rows}


def metric_names(registry: CollectorRegistry) -> set[str]:
    """The sample names a registry exports (`_bucket`, `_total` ... included)."""
    return {s.name for family in registry.collect() for s in family.samples}

