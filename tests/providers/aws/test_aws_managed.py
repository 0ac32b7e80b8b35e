"""Auto Scaling groups on moto: members are read as the group's (sized with one
DescribeAutoScalingGroups per scope), scale-in shrinks the group by a member with
TerminateInstanceInAutoScalingGroup and never below MinSize, and no StopInstances,
StartInstances or TerminateInstances call ever names a member."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import boto3
import pytest
from aws_helpers import AMI, REGION, ProviderFactory, run_instances

from costguard.model import AT_MINIMUM, ActionOutcome, Instance, InstanceState, OwnerKind
from costguard.providers.aws import AwsProvider

pytestmark = pytest.mark.usefixtures("moto")


def _group(name: str = "gpu-asg", *, desired: int = 4, low: int = 1,
           tags: dict[str, str] | None = None) -> list[str]:
    ec2: Any = boto3.client("ec2", region_name=REGION)
    asg: Any = boto3.client("autoscaling", region_name=REGION)
    ec2.create_launch_template(LaunchTemplateName=f"{name}-lt", LaunchTemplateData={
        "ImageId": AMI, "InstanceType": "g5.xlarge"})
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=low, MaxSize=8, DesiredCapacity=desired,
        LaunchTemplate={"LaunchTemplateName": f"{name}-lt", "Version": "$Latest"},
        AvailabilityZones=[f"{REGION}a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": False, "ResourceId": name,
               "ResourceType": "auto-scaling-group"} for k, v in (tags or {}).items()])
    return _members(name)


def _members(name: str) -> list[str]:
    asg: Any = boto3.client("autoscaling", region_name=REGION)
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    return sorted(i["InstanceId"] for i in group[0]["Instances"])


def _desired(name: str) -> int:
    asg: Any = boto3.client("autoscaling", region_name=REGION)
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    return int(group[0]["DesiredCapacity"])


def _count_calls(provider: AwsProvider) -> Counter[str]:
    """Every API call the provider's clients make, by operation (and instance ids named).
    Register before the provider makes its first client: clients copy the session's hooks."""
    calls: Counter[str] = Counter()

    def seen(model: Any, params: dict[str, Any], **_: Any) -> None:
        calls[model.name] += 1  # the API's own parameters, before serialisation
        for iid in params.get("InstanceIds", []) or [params.get("InstanceId")]:
            if iid:
                calls[f"{model.name}:{iid}"] += 1

    provider.clients.base_session.events.register("before-parameter-build", seen)
    return calls


def _listed(provider: AwsProvider) -> dict[str, Instance]:
    return {i.instance_id: i for i in provider.list_instances().instances}


def test_members_are_read_as_the_groups_with_its_sizes_and_tags(
        make_provider: ProviderFactory) -> None:
    members = _group(tags={"team": "research", "costguard:snooze-until": "2030-01-01T00:00Z"})
    pet = run_instances()[0]["InstanceId"]
    provider = make_provider()
    calls = _count_calls(provider)
    listed = _listed(provider)
    assert listed[pet].owner is None
    for iid in members:
        owner = listed[iid].owner
        assert owner is not None and owner.kind is OwnerKind.ASG and owner.name == "gpu-asg"
        assert (owner.desired, owner.min_size, owner.max_size) == (4, 1, 8)
        assert owner.tags["team"] == "research"
        assert owner.via == "tag aws:autoscaling:groupName"
    assert calls["DescribeAutoScalingGroups"] == 1  # one call for the scope's groups


def test_a_scope_without_groups_makes_no_auto_scaling_call(
        make_provider: ProviderFactory) -> None:
    run_instances(count=3)
    provider = make_provider()
    calls = _count_calls(provider)
    assert all(i.owner is None for i in _listed(provider).values())
    assert calls["DescribeAutoScalingGroups"] == 0


