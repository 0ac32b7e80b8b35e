"""Required tags escalate: notify, tag the resource with its deadline, stop after the grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from costguard.clock import ManualClock
from costguard.costs.attribution import Attributor
from costguard.policy.load import parse_policy_text
from tests.fakes.cloud import BUSY, full_cloud
from tests.fakes.scenario import alerts, make_engine, run_for

ESCALATE = """\
policies:
  - name: require-team
    mode: enforce
    filters: {gpu: true, state: running}
    condition: {missing_tags: [team]}
    actions:
      - notify: {to: owner}
      - tag: {set: {"costguard:stop-after": "{deadline}"}}
      - stop: {grace: 1d, calendar: {timezone: Europe/Berlin, holidays: DE}}
"""


def test_untagged_instance_is_told_tagged_with_its_deadline_then_stopped_after_a_business_day(
        tmp_path: Path) -> None:
    # Friday 2026-11-06 10:00 UTC (11:00 CET): one business day ends Monday 11:00 CET
    clock = ManualClock(datetime(2026, 11, 6, 10, 0, tzinfo=UTC))
    cloud, day_old = full_cloud(clock), clock.now() - timedelta(days=1)
    cloud.add("i-untagged", BUSY, tags={"owner": "bo@example.com"}, launched=day_old)
    cloud.add("i-tagged", BUSY, launched=day_old)
    engine = make_engine(f"sqlite:///{tmp_path / 'cg.db'}", ESCALATE, cloud)
    engine.run_cycle()
    deadline = datetime(2026, 11, 9, 10, 0, tzinfo=UTC)
    assert cloud.instances["i-untagged"].tags["costguard:stop-after"] == deadline.isoformat()
    (warning,) = alerts(engine.db, "idle-warning")
    assert warning.instance_id == "i-untagged" and "2026-11-09 10:00" in warning.subject
    clock.set(deadline - timedelta(minutes=5))
    engine.run_cycle()
    assert cloud.instances["i-untagged"].state == "running"
    clock.set(deadline)
    run_for(engine, clock, timedelta(minutes=10))
    assert cloud.instances["i-untagged"].state == "stopped"
    assert cloud.instances["i-tagged"].state == "running"
    assert "costguard:stop-after" not in cloud.instances["i-tagged"].tags


def test_team_is_derived_from_the_launching_role_when_tags_say_nothing() -> None:
    rules = parse_policy_text("""\
attribution:
  dimensions:
    team: {keys: [team]}
  derive:
    - {dimension: team, from: launcher, map: {"arn:aws:iam::1:role/vision-*": vision,
                                             "arn:aws:iam::1:role/vision-admin": platform}}
""").attribution
    cloud = full_cloud(ManualClock(datetime(2026, 11, 6, tzinfo=UTC)))
    inst = cloud.add("i-1").model_copy(update={"tags": {}})
    attributor = Attributor(rules)
    assert attributor.dimensions(inst)["team"] is None
    by_role = inst.model_copy(update={"launched_by": "arn:aws:iam::1:role/vision-train"})
    assert attributor.dimensions(by_role)["team"] == "vision"
    exact = inst.model_copy(update={"launched_by": "arn:aws:iam::1:role/vision-admin"})
    assert attributor.dimensions(exact)["team"] == "platform"
    tagged = by_role.model_copy(update={"tags": {"team": "nlp"}})
    assert attributor.dimensions(tagged)["team"] == "nlp"
