"""The cycle's hourly budget and anomaly checks, with what they read kept from one check to
the next (costs/spend_sums.py, costs/anomaly_series.py): each reads the hours since the last
check, not a month, a week and two weeks of cost intervals."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from costguard.costs.anomaly import Anomaly, detect_anomalies
from costguard.costs.anomaly_series import SeriesKeep
from costguard.costs.budgets import BudgetStatus, check_budgets
from costguard.costs.spend_sums import SpendSums, budget_spent_in
from costguard.policy.schema import PolicySet


class HourlyChecks:
    def __init__(self) -> None:
        self.budget_sums = SpendSums()
        self.series = SeriesKeep()

    def run(self, session: Session, policies: PolicySet, now: datetime
            ) -> tuple[list[BudgetStatus], list[Anomaly]]:
        """Every budget's status (alerting thresholds crossed) and the anomalies opened or
        grown, as `check_budgets` and `detect_anomalies` read whole would give them."""
        self.budget_sums.begin(session)
        self.series.begin(session)
        statuses = check_budgets(session, policies, now,
                                 spent_in=budget_spent_in(self.budget_sums, session, now))
        return statuses, detect_anomalies(session, policies, now, keep=self.series)
