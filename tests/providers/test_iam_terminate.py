"""`costguard iam` grants snapshot and terminate rights only where a policy enables terminate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from costguard.cli import app
from costguard.providers.aws.iam import required_iam_policy
from costguard.providers.gcp.iam import TERMINATE, required_permissions

runner = CliRunner()

STOP_ONLY = """\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true, state: running}
    condition: {idle: {below: 5, for: 45m}}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
"""
TERMINATES = STOP_ONLY + "      - terminate: {after_stopped: 7d, snapshot: true}\n"


def _actions(policy: dict[str, object]) -> set[str]:
    out: set[str] = set()
    for st in policy["Statement"]:  # type: ignore[attr-defined]
        action = st["Action"]
        out |= {action} if isinstance(action, str) else set(action)
    return out


def test_aws_terminate_rights_spare_protected_instances() -> None:
    plain = required_iam_policy(enforcing=True, tagging=True)
    term = required_iam_policy(enforcing=True, tagging=True, terminating=True)

    assert "ec2:TerminateInstances" not in _actions(plain)
    assert _actions(term) - _actions(plain) == {
        "ec2:TerminateInstances", "ec2:CreateSnapshot", "ec2:CreateSnapshots",
        "ec2:DescribeSnapshots"}
    from costguard.actions.safety import protects
    from tests.providers.iam_eval import allows

    for value in ("true", "Yes", "1", "keep", "false", "OFF", "no", "0"):
        protected = protects({"costguard:protect": value})
        assert allows(term, "ec2:TerminateInstances", {"costguard:protect": value}) \
            is not protected, value
    assert allows(term, "ec2:TerminateInstances", {})
    (tag,) = [s for s in term["Statement"] if s.get("Sid") == "CostguardTagNewSnapshots"]
    assert tag["Resource"] == "arn:aws:ec2:*::snapshot/*"  # only snapshots being created


def test_gcp_terminate_permissions_only_when_enforcing() -> None:
    assert not set(TERMINATE) & set(required_permissions(True))
    assert not set(TERMINATE) & set(required_permissions(False, terminating=True))
    assert set(TERMINATE) <= set(required_permissions(True, terminating=True))


def _iam(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
         ) -> tuple[set[str], set[str]]:
    """`costguard iam` for both clouds with `policy` loaded: (AWS actions, GCP permissions)."""
    monkeypatch.chdir(tmp_path)
    for var in ("COSTGUARD_DATABASE_URL", "COSTGUARD_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yml").write_text(policy)
    aws = runner.invoke(app, ["iam", "--provider", "aws"])
    gcp = runner.invoke(app, ["iam", "--provider", "gcp"])
    assert aws.exit_code == 0 and gcp.exit_code == 0, aws.output + gcp.output
    return (_actions(json.loads(aws.output)),
            set(yaml.safe_load(gcp.output)["includedPermissions"]))


@pytest.mark.parametrize(("policy", "terminating"), [(STOP_ONLY, False), (TERMINATES, True)])
def test_costguard_iam_follows_the_loaded_policies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, terminating: bool
) -> None:
    actions, perms = _iam(tmp_path, monkeypatch, policy)
    assert ("ec2:TerminateInstances" in actions) is terminating
    assert ("compute.instances.delete" in perms) is terminating
    assert "compute.instances.stop" in perms


@pytest.mark.parametrize(("policy", "scaling_in"), [
    (STOP_ONLY, False), (STOP_ONLY + "      - scale_in: {grace: 15m}\n", True),
    ((STOP_ONLY + "      - scale_in\n").replace("mode: enforce", "mode: dry-run"), False)])
def test_costguard_iam_grants_scale_in_only_for_an_enforced_scale_in_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, scaling_in: bool
) -> None:
    actions, perms = _iam(tmp_path, monkeypatch, policy)
    assert ("autoscaling:TerminateInstanceInAutoScalingGroup" in actions) is scaling_in
    assert ("compute.instanceGroupManagers.update" in perms) is scaling_in


def test_iam_as_json_gives_the_same_rights_for_both_clouds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    actions, perms = _iam(tmp_path, monkeypatch, TERMINATES)
    aws = runner.invoke(app, ["iam", "--provider", "aws", "--format", "json"])
    gcp = runner.invoke(app, ["iam", "--provider", "gcp", "--format", "json"])
    assert aws.exit_code == gcp.exit_code == 0, aws.output + gcp.output
    assert _actions(json.loads(aws.output)) == actions
    role = json.loads(gcp.output)
    assert set(role["includedPermissions"]) == perms
    assert role["title"] == "costguard (enforcing, terminate)" and role["stage"] == "GA"
