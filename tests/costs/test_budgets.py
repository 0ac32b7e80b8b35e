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


def test_a_new_month_starts_from_zero_and_forecasts_from_the_first_hour(db: Database) -> None:
    with db.session() as s:
        add_interval(s, "i-1", MONTH - timedelta(days=1), 24, 1.5, team="research")
        add_interval(s, "i-2", MONTH, 6, 1.5, team="research")
    with db.session() as s:
        status = check_budgets(s, policies(), MONTH + timedelta(hours=6))[0]
    # $1.50/h over the 30 hours recorded (the day before and the month's first 6): on
    # course for 30 days x $36 = $1,080, though only $9 is spent; it alerts at 80%
    assert status.actual_micros == 9_000_000
    assert status.forecast_micros == 9_000_000 + round(1.5e6 * (30 * 24 - 6))
    assert status.forecast_basis == ("the spend so far plus the run rate of the last 30 "
                                     "hours to the month's end")
    assert status.alerts == ("budget:research-monthly:2026-04:80:forecast",
                             "budget:research-monthly:2026-04:100:forecast")


def test_the_first_day_s_forecast_is_the_run_rate_not_the_spend_so_far(db: Database) -> None:
    # the second-hour report: a $1,121 day forecast as $1,121 for the month
    with db.session() as s:
        now = MONTH + timedelta(hours=12)
        for k in range(14):  # $0.50/h over the last 7 days, the last 12 h this month's
            add_interval(s, f"i-{k}", now - timedelta(days=7) + timedelta(hours=12 * k), 12,
                         0.5, team="research")
    with db.session() as s:
        status = check_budgets(s, policies(), MONTH + timedelta(hours=12))[0]
    assert status.actual_micros == 6_000_000
    assert status.forecast_micros == 6_000_000 + round(0.5e6 * (30 * 24 - 12))
    assert "run rate of the last 7 days" in status.forecast_basis


def test_under_an_hour_of_history_the_forecast_is_the_spend_so_far(db: Database) -> None:
    with db.session() as s:
        add_interval(s, "i-1", MONTH + timedelta(days=3), 0.5, 4, team="research")
    with db.session() as s:
        status = check_budgets(s, policies(), MONTH + timedelta(days=3, minutes=30))[0]
    assert status.forecast_micros == status.actual_micros == 2_000_000
    assert status.forecast_basis.startswith("the spend so far: under an hour")


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
