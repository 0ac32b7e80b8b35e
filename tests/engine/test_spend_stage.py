"""The cycle's spend stage: budgets and anomaly rules are judged once an hour, and a policy
set with neither (most) does not import what judges them."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

from costguard.clock import ManualClock
from tests.engine.conftest import IDLE_POLICY, EngineFactory

SPEND = """\
attribution:
  dimensions:
    team: {keys: [team]}
budgets:
  - {name: research-monthly, dimension: team, value: research, monthly_usd: 1000}
anomalies:
  - {name: team-daily, dimension: team, min_impact_usd: 500}
"""


def test_budgets_and_anomalies_are_judged_in_the_cycle(
        make_engine: EngineFactory, clock: ManualClock) -> None:
    engine = make_engine(IDLE_POLICY.format(mode="enforce", cap=10) + SPEND)
    summary = engine.run_cycle()
    assert (summary.budgets, summary.anomalies) == (1, 0)
    clock.advance(timedelta(minutes=5))
    assert engine.run_cycle().budgets == 0  # the same hour: judged once


def test_a_cycle_without_spend_rules_does_not_import_their_judges() -> None:
    code = ("import sys; import costguard.engine; "
            "print(sorted(m for m in ('costguard.costs.budgets', 'costguard.costs.anomaly', "
            "'costguard.report.queries', 'costguard.alerts.slack', 'costguard.alerts.email') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