def test_scale_in_shrinks_the_group_by_the_member_and_stops_at_min_size(
        make_provider: ProviderFactory) -> None:
    members = _group(desired=3, low=1)
    provider = make_provider()
    calls = _count_calls(provider)
    listed = _listed(provider)
    first = provider.scale_in(listed[members[0]], dry_run=False)
    assert first.outcome is ActionOutcome.DONE, first.detail
    assert "desired 3 -> 2 (MinSize 1)" in first.detail
    assert _desired("gpu-asg") == 2 and members[0] not in _members("gpu-asg")
    assert provider.scale_in(listed[members[1]], dry_run=False).outcome is ActionOutcome.DONE
    last = provider.scale_in(listed[members[2]], dry_run=False)
    assert last.outcome is ActionOutcome.SKIPPED and AT_MINIMUM in last.detail
    assert "lower MinSize" in last.detail
    assert _desired("gpu-asg") == 1 and _members("gpu-asg") == [members[2]]
    assert calls["TerminateInstanceInAutoScalingGroup"] == 2
    assert calls["StopInstances"] == calls["TerminateInstances"] == 0
    gone = boto3.client("ec2", region_name=REGION).describe_instances(
        InstanceIds=[members[0]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert gone in ("shutting-down", "terminated")


def test_scale_in_dry_run_changes_nothing_and_protected_groups_are_left_alone(
        make_provider: ProviderFactory) -> None:
    members = _group(desired=2, low=0)
    protected = _group("kept-asg", desired=2, low=0, tags={"costguard:protect": "yes"})
    provider = make_provider()
    listed = _listed(provider)
    dry = provider.scale_in(listed[members[0]], dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and "would remove" in dry.detail
    assert _desired("gpu-asg") == 2
    kept = provider.scale_in(listed[protected[0]], dry_run=False)
    assert kept.outcome is ActionOutcome.SKIPPED and "costguard:protect" in kept.detail
    assert _desired("kept-asg") == 2


def test_scale_in_skips_a_member_protected_from_scale_in(make_provider: ProviderFactory) -> None:
    members = _group(desired=2, low=0)
    boto3.client("autoscaling", region_name=REGION).set_instance_protection(
        InstanceIds=[members[0]], AutoScalingGroupName="gpu-asg", ProtectedFromScaleIn=True)
    provider = make_provider()
    result = provider.scale_in(_listed(provider)[members[0]], dry_run=False)
    assert result.outcome is ActionOutcome.SKIPPED and "protected from scale-in" in result.detail
    assert _desired("gpu-asg") == 2


def test_the_providers_own_stop_start_and_terminate_refuse_a_member(
        make_provider: ProviderFactory) -> None:
    members = _group(desired=2, low=0)
    provider = make_provider()
    calls = _count_calls(provider)
    listed = _listed(provider)
    member = listed[members[0]]
    # even an Instance value that lost its owner (a stale copy) is refused by the cloud's tags
    stale = member.model_copy(update={"owner": None})
    for inst in (member, stale):
        stopped = provider.stop(inst, dry_run=False)
        assert stopped.outcome is ActionOutcome.SKIPPED and "managed by asg gpu-asg" in \
            stopped.detail
        assert provider.terminate(inst, snapshot=False, dry_run=False).outcome is \
            ActionOutcome.SKIPPED
    many = provider.stop_many([member], dry_run=False)
    assert many[member.instance_id].outcome is ActionOutcome.SKIPPED
    assert calls["StopInstances"] == calls["TerminateInstances"] == 0
    assert calls["DescribeInstances"] >= 3  # the refusals came from fresh reads
    state = boto3.client("ec2", region_name=REGION).describe_instances(
        InstanceIds=[member.instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == InstanceState.RUNNING.value


def _group_tags(name: str) -> dict[str, str]:
    asg: Any = boto3.client("autoscaling", region_name=REGION)
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    return {t["Key"]: t["Value"] for t in group[0].get("Tags", [])}


def _sizes(name: str) -> tuple[int, int, int]:
    asg: Any = boto3.client("autoscaling", region_name=REGION)
    g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return int(g["MinSize"]), int(g["DesiredCapacity"]), int(g["MaxSize"])


def test_resize_group_parks_and_restores_with_the_sizes_as_a_tag_hint(
        make_provider: ProviderFactory) -> None:
    members = _group(desired=3, low=1)
    provider = make_provider()
    calls = _count_calls(provider)
    member = _listed(provider)[members[0]]
    dry = provider.resize_group(member, min_size=0, desired=0, max_size=8, hint="1/3/8",
                                dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and _sizes("gpu-asg") == (1, 3, 8)
    park = provider.resize_group(member, min_size=0, desired=0, max_size=8, hint="1/3/8",
                                 dry_run=False)
    assert park.outcome is ActionOutcome.DONE, park.detail
    assert _sizes("gpu-asg") == (0, 0, 8)
    assert _group_tags("gpu-asg")["costguard:parked-sizes"] == "1/3/8"
    back = provider.resize_group(member, min_size=1, desired=3, max_size=8, hint=None,
                                 dry_run=False)
    assert back.outcome is ActionOutcome.DONE and _sizes("gpu-asg") == (1, 3, 8)
    assert "costguard:parked-sizes" not in _group_tags("gpu-asg")
    assert calls["UpdateAutoScalingGroup"] == 2
    assert calls["StopInstances"] == calls["TerminateInstances"] == 0


def test_resize_group_leaves_a_protected_group_alone(make_provider: ProviderFactory) -> None:
    members = _group(desired=2, low=1, tags={"costguard:protect": "true"})
    provider = make_provider()
    member = _listed(provider)[members[0]]
    result = provider.resize_group(member, min_size=0, desired=0, max_size=8, hint="1/2/8",
                                   dry_run=False)
    assert result.outcome is ActionOutcome.SKIPPED and _sizes("gpu-asg") == (1, 2, 8)


SCALE_IN_POLICY = """\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true, state: running}
    condition: {idle: {below: 5, for: 1h}}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
      - scale_in: {grace: 15m}
"""


def test_an_idle_group_of_four_is_scaled_in_to_its_minimum_over_cycles_and_not_replaced(
        make_provider: ProviderFactory, clock: Any, tmp_path: Any) -> None:
    """The act stage over moto's Auto Scaling: warned, then shrunk one member at a time to
    MinSize 1 by TerminateInstanceInAutoScalingGroup; no StopInstances, no replacement; a
    pet in the same scope is stopped as ever."""
    from costguard.actions.runner import ActionRunner
    from costguard.costs.attribution import Attributor
    from costguard.policy.evaluate import Finding
    from costguard.policy.load import parse_policy_text
    from costguard.store.db import Database
    from costguard.store.inventory import record_inventory

    members = _group(desired=4, low=1)
    pet = run_instances()[0]["InstanceId"]
    provider = make_provider()
    calls = _count_calls(provider)
    policy = parse_policy_text(SCALE_IN_POLICY).policies[0]
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    runner = ActionRunner(db, {"aws": provider}, Attributor())
    for _ in range(4):  # warn, then act at the deadline; each cycle from fresh inventory
        listed = [i for i in provider.list_instances().instances
                  if i.state is InstanceState.RUNNING]
        with db.session() as s:
            record_inventory(s, "aws", listed, clock.now(), complete=True)
        runner.run([policy], [Finding(policy=policy, instance=i, holds=True,
                                      reason="idle for 1h", evidence="sm_active 0%",
                                      usd_per_hour=1.0) for i in listed], clock.now(), None)
        clock.advance(timedelta(minutes=20))
    assert _desired("gpu-asg") == 1 and len(_members("gpu-asg")) == 1
    assert calls["TerminateInstanceInAutoScalingGroup"] == 3
    assert calls["StopInstances"] == 1 and calls[f"StopInstances:{pet}"] == 1
    assert not any(calls[f"StopInstances:{m}"] for m in members)
    assert calls["TerminateInstances"] == 0


def test_group_sizes_are_reused_for_their_max_age_and_forgotten_when_costguard_resizes(
        make_provider: ProviderFactory, clock: Any) -> None:
    members = _group(desired=3, low=1)
    provider = make_provider(group_sizes_max_age_minutes=15)
    calls = _count_calls(provider)
    assert _listed(provider)[members[0]].owner.desired == 3  # type: ignore[union-attr]
    clock.advance(timedelta(minutes=5))
    _listed(provider)
    assert calls["DescribeAutoScalingGroups"] == 1  # the next cycle reuses the read
    boto3.client("autoscaling", region_name=REGION).update_auto_scaling_group(
        AutoScalingGroupName="gpu-asg", MaxSize=9)  # changed outside costguard
    clock.advance(timedelta(minutes=11))
    assert _listed(provider)[members[0]].owner.max_size == 9  # type: ignore[union-attr]
    assert calls["DescribeAutoScalingGroups"] == 2  # older than 15 minutes: read again
    done = provider.scale_in(_listed(provider)[members[0]], dry_run=False)
    assert done.outcome is ActionOutcome.DONE  # (scale-in read the group itself first)
    before = calls["DescribeAutoScalingGroups"]
    assert _listed(provider)[members[1]].owner.desired == 2  # type: ignore[union-attr]
    assert calls["DescribeAutoScalingGroups"] == before + 1  # resized by costguard: read


def test_group_sizes_max_age_0_reads_every_cycle(make_provider: ProviderFactory) -> None:
    _group()
    provider = make_provider(group_sizes_max_age_minutes=0)
    calls = _count_calls(provider)
    _listed(provider)
    _listed(provider)
    assert calls["DescribeAutoScalingGroups"] == 2
