"""The generated IAM policies: least privilege, and deploy/iam/aws/ in sync with the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costguard.providers.aws.iam import DEPLOY_FILES, READ_ACTIONS, required_iam_policy
from tests.providers.iam_eval import allows

DEPLOY_DIR = Path(__file__).resolve().parents[3] / "deploy" / "iam" / "aws"


def _actions(policy: dict[str, object]) -> set[str]:
    out: set[str] = set()
    for st in policy["Statement"]:  # type: ignore[attr-defined]
        action = st["Action"]
        out |= {action} if isinstance(action, str) else set(action)
    return out


@pytest.mark.parametrize("name", sorted(DEPLOY_FILES))
def test_deploy_files_match_the_generated_policy(name: str) -> None:
    on_disk = json.loads((DEPLOY_DIR / name).read_text())

    assert on_disk == required_iam_policy(**DEPLOY_FILES[name]), (
        f"deploy/iam/aws/{name} is stale: regenerate it with "
        "`python -m costguard.providers.aws.iam deploy/iam/aws`"
    )


def test_read_only_when_nothing_enforces() -> None:
    actions = _actions(required_iam_policy(enforcing=False, tagging=False))

    assert actions == set(READ_ACTIONS)
    assert not any(
        a.split(":")[1].startswith(("Stop", "Start", "Create", "Delete", "Terminate"))
        for a in actions
    )


def test_enforcing_may_stop_and_start_but_never_terminate_protected_or_any() -> None:
    policy = required_iam_policy(enforcing=True, tagging=False)
    stops = [s for s in policy["Statement"] if "ec2:StopInstances" in s["Action"]]

    assert _actions(policy) == set(READ_ACTIONS) | {"ec2:StartInstances", "ec2:StopInstances"}
    assert {s["Resource"] for s in stops} == {"arn:aws:ec2:*:*:instance/*"}
    assert_iam_matches_the_code(policy, "ec2:StopInstances")
    assert_iam_matches_the_code(policy, "ec2:StartInstances")


SPELLINGS = ["true", "True", "TRUE", "yes", "1", "on", "keep", "", " true", "false", "FALSE",
             "False", "0", "no", "No", "off", "OFF", " false "]


def assert_iam_matches_the_code(policy: dict[str, object], action: str,
                                key_prefix: str = "aws:ResourceTag/") -> None:
    """IAM allows `action` exactly where costguard would act: the protect tag absent or read
    as "not protected"; never where costguard protects (stricter only for stray spaces)."""
    from costguard.actions.safety import protects

    assert allows(policy, action, {}, key_prefix)  # no tag: allowed
    for value in SPELLINGS:
        tags = {"costguard:protect": value}
        if protects(tags):
            assert not allows(policy, action, tags, key_prefix), (action, value)
        elif value == value.strip():
            assert allows(policy, action, tags, key_prefix), (action, value)


def test_tagging_cannot_touch_the_protect_tag() -> None:
    policy = required_iam_policy(enforcing=False, tagging=True)
    (tag,) = [s for s in policy["Statement"] if "ec2:CreateTags" in s["Action"]]

    assert set(tag["Action"]) == {"ec2:CreateTags", "ec2:DeleteTags"}
    assert tag["Condition"] == {
        "ForAllValues:StringNotEquals": {"aws:TagKeys": ["costguard:protect"]}
    }


def test_hub_account_may_assume_only_the_named_role() -> None:
    policy = required_iam_policy(False, False, cross_account=True, role_name="Finops")

    (assume,) = [s for s in policy["Statement"] if s["Action"] == "sts:AssumeRole"]
    assert assume["Resource"] == "arn:aws:iam::*:role/Finops"


def test_scale_in_adds_only_terminate_in_group_and_never_on_a_protected_group() -> None:
    plain = _actions(required_iam_policy(enforcing=True, tagging=False))
    policy = required_iam_policy(enforcing=True, tagging=False, scaling_in=True)
    (scale,) = [s for s in policy["Statement"] if s.get("Sid") == "CostguardScaleIn"]

    assert _actions(policy) - plain == {"autoscaling:TerminateInstanceInAutoScalingGroup"}
    assert scale["Resource"].startswith("arn:aws:autoscaling:")
    assert_iam_matches_the_code(policy, "autoscaling:TerminateInstanceInAutoScalingGroup",
                                "autoscaling:ResourceTag/")
    assert "autoscaling:DescribeAutoScalingGroups" in READ_ACTIONS  # owners are always read


def test_parking_may_resize_groups_and_write_only_its_hint_tag() -> None:
    plain = _actions(required_iam_policy(enforcing=True, tagging=False))
    policy = required_iam_policy(enforcing=True, tagging=False, parking=True)
    assert _actions(policy) - plain == {"autoscaling:UpdateAutoScalingGroup",
                                        "autoscaling:CreateOrUpdateTags",
                                        "autoscaling:DeleteTags"}
    assert_iam_matches_the_code(policy, "autoscaling:UpdateAutoScalingGroup",
                                "autoscaling:ResourceTag/")
    (tag,) = [s for s in policy["Statement"] if s.get("Sid") == "CostguardParkedSizesTag"]
    assert tag["Condition"] == {
        "ForAllValues:StringEquals": {"aws:TagKeys": ["costguard:parked-sizes"]}}


def test_a_gpu_host_may_publish_metrics_into_the_agents_namespace_only() -> None:
    from costguard.providers.aws.iam import GPU_HOST_FILE, gpu_host_policy
    from costguard.providers.aws.settings import CloudWatchSettings

    namespace = CloudWatchSettings().gpu_namespace  # where costguard reads the GPU metrics
    policy = gpu_host_policy(namespace)
    assert json.loads((DEPLOY_DIR / GPU_HOST_FILE).read_text()) == gpu_host_policy(), (
        f"deploy/iam/aws/{GPU_HOST_FILE} is stale: regenerate it with "
        "`python -m costguard.providers.aws.iam deploy/iam/aws`")
    assert policy == gpu_host_policy()  # the file is for the default namespace
    assert _actions(policy) == {"cloudwatch:PutMetricData"}

    def publishes(into: str | None) -> bool:
        context = {} if into is None else {"cloudwatch:namespace": into}
        return allows(policy, "cloudwatch:PutMetricData", context, key_prefix="")

    assert publishes(namespace)
    assert not publishes("AppMetrics") and not publishes(None)
    assert not allows(policy, "cloudwatch:PutMetricAlarm", {"cloudwatch:namespace": namespace},
                      key_prefix="")


def test_a_notebook_policy_reads_notebooks_and_when_enforced_stops_only_unprotected_ones(
) -> None:
    """Exactly the SageMaker calls aws/notebooks.py and aws/studio.py make: read rights
    always; StopNotebookInstance/StartNotebookInstance never on a notebook IAM sees as
    protected; DeleteApp (stopping a Studio space) guarded by costguard's re-check of the
    space's tag, which IAM does not see on the app; tags never of costguard:protect."""
    read = required_iam_policy(False, False, standing={"notebook": frozenset()})
    assert {"sagemaker:ListNotebookInstances", "sagemaker:DescribeNotebookInstance",
            "sagemaker:ListApps", "sagemaker:DescribeApp", "sagemaker:ListTags"} <= _actions(read)
    assert not {a for a in _actions(read) if a.startswith("sagemaker:") and (
        a.startswith(("sagemaker:Stop", "sagemaker:Start", "sagemaker:Delete", "sagemaker:Add")))}
    acting = required_iam_policy(True, True, standing={
        "notebook": frozenset({"stop", "start", "tag"})})
    assert_iam_matches_the_code(acting, "sagemaker:StopNotebookInstance")
    assert_iam_matches_the_code(acting, "sagemaker:StartNotebookInstance")
    assert allows(acting, "sagemaker:DeleteApp", {})
    (tag,) = [s for s in acting["Statement"] if s.get("Sid") == "CostguardTagNotebooks"]
    assert tag["Condition"] == {
        "ForAllValues:StringNotEquals": {"aws:TagKeys": ["costguard:protect"]}}
    assert "sagemaker:DeleteNotebookInstance" not in _actions(acting)  # never deleted
