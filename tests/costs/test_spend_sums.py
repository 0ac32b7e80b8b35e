"""The cost gauges' spend today, this month and per budget (costs/spend_sums.py): kept over
whole hours between refreshes, each refresh reading the current hour, and always the
figures the report and `budget status` read whole, over midnight and its rollup, and after
intervals accrued late."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session

from costguard.costs.budgets import (
    RUN_RATE_WINDOW,
    budget_statuses,
    check_budgets,
    history_start,
    month_bounds,
)
from costguard.costs.rollup import day_floor, prune, rollup
from costguard.costs.spend_sums import SpendSums, budget_spent_in
from costguard.daemon.cost_metrics import CostMetrics
from costguard.policy.schema import Attribution, PolicySet
from costguard.policy.spend import Budget
from costguard.report.queries import spend
from costguard.store.db import Database
from tests.costs.fleet import add_interval

START = datetime(2026, 3, 30, 21, 10, tzinfo=UTC)  # over midnight and into a new month
POLL = timedelta(minutes=20)
SINCE = START - timedelta(days=1)
TEAMS = ("research", "vision", None)
TEAM_RULES = Attribution.model_validate({"dimensions": {"team": {"keys": ["team"]}}})
BUDGETS = (Budget(name="research", dimension="team", value="research", monthly_usd=900),
           Budget(name="p4d", dimension="family", value="p4d", monthly_usd=500))


def accrue(s: Session, start: datetime, until: datetime, n: int = 6) -> None:
    """A cycle's intervals: each of `n` instances charged from `start` to `until`."""
    hours = (until - start).total_seconds() / 3600
    for k in range(n):
        add_interval(s, f"i-{k}", start, hours, 1.0 + k / 7, team=TEAMS[k % 3],
                     itype="p4d.24xlarge" if k % 2 else "g5.xlarge", gpus=1 + k % 4)


def whole(s: Session, now: datetime) -> dict[str, float]:
    """The figures read whole, as `report` and `budget status` read them."""
    out = {}
    for period, since in (("day", day_floor(now)), ("month", month_bounds(now)[0])):
        for row in spend(s, ["team"], since, now).rows:
            out[f"team_spend:{row.key[0]}:{period}"] = row.cost_micros / 1e6
    for st in budget_statuses(s, BUDGETS, now):
        out[f"spent:{st.budget}"] = st.actual_micros / 1e6
        out[f"forecast:{st.budget}"] = st.forecast_micros / 1e6
    return out


def gauges(metrics: CostMetrics) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(metrics.text.decode()):
        for sample in family.samples:
            if sample.name == "costguard_team_spend_usd":
                out[f"team_spend:{sample.labels['team']}:{sample.labels['period']}"] = (
                    sample.value)
            elif sample.name in ("costguard_budget_spent_usd", "costguard_budget_forecast_usd"):
                kind = "spent" if "spent" in sample.name else "forecast"
                out[f"{kind}:{sample.labels['budget']}"] = sample.value
    return out


def refreshed_as_whole(db: Database, metrics: CostMetrics, now: datetime) -> datetime:
    """Refresh the gauges at `now` as the daemon does, check them against the figures read
    whole, and return where the budgets' run-rate window starts."""
    with db.session() as s:
        hour = spend(s, ["instance"], now - timedelta(hours=1), now)
        metrics.refresh(s, now, hour, budgets=BUDGETS)
        expected = whole(s, now)
        first = history_start(s)
    got = gauges(metrics)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert abs(got[name] - value) < 1e-6, (now, name, got[name], value)
    assert first is not None
    return max(now.replace(minute=0) - RUN_RATE_WINDOW, first)


def test_the_kept_sums_are_the_figures_read_whole_over_a_day_and_its_rollup(
        db: Database) -> None:
    metrics = CostMetrics()
    now = START
    with db.session() as s:  # a day of history before the daemon starts
        accrue(s, now - timedelta(days=1), now)
    long_reads: list[list[tuple[object, datetime]]] = []
    for cycle in range(16):  # 21:30 .. 02:30, midnight's rollup and prune at 00:30
        with db.session() as s:
            accrue(s, now, now + POLL)
        now += POLL
        if cycle == 3:  # an instance accrued late: a scope read again after a gap
            with db.session() as s:
                add_interval(s, "late", now - timedelta(hours=3), 2.5, 4.0, team="vision")
        if now.hour == 0 and now.minute == 30:
            with db.session() as s:
                rollup(s, now)
                prune(s, now - timedelta(hours=12))
        window = refreshed_as_whole(db, metrics, now)
        # what was read beyond an hour, other than a budget's run-rate window from its
        # start (which moves on the hour, and with the oldest interval kept)
        long_reads.append([(figure, since) for figure, since, until in metrics.sums.reads
                           if until - since > timedelta(hours=1) and since != window])
    # the first refresh, and the one after the late interval, read everything whole; every
    # other reads the current hour, and the hour just ended once an hour
    month = datetime(2026, 3, 1, tzinfo=UTC)
    for i in (0, 3):
        assert ("team", month) in long_reads[i]
    assert [i for i, reads in enumerate(long_reads) if reads] == [0, 3]


