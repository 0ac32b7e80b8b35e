"""Backtests that honour caps and past snoozes, over small histories worked out by hand.

Every instance runs 10:00-14:00; GPU idle until `busy_from`. The policy warns once its
45-minute window is full of idle readings (10:45), stops at the deadline (grace 15m),
and replays in 5-minute cycles. A reading at minute m is seen by the cycle after it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.policy.load import parse_policy_text
from costguard.simulate.backtest import BacktestReport, backtest
from costguard.simulate.snoozes import parse_until
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, CostIntervalRow, GpuReadingRow, InstanceRow

T10 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
T14 = T10 + timedelta(hours=4)
STEP = timedelta(minutes=5)


def _at(h: int, m: int = 0) -> datetime:
    return T10.replace(hour=h, minute=m)


def _policy(limits: str = "") -> str:
    return f"""\
policies:
  - name: idle
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 45m, min_coverage: 1}}
    actions:
      - notify: {{to: owner}}
      - stop: {{grace: 15m}}
{limits}"""


def _instance(db: Database, iid: str, *, busy_from: datetime | None = None, usd: float = 4.0,
              tags: dict[str, str] | None = None) -> None:
    with db.session() as s:
        s.add(InstanceRow(provider="sim", instance_id=iid, account="a", region="r",
                          instance_type="g5.xlarge", state="running", lifecycle="on-demand",
                          gpu_count=1, launch_time=T10 - timedelta(days=1),
                          tags={"team": "research", **(tags or {})}, first_seen=T10,
                          last_seen=T14, state_changed_at=T10))
        s.add(CostIntervalRow(provider="sim", instance_id=iid, account="a", region="r",
                              instance_type="g5.xlarge", lifecycle="on-demand",
                              state="running", start=T10, end=T14, usd_per_hour=usd,
                              team="research"))
        minute = T10
        while minute < T14:
            level = 70.0 if busy_from is not None and minute >= busy_from else 0.0
            s.add(GpuReadingRow(provider="sim", instance_id=iid, gpu_index=0, minute=minute,
                                source="sim", samples=60, util_mean=level, util_max=level,
                                sm_mean=level, sm_max=level))
            minute += timedelta(minutes=1)


def _snooze(db: Database, iid: str, at: datetime, detail: str, policy: str = "other") -> None:
    with db.session() as s:
        s.add(ActionJournalRow(key=f"{policy}|sim|{iid}|snooze|1|cli", policy=policy,
                               provider="sim", instance_id=iid, action="snooze",
                               status="done", detail=detail, intent_at=at, result_at=at))


def _run(db: Database, policy_text: str) -> BacktestReport:
    policy = parse_policy_text(policy_text).policies[0]
    with db.session() as s:
        return backtest(s, policy, T10, T14, step=STEP)


@pytest.mark.parametrize(("limits", "reason"), [
    ("    limits: {max_actions_per_cycle: 1}\n", "2 instances due, cap is 1 per cycle"),
    ("    limits: {max_usd_per_hour: 5}\n", "$6.00/h affected, cap is $5.00/h per cycle"),
])
def test_a_batch_beyond_the_cap_stops_none_until_it_fits(
        db_url: str, limits: str, reason: str) -> None:
    db = Database(db_url)
    # a ($4/h) and b ($2/h) are both due at 11:00: a batch of 2 and $6/h, beyond the cap,
    # so neither stops at 11:00, 11:05, ... 11:25 (6 cycles). b works from 11:25; the 11:30
    # cycle sees it busy and clears it, so a is due alone and stops at 11:30: 2.5 h x $4.
    _instance(db, "i-a", usd=4.0)
    _instance(db, "i-b", usd=2.0, busy_from=_at(11, 25))
    report = _run(db, _policy(limits))
    assert [(a.instance_id, a.at) for a in report.stops] == [("i-a", _at(11, 30))]
    assert report.stops[0].saved_usd == 10.0
    assert [r.at for r in report.refusals] == [_at(11, m) for m in range(0, 30, 5)]
    assert all(r.instance_ids == ["i-a", "i-b"] and r.reason == reason
               for r in report.refusals)
    refused = report.as_json()["refused_by_caps"]
    assert isinstance(refused, list) and refused[0]["usd_per_hour"] == 6.0
    db.dispose()


def test_without_caps_in_the_way_both_stop_at_the_deadline(db_url: str) -> None:
    db = Database(db_url)
    _instance(db, "i-a", usd=4.0)
    _instance(db, "i-b", usd=2.0, busy_from=_at(11, 25))
    report = _run(db, _policy("    limits: {max_actions_per_cycle: 2, max_usd_per_hour: 6}\n"))
    assert [(a.instance_id, a.at) for a in report.stops] == [("i-a", _at(11)), ("i-b", _at(11))]
    assert report.refusals == []
    db.dispose()


def test_a_journaled_snooze_holds_the_instance_then_a_fresh_warning_runs(db_url: str) -> None:
    db = Database(db_url)
    # warned 10:45 (deadline 11:00); snoozed 10:50 until 12:00 (any policy's snooze counts);
    # warned afresh 12:00, stopped 12:15: 1.75 h x $4 = $7 saved, 2 warnings.
    _instance(db, "i-a")
    _snooze(db, "i-a", _at(10, 50), "snoozed until 2026-11-02T12:00:00+00:00 by ana: eval")
    _snooze(db, "i-other", _at(10, 0), "snoozed until 2026-11-02T14:00:00+00:00 by bo: x")
    report = _run(db, _policy())
    (stop,) = report.stops
    assert (stop.at, stop.saved_usd, report.warnings) == (_at(12, 15), 7.0, 2)
    assert report.snoozed == {("i-a", _at(10, 50))}
    db.dispose()


def test_a_past_snooze_is_cut_to_the_policys_max_snooze(db_url: str) -> None:
    db = Database(db_url)
    # the same snooze, cut to 30 minutes: held 10:50-11:20, warned 11:20, stopped 11:35,
    # 2 h 25 min x $4 = $9.6667 saved.
    _instance(db, "i-a")
    _snooze(db, "i-a", _at(10, 50), "ana snoozed until 2026-11-02 12:00 UTC: eval")
    report = _run(db, _policy("    limits: {max_snooze: 30m}\n"))
    (stop,) = report.stops
    assert (stop.at, stop.saved_usd) == (_at(11, 35), 9.6667)
    db.dispose()


def test_a_snooze_tag_in_the_last_inventory_counts_back_from_its_end(db_url: str) -> None:
    db = Database(db_url)
    # tag until 12:00 with max_snooze 1h: taken to hold 11:00-12:00. Warned 10:45, the
    # 11:00 deadline falls in the snooze; warned afresh 12:00, stopped 12:15: $7 saved.
    _instance(db, "i-a", tags={"costguard:snooze-until": "2026-11-02T12:00:00Z"})
    report = _run(db, _policy("    limits: {max_snooze: 1h}\n"))
    (stop,) = report.stops
    assert (stop.at, stop.saved_usd, report.warnings) == (_at(12, 15), 7.0, 2)
    db.dispose()


@pytest.mark.parametrize(("detail", "until"), [
    ("snoozed until 2026-11-02T12:00:00+00:00 (cut from ... to the policy's max_snooze)",
     datetime(2026, 11, 2, 12, 0, tzinfo=UTC)),
    ("snoozed until 2026-11-02T13:00:00+01:00 by ana: x", datetime(2026, 11, 2, 12, 0, tzinfo=UTC)),
    ("bo snoozed until 2026-11-02 12:30 UTC (cut to max_snooze 1d): y",
     datetime(2026, 11, 2, 12, 30, tzinfo=UTC)),
    ("stopped (idle)", None),
])
def test_parse_until_reads_every_journal_format(detail: str, until: datetime | None) -> None:
    assert parse_until(detail) == until
