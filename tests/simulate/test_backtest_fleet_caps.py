"""The backtest applies the fleet-wide `safety` caps as the live runner does, by hand.

Every instance runs 10:00-14:00; GPU idle until `busy_from`. The policies warn once their
45-minute window is full of idle readings (10:45) and stop at the deadline (grace 15m,
so 11:00), replayed in 5-minute cycles. A reading at minute m is seen by the cycle after.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.actions.settings import SafetySettings
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import Policy
from costguard.simulate.backtest import BacktestReport, backtest, backtest_policies
from costguard.store.db import Database
from tests.simulate.test_backtest import T10, T14, _instance

STEP = timedelta(minutes=5)
FLEET_COUNT = ("2 instances due, 1 left of the fleet-wide per-cycle cap "
               "(safety.max_actions_per_cycle)")
FLEET_USD = ("$6.00/h due, $5.00/h left of the fleet-wide per-cycle cap "
             "(safety.max_usd_per_hour_per_cycle)")


def _policy(name: str, team: str | None = None, limits: str = "") -> str:
    tags = f", tags: {{values: {{team: [{team}]}}}}" if team else ""
    return f"""\
  - name: {name}
    filters: {{gpu: true, state: running{tags}}}
    condition:
      idle: {{below: 5, for: 45m, min_coverage: 1}}
    actions:
      - notify: {{to: owner}}
      - stop: {{grace: 15m}}
{limits}"""


def _policies(*bodies: str) -> list[Policy]:
    return list(parse_policy_text("policies:\n" + "".join(bodies)).policies)


def _two_instances(db: Database) -> None:
    # a ($4/h, research) idle throughout; b ($2/h, vision) works from 11:25
    _instance(db, "i-a", "research", busy_from=None, usd=4.0)
    _instance(db, "i-b", "vision", busy_from=T10 + timedelta(minutes=85), usd=2.0)


@pytest.mark.parametrize(("safety", "reason"), [
    (SafetySettings(max_actions_per_cycle=1), FLEET_COUNT),
    (SafetySettings(max_usd_per_hour_per_cycle=5), FLEET_USD),
])
def test_a_batch_beyond_the_fleet_cap_stops_none_until_it_fits(
        db_url: str, safety: SafetySettings, reason: str) -> None:
    db = Database(db_url)
    _two_instances(db)
    # the policy's own limits allow both; the fleet-wide cap does not: nothing stops at
    # 11:00 ... 11:25 (6 cycles); the 11:30 cycle sees b busy, so a is due alone and stops,
    # saving 11:30-14:00 = 2.5 h x $4 = $10
    (policy,) = _policies(_policy("idle", limits="    limits: {max_actions_per_cycle: 5}\n"))
    with db.session() as s:
        report = backtest(s, policy, T10, T14, step=STEP, safety=safety)
    assert [(a.instance_id, a.at) for a in report.stops] == [("i-a", T10 + timedelta(
        minutes=90))]
    assert report.saved_usd == 10.0
    assert [r.at for r in report.refusals] == [T10 + timedelta(minutes=m)
                                               for m in range(60, 90, 5)]
    assert {(tuple(r.instance_ids), r.reason) for r in report.refusals} == {
        (("i-a", "i-b"), reason)}
    db.dispose()


def test_the_default_safety_settings_let_a_small_batch_through(db_url: str) -> None:
    db = Database(db_url)
    _two_instances(db)
    (policy,) = _policies(_policy("idle"))
    with db.session() as s:
        report = backtest(s, policy, T10, T14, step=STEP)
    # both stop at 11:00: a saves 3 h x $4 = $12, b 25 min x $2 = $0.8333
    assert [(a.instance_id, a.at) for a in report.stops] == [("i-a", T10 + timedelta(hours=1)),
                                                             ("i-b", T10 + timedelta(hours=1))]
    assert report.refusals == [] and report.saved_usd == 12.83
    db.dispose()


def _shared(db: Database, first: str, second: str) -> list[BacktestReport]:
    policies = _policies(_policy("research-idle", "research"), _policy("vision-idle", "vision"))
    order = {p.name: p for p in policies}
    with db.session() as s:
        return backtest_policies(s, [order[first], order[second]], T10, T14, step=STEP,
                                 safety=SafetySettings(max_actions_per_cycle=1))


@pytest.mark.parametrize("first", ["research-idle", "vision-idle"])
def test_policies_replayed_together_share_the_fleet_cap_in_their_order(
        db_url: str, first: str) -> None:
    db = Database(db_url)
    _instance(db, "i-a", "research", busy_from=None, usd=4.0)  # idle throughout
    _instance(db, "i-b", "vision", busy_from=None, usd=2.0)
    second = "vision-idle" if first == "research-idle" else "research-idle"
    reports = {r.policy: r for r in _shared(db, first, second)}
    # 11:00: the first policy's stop takes the one action the cycle allows; the second's
    # batch of one is refused and goes through at 11:05 (each saves until 14:00)
    at_11, at_1105 = T10 + timedelta(hours=1), T10 + timedelta(minutes=65)
    usd = {"research-idle": 4.0, "vision-idle": 2.0}
    assert [a.at for a in reports[first].stops] == [at_11]
    assert reports[first].saved_usd == round(3 * usd[first], 2)
    assert reports[first].refusals == []
    assert [a.at for a in reports[second].stops] == [at_1105]
    assert reports[second].saved_usd == round(175 / 60 * usd[second], 2)
    assert [(r.at, r.reason) for r in reports[second].refusals] == [
        (at_11, "1 instances due, 0 left of the fleet-wide per-cycle cap "
                "(safety.max_actions_per_cycle)")]
    db.dispose()


def test_simulate_command_applies_the_configs_safety_caps(
        db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from costguard.cli import app

    db = Database(db_url)
    _two_instances(db)
    db.dispose()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", db_url)
    (tmp_path / "costguard.yaml").write_text("safety: {max_actions_per_cycle: 1}\n")
    (tmp_path / "idle.yml").write_text("policies:\n" + _policy("idle"))
    out = CliRunner().invoke(app, ["simulate", "--policy", "idle.yml", "--since",
                                   T10.isoformat(), "--step", "5m", "--format", "json",
                                   "-c", "costguard.yaml"])
    assert out.exit_code == 0, out.output
    (doc,) = json.loads(out.output)
    assert doc["stops"] == 1 and doc["saved_usd"] == 10.0
    assert [r["reason"] for r in doc["refused_by_caps"]] == [FLEET_COUNT] * 6