def test_a_refresh_reads_only_the_current_hour_when_nothing_came_late(db: Database) -> None:
    sums = SpendSums()
    now = START

    def team(s: Session, a: datetime, z: datetime) -> dict[str, int]:
        return {str(r.key[0]): r.cost_micros for r in spend(s, ["team"], a, z).rows}

    with db.session() as s:
        accrue(s, SINCE, now)
    for _ in range(2):
        with db.session() as s:
            accrue(s, now, now + timedelta(minutes=5))
        now += timedelta(minutes=5)
        with db.session() as s:
            sums.begin(s)
            got = sums.sums(s, "team", team, SINCE, now)
            assert got == team(s, SINCE, now)
    # the second refresh, in the same hour: only [21:00, 21:20) was read
    assert [(a, z) for _, a, z in sums.reads] == [(now.replace(minute=0), now)]
    with db.session() as s:  # a downtime's catch-up: rows starting an hour back
        add_interval(s, "caught-up", now - timedelta(hours=2), 2, 3.0, team="research")
    with db.session() as s:
        sums.begin(s)
        got = sums.sums(s, "team", team, SINCE, now)
        assert got == team(s, SINCE, now)
        assert got["research"] > 0
    assert sums.reads[0][1:] == (SINCE, now.replace(minute=0))


def nine_days_rolled_up(db: Database, now: datetime) -> None:
    """Hourly intervals from nine days before today's midnight to `now`, the days before
    today rolled up (their raw intervals kept)."""
    with db.session() as s:
        t = day_floor(now) - timedelta(days=9)
        while t < now:
            accrue(s, t, min(t + timedelta(hours=1), now))
            t += timedelta(hours=1)
    with db.session() as s:
        rollup(s, now)


def test_the_run_rate_window_slides_on_the_hour_until_its_raw_hours_are_pruned(
        db: Database) -> None:
    # nine days of hourly intervals, the days before today rolled up (their raw rows kept):
    # each budget's window starts 7 days before the hour, so its start moves on the hour,
    # over a midnight of a rolled-up day too; it is taken off the kept sums, never read
    # whole, until the raw hours it would take off are pruned
    now = datetime(2026, 3, 20, 22, 10, tzinfo=UTC)
    nine_days_rolled_up(db, now)
    metrics = CostMetrics()
    pruned_at = 12
    whole_reads: list[int] = []
    for cycle in range(18):  # 22:30 .. 04:10
        with db.session() as s:
            accrue(s, now, now + POLL)
        now += POLL
        if cycle == pruned_at:  # 02:30: the window's first raw hour goes
            with db.session() as s:
                prune(s, now.replace(minute=30) - RUN_RATE_WINDOW)
        window = refreshed_as_whole(db, metrics, now)
        if any(since == window and until - since > timedelta(hours=1)
               for _, since, until in metrics.sums.reads):
            whole_reads.append(cycle)
    # read whole at the first refresh, and at the prune's (the history, and so the window,
    # now starts at the oldest raw interval kept: the hour it would take off is gone); not
    # at 23:10, 00:10 (the window's start at a rolled-up day's midnight), 01:10 or 03:10
    assert whole_reads == [0, pruned_at], whole_reads


def test_the_cycle_s_hourly_budget_check_reads_the_hours_since_the_last(db: Database) -> None:
    # the engine's spend stage checks budgets once an hour with its own kept sums
    # (engine/cycle.py): the statuses, and so the alerts, are those read whole
    now = datetime(2026, 3, 20, 21, 5, tzinfo=UTC)
    nine_days_rolled_up(db, now)
    sums = SpendSums()
    policy_set = PolicySet(attribution=TEAM_RULES, budgets=BUDGETS)
    for check in range(6):  # 21:05, then the first cycle of each hour to 02:05
        if check:
            with db.session() as s:
                accrue(s, now - timedelta(hours=1), now)
        with db.session() as s:
            sums.begin(s)
            kept = budget_statuses(s, BUDGETS, now, spent_in=budget_spent_in(sums, s, now))
            whole = budget_statuses(s, BUDGETS, now)
        assert kept == whole
        assert all(st.forecast_basis.endswith("7 days to the month's end") for st in kept)
        spans = [z - a for _, a, z in sums.reads]
        assert (max(spans) > timedelta(days=7)) == (check == 0), (check, spans)
        now += timedelta(hours=1)
    with db.session() as s:  # check_budgets itself reads through them (then alerts)
        sums.begin(s)
        kept = check_budgets(s, policy_set, now, spent_in=budget_spent_in(sums, s, now))
        whole = budget_statuses(s, BUDGETS, now)
    assert [(st.actual_micros, st.forecast_micros) for st in kept] == [
        (st.actual_micros, st.forecast_micros) for st in whole]
    assert sums.reads and max(z - a for _, a, z in sums.reads) <= timedelta(hours=1)
