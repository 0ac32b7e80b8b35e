"""Budgets: spend this month, forecast to month end, one alert per threshold and month."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import select

from costguard.costs.budgets import check_budgets
from costguard.errors import PolicyError
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import Attribution, Budget, PolicySet
from costguard.store.db import Database
from costguard.store.tables import AlertRow
from tests.costs.fleet import add_interval

TEAMS = Attribution.model_validate({"dimensions": {"team": {"keys": ["team"]}}})
MONTH = datetime(2026, 4, 1, tzinfo=UTC)  # 30 days


def policies() -> PolicySet:
    return PolicySet(attribution=TEAMS, budgets=(
        Budget(name="research-monthly", dimension="team", value="research", monthly_usd=1000),
        Budget(name="sandbox", dimension="account", value="999", monthly_usd=50),
    ))


def test_forecast_crossing_alerts_before_actual_and_each_alert_goes_out_once(
        db: Database) -> None:
    with db.session() as s:  # $30/day for research from the 1st; $2/day outside
        for d in range(10):
            add_interval(s, f"i-{d}", MONTH + timedelta(days=d), 24, 1.25, team="research")
            add_interval(s, f"j-{d}", MONTH + timedelta(days=d), 24, 2 / 24, team="vision")
    now = MONTH + timedelta(days=10)
    with db.session() as s:
        statuses = check_budgets(s, policies(), now)
    research = statuses[0]
    assert research.actual_micros == 300_000_000
    assert research.forecast_micros == 900_000_000  # 300 + 20 days x 30
    assert research.alerts == ("budget:research-monthly:2026-04:80:forecast",)
    assert statuses[1].actual_micros == 0 and statuses[1].alerts == ()
    with db.session() as s:  # next cycle: nothing new
        assert all(st.alerts == () for st in check_budgets(s, policies(), now))
    with db.session() as s:  # spending speeds up: $60/day more for 12 days
        for d in range(10, 22):
            add_interval(s, f"k-{d}", MONTH + timedelta(days=d), 24, 2.5, team="research")
            add_interval(s, f"i-{d}", MONTH + timedelta(days=d), 24, 1.25, team="research")
    with db.session() as s:
        later = check_budgets(s, policies(), MONTH + timedelta(days=22))[0]
    assert later.actual_micros == 300_000_000 + 12 * 90_000_000
    assert later.alerts == ("budget:research-monthly:2026-04:80:actual",
                            "budget:research-monthly:2026-04:100:actual")
    with db.session() as s:
        alerts = s.exec(select(AlertRow).where(AlertRow.kind == "budget")).all()
    assert len(alerts) == 3
    crit = next(a for a in alerts if a.dedupe_key.endswith("100:actual"))
    assert crit.severity == "critical" and crit.team == "research"
    assert "138%" in crit.subject


def test_a_new_month_starts_from_zero(db: Database) -> None:
    with db.session() as s:
        add_interval(s, "i-1", MONTH - timedelta(days=1), 24, 50, team="research")
    with db.session() as s:
        status = check_budgets(s, policies(), MONTH + timedelta(hours=6))[0]
    assert status.actual_micros == 0 and status.alerts == ()


def test_a_budget_past_a_trillion_is_refused_where_it_is_written() -> None:
    # kept as micro-dollars, a 64-bit integer: `monthly_usd: .inf` failed every cycle's
    # budget check with an OverflowError
    text = "budgets:\n  - {name: b, dimension: account, value: '1', monthly_usd: %s}\n"
    for bad in (".inf", "1000000000001"):
        with pytest.raises(PolicyError) as caught:
            parse_policy_text(text % bad, "b.yml")
        assert ("b.yml:2:60: budgets[0].monthly_usd: Input should be less than or equal to "
                "1000000000000") in str(caught.value)
    assert parse_policy_text(text % "1000000000000", "b.yml").budgets[0].monthly_usd == 1e12
    huge = PolicySet(budgets=(Budget(name="b", dimension="account", value="1",
                                     monthly_usd=1e12),))
    db = Database("sqlite://")
    with db.session() as s:
        (status,) = check_budgets(s, huge, MONTH + timedelta(days=3))
    assert status.budget_micros == 10**18
