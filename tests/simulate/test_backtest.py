"""Backtests over small stored histories whose right answers are worked out by hand."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta

import pytest

from costguard.policy.load import parse_policy_text
from costguard.simulate.backtest import backtest
from costguard.store.db import Database
from costguard.store.tables import CostIntervalRow, GpuReadingRow, InstanceRow

T10 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
T14 = T10 + timedelta(hours=4)

POLICY = """\
policies:
  - name: idle
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 45m, min_coverage: 1}  # full windows keep the sums simple
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
"""


def _instance(db: Database, iid: str, team: str, *, busy_from: datetime | None,
              tags: dict[str, str] | None = None, usd: float = 4.0) -> None:
    """Runs 10:00-14:00 at `usd`/h; GPU idle until `busy_from`, busy after."""
    with db.session() as s:
        s.add(InstanceRow(provider="sim", instance_id=iid, account="a", region="r",
                          instance_type="g5.xlarge", state="running", lifecycle="on-demand",
                          gpu_count=1, launch_time=T10 - timedelta(days=1),
                          tags={"team": team, **(tags or {})}, first_seen=T10, last_seen=T14,
                          state_changed_at=T10))
        s.add(CostIntervalRow(provider="sim", instance_id=iid, account="a", region="r",
                              instance_type="g5.xlarge", lifecycle="on-demand",
                              state="running", start=T10, end=T14, usd_per_hour=usd,
                              team=team))
        minute = T10
        while minute < T14:
            level = 70.0 if busy_from is not None and minute >= busy_from else 0.0
            s.add(GpuReadingRow(provider="sim", instance_id=iid, gpu_index=0, minute=minute,
                                source="sim", samples=60, util_mean=level, util_max=level,
                                sm_mean=level, sm_max=level))
            minute += timedelta(minutes=1)


def test_backtest_counts_stops_savings_and_false_positives_as_computed_by_hand(
        db_url: str) -> None:
    db = Database(db_url)
    # a: idle 10:00-12:30. Window full at 10:45 -> warned; deadline 11:00 -> stopped at 11:00;
    #    busy again 12:30 (1.5 h later: not a false positive); saved 1.5 h x $4 = $6.
    _instance(db, "i-a", "research", busy_from=T10 + timedelta(hours=2, minutes=30))
    # b: busy from 11:30, 30 min after the 11:00 stop: a false positive; saved 0.5 h x $8 = $4.
    _instance(db, "i-b", "vision", busy_from=T10 + timedelta(hours=1, minutes=30), usd=8.0)
    # c: busy all along: never warned.  d: idle but protected: never touched.
    _instance(db, "i-c", "vision", busy_from=T10)
    _instance(db, "i-d", "research", busy_from=None, tags={"costguard:protect": "true"})
    policy = parse_policy_text(POLICY).policies[0]
    with db.session() as s:
        report = backtest(s, policy, T10, T14, step=timedelta(minutes=5))
    stops = {a.instance_id: a for a in report.stops}
    assert set(stops) == {"i-a", "i-b"}
    assert stops["i-a"].at == stops["i-b"].at == T10 + timedelta(hours=1)
    assert stops["i-a"].saved_usd == 6.0 and not stops["i-a"].false_positive
    assert stops["i-b"].saved_usd == 4.0 and stops["i-b"].false_positive
    assert stops["i-b"].busy_again_at == T10 + timedelta(hours=1, minutes=30)
    assert report.saved_usd == 10.0 and report.warnings == 2
    teams = report.by_team()
    assert (teams["research"].stops, teams["research"].saved_usd) == (1, 6.0)
    assert (teams["vision"].stops, teams["vision"].false_positives) == (1, 1)
    db.dispose()


def test_backtest_of_an_instance_idle_to_the_end_saves_until_the_end_of_history(
        db_url: str) -> None:
    db = Database(db_url)
    _instance(db, "i-idle", "nlp", busy_from=None, usd=2.0)
    policy = parse_policy_text(POLICY).policies[0]
    with db.session() as s:
        report = backtest(s, policy, T10, T14, step=timedelta(minutes=5))
    (stop,) = report.stops
    # stopped at 11:00, nothing after: 3 h x $2 saved, no false positive
    assert stop.saved_usd == 6.0 and stop.busy_again_at is None and not stop.false_positive
    db.dispose()


def test_backtest_of_a_notify_only_policy_lists_each_finding_once() -> None:
    db = Database("sqlite://")
    _instance(db, "i-a", "research", busy_from=None)
    policy = parse_policy_text("""\
policies:
  - name: long-runner
    filters: {gpu: true, state: running}
    condition: {running_longer_than: 6h}
    actions: [notify]
