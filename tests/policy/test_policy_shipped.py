"""The example policies in policies/ are valid and say what their comments promise."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from costguard.errors import PolicyError
from costguard.model import InstanceState, Lifecycle
from costguard.policy.load import load_policy_set, parse_policy_text, validate_paths

POLICIES = Path(__file__).resolve().parents[2] / "policies"


def test_shipped_policies_validate_clean() -> None:
    assert validate_paths([POLICIES]) == []
    names = {p.name for p in load_policy_set([POLICIES]).policies}
    assert names == {"idle-gpu-shutdown", "on-demand-gpu-spot-candidate", "require-team-tag",
                     "underused-gpu", "idle-gpu-workloads", "unattached-volumes",
                     "stopped-instance-disks", "unused-snapshots", "idle-addresses",
                     "unused-reservations", "idle-notebooks"}


def test_the_storage_policies_are_dry_run_warn_first_and_capped() -> None:
    policies = load_policy_set([POLICIES / "storage.yml"]).policies
    assert {p.resource for p in policies} == {"volume", "snapshot", "address"}
    for p in policies:
        assert not p.is_enforced and p.notify_action is not None
        assert p.condition.unused is not None and p.condition.unused.for_ >= timedelta(days=7)
        if p.delete_action is not None:
            assert p.delete_action.grace >= timedelta(days=1)
    volumes = next(p for p in policies if p.name == "unattached-volumes")
    assert volumes.filters.attached is False and volumes.delete_action is not None
    assert volumes.delete_action.snapshot and volumes.limits.max_usd_per_month == 2000
    disks = next(p for p in policies if p.name == "stopped-instance-disks")
    assert disks.delete_action is None and disks.filters.attached is True


def test_the_workload_policy_is_dry_run_and_stops_through_owners_after_a_warning() -> None:
    policy = load_policy_set([POLICIES / "idle-workloads.yml"]).policy("idle-gpu-workloads")
    assert not policy.is_enforced
    assert policy.resource == "workload" and tuple(policy.providers) == ("k8s",)
    assert [str(a.kind) for a in policy.actions] == ["notify", "stop"]
    assert policy.stop_action is not None and policy.stop_action.grace == timedelta(minutes=30)
    assert policy.filters.tags is not None and "costguard:protect" in policy.filters.tags.absent


def test_underused_gpu_policy_is_dry_run_tells_and_marks_never_stops() -> None:
    policy = load_policy_set([POLICIES / "underused-gpu.yml"]).policy("underused-gpu")
    assert not policy.is_enforced
    assert {str(a.kind) for a in policy.actions} == {"notify", "tag"}
    under = policy.condition.underused
    assert under is not None and under.min_monthly_savings_usd == 100
    assert under.overrides() == {"window": timedelta(days=7)}
    assert policy.filters.tags is not None and "costguard:protect" in policy.filters.tags.absent


def test_idle_gpu_policy_is_dry_run_warns_owner_then_stops_after_15_minutes() -> None:
    policy = load_policy_set([POLICIES / "idle-gpu.yml"]).policy("idle-gpu-shutdown")
    assert not policy.is_enforced
    assert policy.filters.gpu is True
    assert policy.filters.tags is not None and "costguard:protect" in policy.filters.tags.absent
    idle = policy.condition.idle
    assert idle is not None and idle.window == timedelta(minutes=45)
    assert idle.missing_data == "not-idle"
    assert policy.notify_action is not None and "owner" in policy.notify_action.to
    assert policy.stop_action is not None and policy.stop_action.grace == timedelta(minutes=15)
    assert [a.kind.value for a in policy.actions] == ["notify", "tag", "stop", "scale_in"]
    # groups are shrunk by their idle members, with the same warning time as a stop
    assert policy.scale_in_action is not None
    assert policy.scale_in_action.grace == timedelta(minutes=15)
    assert policy.limits.max_actions_per_cycle == 20
    assert policy.limits.max_usd_per_hour == 500


def test_idle_gpu_policy_leaves_capacity_blocks_alone() -> None:
    # an EC2 Capacity Block is paid upfront: stopping its idle instance saves nothing
    from datetime import UTC, datetime

    from costguard.model import Instance
    from costguard.policy.evaluate import matches

    policy = load_policy_set([POLICIES / "idle-gpu.yml"]).policy("idle-gpu-shutdown")
    assert policy.filters.lifecycle == (Lifecycle.ON_DEMAND, Lifecycle.SPOT)
    now = datetime(2026, 11, 29, tzinfo=UTC)
    box = Instance(provider="aws", account="1", region="us-east-1", instance_id="i-1",
                   instance_type="p5.48xlarge", state="running", gpu_count=8,
                   launch_time=now, observed_at=now)
    for lifecycle, selected in ((Lifecycle.ON_DEMAND, True), (Lifecycle.SPOT, True),
                                (Lifecycle.CAPACITY_BLOCK, False)):
        assert matches(policy, box.model_copy(update={"lifecycle": lifecycle}), now) is selected


def test_commented_enforce_example_in_idle_gpu_is_valid_once_uncommented() -> None:
    text = (POLICIES / "idle-gpu.yml").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index("  # BEGIN enforce example")
    end = lines.index("  # END enforce example")
    for i in range(start + 1, end):
        assert lines[i].startswith("  # ")
        lines[i] = "  " + lines[i][4:]
    policy_set = parse_policy_text("\n".join(lines) + "\n", "idle-gpu-uncommented.yml")
    enforced = [p for p in policy_set.policies if p.is_enforced]
    assert [p.name for p in enforced] == ["idle-gpu-shutdown-dev"]
    assert enforced[0].stop_action is not None


def test_spot_policy_notifies_long_running_on_demand_gpus_with_savings() -> None:
    policy = load_policy_set([POLICIES / "spot.yml"]).policy("on-demand-gpu-spot-candidate")
    assert policy.filters.lifecycle == (Lifecycle.ON_DEMAND,)
    assert policy.filters.state == (InstanceState.RUNNING,)
    assert policy.condition.running_longer_than == timedelta(hours=6)
    assert policy.stop_action is None
    assert policy.notify_action is not None
    assert "{spot_savings_usd_per_hour}" in (policy.notify_action.message or "")


def test_attribution_file_defines_dimensions_and_tags_untagged_instances() -> None:
    policy_set = load_policy_set([POLICIES / "attribution.yml"])
    assert policy_set.attribution is not None
    assert policy_set.attribution.dimensions["team"].case == "lower"
    policy = policy_set.policy("require-team-tag")
    assert policy.condition.missing_tags == ("team",)
    assert policy.tag_action is not None
    assert "costguard:untagged-since" in policy.tag_action.set_


def test_budgets_file_depends_on_the_team_dimension_from_attribution_file() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_set([POLICIES / "budgets.yml"])
    assert all("unknown dimension 'team'" in e.message for e in caught.value.errors)
    assert len(caught.value.errors) == 3  # two team budgets and the team anomaly rule
    both = load_policy_set([POLICIES / "attribution.yml", POLICIES / "budgets.yml"])
    assert both.budgets[0].name == "research-monthly"
    assert both.budgets[0].alert_at_percent == (50, 80, 100)


def test_the_deploy_roles_read_every_kind_the_shipped_policies_govern() -> None:
    """deploy/iam's files read what policies/ governs, so a first dry run sees it all."""
    from costguard.policy.kinds import KINDS
    from costguard.providers.aws import iam as aws_iam
    from costguard.providers.gcp import iam as gcp_iam

    governed = {p.resource for p in load_policy_set([POLICIES]).policies
                if KINDS[p.resource].own_rights}
    assert set(aws_iam.SHIPPED_STANDING) == set(gcp_iam.SHIPPED_STANDING) == governed
    for flags in aws_iam.DEPLOY_FILES.values():
        assert flags["standing"] == aws_iam.SHIPPED_STANDING
    for role in gcp_iam.ROLE_FILES.values():
        assert role["standing"] == gcp_iam.SHIPPED_STANDING
