"""The AWS stop path's rules one at a time, against botocore's Stubber (EC2's own service
model checks every request and canned answer): what each failure says, what a dry run asks,
what is reported after the call (found by mutation testing: see MUTATION.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_helpers import REGION
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from costguard.errors import ProviderError
from costguard.model import ActionOutcome, Instance, InstanceState, Lifecycle
from costguard.providers.aws import actions

LAUNCHED = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
IID = "i-0abc1234def567890"
SCOPE = f"123456789012/{REGION}/{IID}"
INSTANCE = Instance(
    provider="aws", account="123456789012", region=REGION, zone=f"{REGION}a",
    instance_id=IID, name="trainer", instance_type="g5.xlarge", state=InstanceState.RUNNING,
    lifecycle=Lifecycle.ON_DEMAND, gpu_count=1, launch_time=LAUNCHED,
    observed_at=LAUNCHED + timedelta(days=1))
ASKED = {"InstanceIds": [IID]}


@pytest.fixture
def ec2() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("ec2", region_name=REGION)
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def described(state: str = "running", *, tags: list[dict[str, str]] | None = None,
              launched: datetime = LAUNCHED, itype: str = "g5.xlarge") -> dict[str, Any]:
    raw: dict[str, Any] = {"InstanceId": IID, "InstanceType": itype, "LaunchTime": launched,
                           "State": {"Code": 16, "Name": state}}
    if tags is not None:
        raw["Tags"] = tags
    return {"Reservations": [{"ReservationId": "r-1", "Instances": [raw]}]}


def deny(stub: Stubber, operation: str, code: str = "UnauthorizedOperation") -> None:
    stub.add_client_error(operation, service_error_code=code, service_message="no",
                          http_status_code=403 if code == "UnauthorizedOperation" else 400)


def unreachable(client: Any, method: str) -> None:
    """The network fails under `method` (the Stubber answers every call it is asked)."""
    def fail(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
    setattr(client, method, fail)


def test_stop_done_says_stop_requested_and_start_done_says_start_requested(
    ec2: tuple[Any, Stubber],
) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    stub.add_response("stop_instances", {}, {**ASKED, "DryRun": False})
    stub.add_response("describe_instances", described("stopping"), ASKED)
    stopped = actions.stop(client, INSTANCE, dry_run=False)
    assert (stopped.outcome, stopped.detail, stopped.state_after) == (
        ActionOutcome.DONE, "stop requested", InstanceState.STOPPING)

    stub.add_response("describe_instances", described("stopped"), ASKED)
    stub.add_response("start_instances", {}, {**ASKED, "DryRun": False})
    stub.add_response("describe_instances", described("pending"), ASKED)
    started = actions.start(client, INSTANCE, dry_run=False)
    assert (started.outcome, started.detail, started.state_after) == (
        ActionOutcome.DONE, "start requested", InstanceState.PENDING)


def test_an_instance_gone_right_after_the_stop_is_reported_terminated(
    ec2: tuple[Any, Stubber],
) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    stub.add_response("stop_instances", {}, {**ASKED, "DryRun": False})
    stub.add_response("describe_instances", {"Reservations": []}, ASKED)
    result = actions.stop(client, INSTANCE, dry_run=False)
    assert (result.outcome, result.state_after) == (ActionOutcome.DONE, InstanceState.TERMINATED)


def test_the_state_after_is_unknown_when_the_check_after_fails(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    stub.add_response("stop_instances", {}, {**ASKED, "DryRun": False})
    deny(stub, "describe_instances", "InternalError")
    result = actions.stop(client, INSTANCE, dry_run=False)
    assert (result.outcome, result.state_after) == (ActionOutcome.DONE, None)


def test_a_state_ec2_does_not_document_reads_as_pending_so_nothing_is_stopped(
    ec2: tuple[Any, Stubber],
) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("hibernating"), ASKED)
    result = actions.stop(client, INSTANCE, dry_run=False)
    assert (result.outcome, result.state_after) == (ActionOutcome.SKIPPED, InstanceState.PENDING)
    assert result.detail == "is hibernating now, not running"


def test_start_names_its_own_permission_when_denied(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("stopped"), ASKED)
    deny(stub, "start_instances")
    result = actions.start(client, INSTANCE, dry_run=True)
    assert result.outcome is ActionOutcome.FAILED
    assert result.detail == (
        f"not allowed: costguard's AWS role lacks ec2:StartInstances on {IID} (or a policy "
        "condition denies it); add it from `costguard iam --provider aws --enforce`")


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_refused_call_fails_with_ec2s_reason_and_the_scope(
    ec2: tuple[Any, Stubber], dry_run: bool,
) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    deny(stub, "stop_instances", "IncorrectInstanceState")
    result = actions.stop(client, INSTANCE, dry_run=dry_run)
    assert (result.outcome, result.detail) == (
        ActionOutcome.FAILED, f"aws {SCOPE}: IncorrectInstanceState: no")


def test_an_unreachable_endpoint_fails_the_call_with_the_scope(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    unreachable(client, "stop_instances")
    result = actions.stop(client, INSTANCE, dry_run=False)
    assert result.outcome is ActionOutcome.FAILED
    assert result.detail.startswith(f"aws {SCOPE}: cannot reach the AWS endpoint")


@pytest.mark.parametrize("act", ["stop", "tag"])
def test_a_failed_recheck_fails_the_action_and_says_so(
    ec2: tuple[Any, Stubber], act: str,
) -> None:
    client, stub = ec2
    deny(stub, "describe_instances", "InternalError")
    if act == "stop":
        result = actions.stop(client, INSTANCE, dry_run=False)
    else:
        result = actions.set_tags(client, INSTANCE, {"a": "b"}, [], dry_run=False)
    assert (result.outcome, result.detail) == (
        ActionOutcome.FAILED, f"cannot re-check: aws {SCOPE}: InternalError: no")


def test_describe_one_raises_costguard_errors_naming_the_scope(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    deny(stub, "describe_instances", "InternalError")
    with pytest.raises(ProviderError) as failed:
        actions.describe_one(client, INSTANCE)
    assert (str(failed.value), failed.value.retryable) == (
        f"aws {SCOPE}: InternalError: no", False)
    unreachable(client, "describe_instances")
    with pytest.raises(ProviderError, match=f"^aws {SCOPE}: cannot reach the AWS endpoint"):
        actions.describe_one(client, INSTANCE)


@pytest.mark.parametrize("page", [
    {}, {"Reservations": [{"ReservationId": "r-1"}]}, {"Reservations": []}])
def test_describe_one_reads_answers_without_reservations_or_instances_as_gone(
    ec2: tuple[Any, Stubber], page: dict[str, Any],
) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", page, ASKED)
    assert actions.describe_one(client, INSTANCE) is None


def test_a_relaunch_is_named_with_both_launch_times() -> None:
    later = LAUNCHED + timedelta(hours=3)
    raw = described(launched=later)["Reservations"][0]["Instances"][0]
    assert actions.changed_meanwhile(INSTANCE, raw) == (
        "changed meanwhile: relaunched at 2026-11-01T11:00:00+00:00 "
        "(was 2026-11-01T08:00:00+00:00)")


def test_a_controller_tag_without_a_value_still_means_managed() -> None:
    bare = described(tags=[{"Key": "aws:autoscaling:groupName"}])["Reservations"][0]
    assert actions.changed_meanwhile(INSTANCE, bare["Instances"][0]) == (
        "managed by unknown aws:autoscaling:groupName (tag aws:autoscaling:groupName): "
        "not acted on as if it were alone")
    named = described(tags=[{"Key": "aws:autoscaling:groupName", "Value": "gpu-asg"}])
    why = actions.changed_meanwhile(INSTANCE, named["Reservations"][0]["Instances"][0])
    assert why == ("managed by asg gpu-asg (tag aws:autoscaling:groupName): "
                   "not acted on as if it were alone")


def test_reserved_tag_keys_are_all_named() -> None:
    result = actions.set_tags(None, INSTANCE, {"aws:a": "1", "team": "x"},  # type: ignore[arg-type]
                              ["AWS:b"], dry_run=False)
    assert (result.outcome, result.detail) == (
        ActionOutcome.FAILED, "tag keys starting with 'aws:' are reserved by AWS: AWS:b, aws:a")


def test_tagging_a_gone_instance_is_skipped_as_terminated(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("terminated"), ASKED)
    result = actions.set_tags(client, INSTANCE, {"a": "b"}, [], dry_run=False)
    assert (result.outcome, result.detail, result.state_after) == (
        ActionOutcome.SKIPPED, f"{IID} no longer exists", InstanceState.TERMINATED)


def test_tags_set_and_removed_are_reported_with_the_state(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("stopped"), ASKED)
    stub.add_response("create_tags", {}, {
        "Resources": [IID], "DryRun": False,
        "Tags": [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]})
    stub.add_response("delete_tags", {}, {
        "Resources": [IID], "DryRun": False, "Tags": [{"Key": "c"}, {"Key": "d"}]})
    result = actions.set_tags(client, INSTANCE, {"a": "1", "b": "2"}, ["c", "d"], dry_run=False)
    assert (result.outcome, result.detail, result.state_after) == (
        ActionOutcome.DONE, "set a=1, b=2; removed c, d", InstanceState.STOPPED)


def test_nothing_to_tag_is_said_for_dry_and_real_runs(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    for dry_run, outcome in ((True, ActionOutcome.DRY_RUN), (False, ActionOutcome.DONE)):
        stub.add_response("describe_instances", described("running"), ASKED)
        result = actions.set_tags(client, INSTANCE, {}, [], dry_run=dry_run)
        assert (result.outcome, result.detail) == (outcome, "nothing to change")


def test_a_dry_run_asks_ec2_for_each_tag_call_it_would_make(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    deny(stub, "create_tags", "DryRunOperation")
    only_set = actions.set_tags(client, INSTANCE, {"a": "1"}, [], dry_run=True)
    assert (only_set.outcome, only_set.detail) == (ActionOutcome.DRY_RUN, "permission verified")

    # set allowed, remove denied: the dry run says the removal would fail
    stub.add_response("describe_instances", described("running"), ASKED)
    deny(stub, "create_tags", "DryRunOperation")
    deny(stub, "delete_tags")
    both = actions.set_tags(client, INSTANCE, {"a": "1"}, ["b"], dry_run=True)
    assert both.outcome is ActionOutcome.FAILED
    assert f"lacks ec2:DeleteTags on {IID}" in both.detail


def test_a_denied_set_stops_before_the_removal(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    deny(stub, "create_tags")  # no delete_tags answer queued: a call would fail the stub
    result = actions.set_tags(client, INSTANCE, {"a": "1"}, ["b"], dry_run=False)
    assert result.outcome is ActionOutcome.FAILED
    assert f"lacks ec2:CreateTags on {IID}" in result.detail


def test_tag_detail_spells_out_each_change() -> None:
    assert actions.tag_detail({"a": "1", "b": "2"}, []) == "set a=1, b=2"
    assert actions.tag_detail({}, ["x", "y"]) == "removed x, y"
    assert actions.tag_detail({}, []) == "nothing to change"


def test_an_endpoint_that_ignores_dry_run_is_a_failure_not_a_dry_run(
    ec2: tuple[Any, Stubber],
) -> None:
    # EC2 answers DryRun with an error code; an EC2-compatible endpoint that just says yes
    # may have stopped the instance, which a "dry run" result would hide
    client, stub = ec2
    stub.add_response("describe_instances", described("running"), ASKED)
    stub.add_response("stop_instances", {}, {**ASKED, "DryRun": True})
    result = actions.stop(client, INSTANCE, dry_run=True)
    assert (result.outcome, result.detail) == (
        ActionOutcome.FAILED, f"the endpoint ignored DryRun: stop may have been carried out "
        f"on {IID}; check it, and the endpoint_url setting")