""").policies[0]
    with db.session() as s:
        report = backtest(s, policy, T10, T14, step=timedelta(minutes=30))
    assert [(a.instance_id, a.action, a.at) for a in report.actions] == [("i-a", "notify", T10)]
    assert report.saved_usd == 0.0


def _cloud_instance(db: Database, iid: str, *, hours: int, busy_from: datetime) -> None:
    """Runs from 10:00 for `hours` at $4/h, read from its cloud in 5-minute readings: idle
    until `busy_from`, busy after."""
    end = T10 + timedelta(hours=hours)
    with db.session() as s:
        s.add(InstanceRow(provider="sim", instance_id=iid, account="a", region="r",
                          instance_type="g5.xlarge", state="running", lifecycle="on-demand",
                          gpu_count=1, launch_time=T10 - timedelta(days=1), tags={"team": "t"},
                          first_seen=T10, last_seen=end, state_changed_at=T10))
        s.add(CostIntervalRow(provider="sim", instance_id=iid, account="a", region="r",
                              instance_type="g5.xlarge", lifecycle="on-demand",
                              state="running", start=T10, end=end, usd_per_hour=4.0, team="t"))
        minute = T10
        while minute < end:
            level = 70.0 if minute >= busy_from else 0.0
            s.add(GpuReadingRow(provider="sim", instance_id=iid, gpu_index=0, minute=minute,
                                span_minutes=5, source="cloudwatch", util_mean=level,
                                util_max=level))
            minute += timedelta(minutes=5)


def test_a_replay_of_a_cloud_s_five_minute_readings_over_days(db_url: str) -> None:
    # the replay holds an hour or so of readings at a time and reads ahead from the store
    # a day at a time: the answers are those of the readings themselves
    db = Database(db_url)
    # soon: idle, stopped at 11:00 (warned 10:45, 15 min grace); its 11:10-11:15 reading
    # is busy. Replayed from 10:02, the cycles fall at 11:02: busy again at 11:10, a false
    # positive; saved 8 minutes at $4/h.
    _cloud_instance(db, "i-soon", hours=3, busy_from=T10 + timedelta(minutes=70))
    # later: idle for a day and a half, busy from 22:00 the next day (two days' reads ahead)
    _cloud_instance(db, "i-later", hours=40, busy_from=T10 + timedelta(hours=36))
    policy = parse_policy_text(POLICY).policies[0]
    with db.session() as s:
        report = backtest(s, policy, T10 + timedelta(minutes=2), T10 + timedelta(hours=40),
                          step=timedelta(minutes=5))
    stops = {a.instance_id: a for a in report.stops}
    assert set(stops) == {"i-soon", "i-later"}
    soon, later = stops["i-soon"], stops["i-later"]
    assert soon.at == later.at == T10 + timedelta(hours=1, minutes=2)
    assert soon.busy_again_at == T10 + timedelta(minutes=70) and soon.false_positive
    assert soon.saved_usd == round(4.0 * 8 / 60, 4)
    assert later.busy_again_at == T10 + timedelta(hours=36) and not later.false_positive
    assert later.saved_usd == round(4.0 * (36 * 60 - 62) / 60, 4)
    db.dispose()


def test_a_replay_holds_an_hour_or_so_of_readings_not_its_whole_span() -> None:
    # three days of a 4-GPU instance's minutes (17,280 readings): as GpuMinutes the replay
    # held them all, ~3 KB each (a week of the demo's fleet took 0.7 GB)
    db = Database("sqlite://")
    end = T10 + timedelta(days=3)
    with db.session() as s:
        s.add(InstanceRow(provider="sim", instance_id="i-4", account="a", region="r",
                          instance_type="g5.12xlarge", state="running", lifecycle="on-demand",
                          gpu_count=4, launch_time=T10, tags={"team": "t"}, first_seen=T10,
                          last_seen=end, state_changed_at=T10))
        s.add(CostIntervalRow(provider="sim", instance_id="i-4", account="a", region="r",
                              instance_type="g5.12xlarge", lifecycle="on-demand",
                              state="running", start=T10, end=end, usd_per_hour=5.0, team="t"))
        minute = T10
        while minute < end:
            s.add_all(GpuReadingRow(provider="sim", instance_id="i-4", gpu_index=g,
                                    minute=minute, source="sim", samples=60, util_mean=50.0,
                                    util_max=90.0, sm_mean=40.0, sm_max=80.0)
                      for g in range(4))
            minute += timedelta(minutes=1)
    policy = parse_policy_text(POLICY).policies[0]
    with db.session() as s:
        tracemalloc.start()
        report = backtest(s, policy, T10, end, step=timedelta(minutes=10))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert report.warnings == 0 and not report.stops  # busy throughout
    assert peak < 12 * 2**20, f"{peak / 2**20:.1f} MiB"
    db.dispose()


def test_a_replay_from_a_century_back_starts_where_history_does(db_url: str) -> None:
    # `simulate --since 36500d`: ten million 5-minute cycles before the first recorded
    # interval, each of which could do nothing, ran for hours; the same grid from there on
    db = Database(db_url)
    _instance(db, "i-a", "research", busy_from=T10 + timedelta(hours=2, minutes=30))
    policy = parse_policy_text(POLICY).policies[0]
    with db.session() as s:
        near = backtest(s, policy, T10, T14, step=timedelta(minutes=5))
        far = backtest(s, policy, T10 - timedelta(days=36_500), T14, step=timedelta(minutes=5))
        # a grid that does not meet T10: the first cycle is the grid's first after it
        off = backtest(s, policy, T10 - timedelta(days=3, minutes=2), T14,
                       step=timedelta(minutes=5))
    assert [a.at for a in far.actions] == [a.at for a in near.actions] != []
    assert far.saved_usd == near.saved_usd == 6.0
    (stop,) = off.stops
    assert stop.at == T10 + timedelta(hours=1, minutes=3)
    db.dispose()


def test_a_replay_step_under_a_minute_is_refused() -> None:
    db = Database("sqlite://")
    policy = parse_policy_text(POLICY).policies[0]
    with db.session() as s:
        for step in (timedelta(0), timedelta(seconds=59)):
            with pytest.raises(ValueError, match="a replay step of at least 1m"):
                backtest(s, policy, T10, T14, step=step)
        backtest(s, policy, T10, T14, step=timedelta(minutes=1))
    db.dispose()
