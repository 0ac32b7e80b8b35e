"""Monthly budgets: spend so far, a forecast to month end, and alerts as thresholds fall.

The forecast is the month's spend so far plus the run rate of the last seven days (or of
the history there is, when costguard has watched for less) over the time left, from the
month's first hour on: the days before the 1st say how fast the month will go (a forecast
that was only the spend so far on the 1st read $1,121 for a month heading for 87% of its
budget). The seven days are counted back from the start of the hour, so the window's start
moves once an hour (the daemon's gauges keep its whole hours between refreshes:
costs/spend_sums.py). Under an hour of history, the forecast is the spend so far;
`forecast_basis` says which it is. Each threshold alerts at most once per budget and month
for the actual spend and once for the forecast (outbox dedupe keys
`budget:<name>:<YYYY-MM>:<percent>:actual|forecast`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlmodel import Session

from costguard.alerts.outbox import enqueue
from costguard.costs.rollup import hour_floor
from costguard.policy.schema import Budget, PolicySet
from costguard.report.queries import spend

RUN_RATE_WINDOW = timedelta(days=7)
MIN_HISTORY_FOR_FORECAST = timedelta(hours=1)
# policy dimension names -> report dimension names (the same where not listed)
REPORT_DIMENSION = {"instance_type": "instance-type", "cost-center": "cost-center",
                    "cost_center": "cost-center"}


@dataclass(frozen=True)
class BudgetStatus:
    budget: str
    dimension: str
    value: str
    month: str  # YYYY-MM
    budget_micros: int
    actual_micros: int
    forecast_micros: int
    alerts: tuple[str, ...]  # dedupe keys of the alerts this check enqueued
    forecast_basis: str = ""  # what the forecast rests on, in words

    @property
    def actual_percent(self) -> float:
        return 100 * self.actual_micros / self.budget_micros

    @property
    def forecast_percent(self) -> float:
        return 100 * self.forecast_micros / self.budget_micros


def budget_json(st: BudgetStatus) -> dict[str, object]:
    """One budget as `budget status --format json` writes it (and the console's API)."""
    return {"budget": st.budget, "dimension": st.dimension, "value": st.value,
            "month": st.month, "budget_usd": st.budget_micros / 1e6,
            "spent_usd": st.actual_micros / 1e6, "spent_percent": round(st.actual_percent, 2),
            "forecast_usd": st.forecast_micros / 1e6,
            "forecast_percent": round(st.forecast_percent, 2),
            "forecast_basis": st.forecast_basis}


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    nxt = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)
    return start, nxt


def spent(session: Session, budget: Budget, since: datetime, until: datetime) -> int:
    """Micro-dollars spent by the budget's dimension value in [since, until)."""
    if until <= since:
        return 0
    if budget.dimension == "family":
        rows = spend(session, ["instance-type"], since, until).rows
        return sum(r.cost_micros for r in rows if _family(r.key[0]) == budget.value)
    dim = REPORT_DIMENSION.get(budget.dimension, budget.dimension)
    return spend(session, [], since, until, {dim: budget.value}).total.cost_micros


def _family(instance_type: str) -> str:
    if "." in instance_type:
        return instance_type.split(".", 1)[0]
    return instance_type.split("-", 1)[0]


def history_start(session: Session) -> datetime | None:
    """When the spend costguard has recorded begins (None: none yet)."""
    from sqlalchemy import func
    from sqlalchemy import select as sa_select

    from costguard.clock import utc
    from costguard.store.tables import CostIntervalRow

    first = session.execute(sa_select(func.min(CostIntervalRow.start))).scalar()
    return utc(first) if first is not None else None


# micro-dollars the budget's dimension value spent in [since, until): `spent` by default
SpentIn = Callable[[Budget, datetime, datetime], int]


