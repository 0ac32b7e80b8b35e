"""The act stage on AWS (moto): its API calls do not grow with the number of instances."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances
from sqlmodel import select

from costguard.actions.runner import ActionRunner
from costguard.actions.settings import SafetySettings
from costguard.actions.stats import ActStats
from costguard.costs.attribution import Attributor
from costguard.model import Instance
from costguard.policy.evaluate import Finding
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import Policy
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.tables import ActionJournalRow

pytestmark = pytest.mark.usefixtures("moto")

POLICY = """\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true, state: running}
    condition: {idle: {below: 5, for: 1h}}
    actions:
      - tag: {set: {"costguard:idle-since": "{now}"}}
      - stop: {grace: 0m}
    limits: {max_actions_per_cycle: 1000}
"""
# spot prices for the warning's savings line: asked once per scope and cycle (cached), so
# only the first batch of the test pays for them
PER_STOP = {"DescribeSpotPriceHistory"}


def _counter(session: boto3.Session) -> Counter[str]:
    calls: Counter[str] = Counter()

    def seen(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    session.events.register("before-parameter-build.ec2", seen)
    return calls


def _findings(policy: Policy, instances: list[Instance]) -> list[Finding]:
    return [Finding(policy=policy, instance=i, holds=True, reason="idle for 1h",
                    evidence="util_gpu 0%", usd_per_hour=1.0) for i in instances]


def _act(db: Database, runner: ActionRunner, policy: Policy, instances: list[Instance],
         calls: Counter[str]) -> Counter[str]:
    now = instances[0].observed_at
    with db.session() as s:
        record_inventory(s, "aws", instances, now, complete=False)
    calls.clear()
    stats: ActStats = runner.run([policy], _findings(policy, instances), now, None)
    assert stats.stopped["idle"] == len(instances)
    assert stats.tagged["idle"] == len(instances)
    return Counter({op: n for op, n in calls.items() if op not in PER_STOP})


@pytest.mark.parametrize(("reuse", "rechecks"), [(None, 1), (0, 2)])
def test_act_stage_calls_do_not_grow_with_the_fleet(
    reuse: float | None, rechecks: int, make_provider: ProviderFactory,
    session: boto3.Session, tmp_path: Path
) -> None:
    run_instances(REGION, count=24)
    calls = _counter(session)
    provider = make_provider()
    instances = sorted(provider.list_instances().instances, key=lambda i: i.instance_id)
    policy = parse_policy_text(POLICY).policies[0]
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    safety = SafetySettings(max_actions_per_cycle=1000, max_usd_per_hour_per_cycle=None)
    if reuse is not None:
        safety = safety.model_copy(update={"recheck_reuse_seconds": reuse})
    runner = ActionRunner(db, {"aws": provider}, Attributor(), safety=safety)

    few = _act(db, runner, policy, instances[:3], calls)
    many = _act(db, runner, policy, instances[3:], calls)

    # one re-check (DescribeInstances) the tag and the stop share (two with reuse off),
    # CreateTags, StopInstances (whose answer gives the states after), and the stopped
    # instances' volumes for the action alerts' "still costs" line
    assert few == many == Counter({"DescribeInstances": rechecks, "CreateTags": 1,
                                   "StopInstances": 1, "DescribeVolumes": 1})
    with db.session() as s:
        stops = list(s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "stop")))
        tags = list(s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "tag")))
    assert sorted(j.status for j in stops) == ["done"] * 24
    assert sorted(j.status for j in tags) == ["done"] * 24
    db.dispose()


def test_an_instance_changed_meanwhile_is_skipped_and_the_rest_stopped(
    make_provider: ProviderFactory, session: boto3.Session, tmp_path: Path
) -> None:
    run_instances(REGION, count=3)
    calls = _counter(session)
    provider = make_provider()
    first, resized, relaunched = sorted(provider.list_instances().instances,
                                        key=lambda i: i.instance_id)
    # what costguard last saw differs from what runs now: a resize and a relaunch
    seen = [first, resized.model_copy(update={"instance_type": "g5.2xlarge"}),
            relaunched.model_copy(update={"launch_time": relaunched.launch_time
                                          - timedelta(minutes=30)})]
    policy = parse_policy_text(POLICY.replace('      - tag: {set: {"costguard:idle-since": '
                                              '"{now}"}}\n', "")).policies[0]
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    runner = ActionRunner(db, {"aws": provider}, Attributor())
    with db.session() as s:
        record_inventory(s, "aws", seen, first.observed_at, complete=False)
    calls.clear()

    stats = runner.run([policy], _findings(policy, seen), first.observed_at, None)

    assert stats.stopped["idle"] == 1 and stats.skipped["idle"] == 2
    assert calls["StopInstances"] == 1
    with db.session() as s:
        rows = {j.instance_id: j for j in s.exec(
            select(ActionJournalRow).where(ActionJournalRow.action == "stop"))}
    assert rows[first.instance_id].status == "done"
    for inst, why in ((resized, "type is now g5.xlarge"), (relaunched, "relaunched")):
        assert rows[inst.instance_id].status == "skipped"
        assert "changed meanwhile" in rows[inst.instance_id].detail
        assert why in rows[inst.instance_id].detail
    live = boto3.client("ec2", region_name=REGION).describe_instances(
        InstanceIds=[resized.instance_id, relaunched.instance_id])
    assert {r["Instances"][0]["State"]["Name"] for r in live["Reservations"]} == {"running"}
    db.dispose()


@pytest.mark.parametrize("action", [
    '      - tag: {set: {"costguard:untagged-since": "{now}"}}\n',
    "      - notify: {to: [owner]}\n",
], ids=["tag", "notify"])
def test_acting_on_a_stopped_instance_reads_no_spot_price(
    action: str, make_provider: ProviderFactory, session: boto3.Session, tmp_path: Path
) -> None:
    """Spot prices are read with the inventory for running instances' types. A stopped
    instance saves nothing on spot: a notice about it prices no saving, and no call is made
    in the policy's session (a notice did make one, holding the store's writer meanwhile)."""
    (raw,) = run_instances(REGION)
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[raw["InstanceId"]])
    calls = _counter(session)
    provider = make_provider()
    (inst,) = provider.list_instances().instances
    policy = parse_policy_text(
        "policies:\n  - name: untagged\n    mode: enforce\n    filters: {state: stopped}\n"
        "    condition: {missing_tags: [team]}\n    actions:\n" + action).policies[0]
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    with db.session() as s:
        record_inventory(s, "aws", [inst], inst.observed_at, complete=False)
    calls.clear()

    ActionRunner(db, {"aws": provider}, Attributor()).run(
        [policy], _findings(policy, [inst]), inst.observed_at, None)

    assert calls["DescribeSpotPriceHistory"] == 0
    db.dispose()
