"""launched_by is kept in the instances table and attribution's `from: launcher` uses it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlmodel import select

from costguard.clock import ManualClock
from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.demo.sim import SimProvider
from costguard.demo.sim_settings import SimSettings
from costguard.model import Instance, InstanceState, PriceQuote
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.inventory import current_instances, record_inventory
from costguard.store.tables import CostIntervalRow

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::1:instance-profile/vision-train"


def _inst(iid: str, launched_by: str | None, tags: dict[str, str] | None = None) -> Instance:
    return Instance(provider="aws", account="1", region="us-east-1", instance_id=iid,
                    instance_type="g5.xlarge", state=InstanceState.RUNNING, gpu_count=1,
                    launch_time=NOW - timedelta(days=1), tags=tags or {}, observed_at=NOW,
                    launched_by=launched_by)


def test_launched_by_round_trips_and_follows_the_listing(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1", ROLE), _inst("i-2", None)], NOW, complete=True)
    with db.session() as s:
        got = {i.instance_id: i.launched_by for i in current_instances(s)}
    assert got == {"i-1": ROLE, "i-2": None}
    with db.session() as s:  # the profile was swapped: the store says what the cloud says
        record_inventory(s, "aws", [_inst("i-1", ROLE + "-v2"), _inst("i-2", None)],
                         NOW + timedelta(minutes=5), complete=True)
    with db.session() as s:
        assert {i.instance_id: i.launched_by for i in current_instances(s)}["i-1"] == ROLE + "-v2"
    db.dispose()


def test_cost_intervals_are_attributed_by_the_launcher_when_tags_say_nothing(
        db_url: str) -> None:
    rules = parse_policy_text("""\
attribution:
  dimensions:
    team: {keys: [team]}
  derive:
    - {dimension: team, from: launcher, map: {"arn:aws:iam::1:instance-profile/vision-*": vision}}
""").attribution
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-role", ROLE), _inst("i-none", None),
                                    _inst("i-tagged", ROLE, {"team": "nlp"})],
                         NOW, complete=True)
    with db.session() as s:
        accrue(s, NOW + timedelta(hours=1),
               {"aws": lambda inst: PriceQuote(usd_per_hour=1.0, source="test")},
               Attributor(rules))
    with db.session() as s:
        teams = {r.instance_id: r.team for r in s.exec(select(CostIntervalRow))}
    assert teams == {"i-role": "vision", "i-none": None, "i-tagged": "nlp"}
    db.dispose()


def test_the_simulated_fleet_runs_as_its_teams_instance_profiles() -> None:
    sim = SimProvider(SimSettings(instances=20, seed=3), ManualClock(NOW))
    fleet = sim.list_instances().instances
    assert all(i.launched_by and i.launched_by.startswith(f"arn:aws:iam::{i.account}:"
                                                          "instance-profile/") for i in fleet)
    tagged = [i for i in fleet if "team" in i.tags]
    assert tagged and all(i.launched_by.endswith(f"/{i.tags['team']}-gpu")  # type: ignore[union-attr]
                          for i in tagged)