def budget_status(session: Session, budget: Budget, now: datetime,
                  since: datetime | None = None, *, spent_in: SpentIn | None = None
                  ) -> BudgetStatus:
    """`since`: where recorded spend begins (history_start; looked up when not given).
    `spent_in`: what reads the spend (the same sums by another road, as the daemon's
    gauges keep them); `spent` in `session` when not given."""
    def read(b: Budget, a: datetime, z: datetime) -> int:
        return spent(session, b, a, z)

    spent_in = spent_in or read
    start, end = month_bounds(now)
    actual = spent_in(budget, start, now)
    forecast, basis = actual, "the spend so far: under an hour of history to take a rate from"
    first = since if since is not None else history_start(session)
    window_start = max(hour_floor(now) - RUN_RATE_WINDOW, first) if first is not None else now
    if now - window_start >= MIN_HISTORY_FOR_FORECAST:
        recent = spent_in(budget, window_start, now)
        rate = recent / (now - window_start).total_seconds()
        forecast = actual + round(rate * (end - now).total_seconds())
        span = now - window_start
        basis = ("the spend so far plus the run rate of the last "
                 + (f"{span.days} days" if span >= timedelta(days=2) else
                    f"{span.total_seconds() / 3600:.0f} hours") + " to the month's end")
    return BudgetStatus(
        budget=budget.name, dimension=budget.dimension, value=budget.value,
        month=f"{start:%Y-%m}", budget_micros=round(budget.monthly_usd * 1_000_000),
        actual_micros=actual, forecast_micros=forecast, alerts=(), forecast_basis=basis)


def budget_statuses(session: Session, budgets: Iterable[Budget], now: datetime, *,
                    spent_in: SpentIn | None = None) -> list[BudgetStatus]:
    """Each budget's status, where recorded spend begins looked up once for them all."""
    since = history_start(session)
    return [budget_status(session, b, now, since, spent_in=spent_in) for b in budgets]


def check_budgets(session: Session, policy_set: PolicySet, now: datetime, *,
                  spent_in: SpentIn | None = None) -> list[BudgetStatus]:
    """Status of every budget this month; enqueues an alert per newly crossed threshold.
    `spent_in`: as for `budget_status` (the engine's kept sums: costs/spend_sums.py)."""
    out: list[BudgetStatus] = []
    since = history_start(session)
    for budget in policy_set.budgets:
        status = budget_status(session, budget, now, since, spent_in=spent_in)
        sent: list[str] = []
        for percent in budget.alert_at_percent:
            kind = None
            if status.actual_percent >= percent:
                kind = "actual"
            elif status.forecast_percent >= percent:
                kind = "forecast"
            if kind is None:
                continue
            key = f"budget:{budget.name}:{status.month}:{percent:g}:{kind}"
            if enqueue(session, dedupe_key=key, kind="budget",
                       severity="critical" if percent >= 100 and kind == "actual" else "warning",
                       subject=_subject(budget, status, percent, kind), body=_body(status),
                       now=now, team=budget.value if budget.dimension == "team" else None,
                       context={"budget": budget.name, "month": status.month,
                                "threshold_percent": percent, "kind": kind,
                                "actual_usd": round(status.actual_micros / 1e6, 2),
                                "forecast_usd": round(status.forecast_micros / 1e6, 2),
                                "budget_usd": budget.monthly_usd}):
                sent.append(key)
        out.append(BudgetStatus(**{**status.__dict__, "alerts": tuple(sent)}))
    return out


def _subject(budget: Budget, status: BudgetStatus, percent: float, kind: str) -> str:
    who = f"{budget.dimension} {budget.value}"
    if kind == "actual":
        return (f"Budget {budget.name}: {who} has spent {status.actual_percent:.0f}% of "
                f"${budget.monthly_usd:,.0f} for {status.month} (threshold {percent:g}%)")
    return (f"Budget {budget.name}: {who} is on course for {status.forecast_percent:.0f}% of "
            f"${budget.monthly_usd:,.0f} in {status.month} (threshold {percent:g}%)")


def _body(status: BudgetStatus) -> str:
    return (f"Spent so far: ${status.actual_micros / 1e6:,.2f}. "
            f"Forecast to month end: ${status.forecast_micros / 1e6:,.2f} of "
            f"${status.budget_micros / 1e6:,.2f} ({status.forecast_basis}). "
            f"See: costguard report --by {REPORT_DIMENSION.get(status.dimension, status.dimension)}"
            f" --filter {REPORT_DIMENSION.get(status.dimension, status.dimension)}="
            f"{status.value} --since {status.month}-01")
