"""Stop/start/tag against moto: re-check before, verify after, dry-run through EC2's DryRun."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from costguard.model import ActionOutcome, Instance, InstanceState
from costguard.providers.aws import AwsProvider

pytestmark = pytest.mark.usefixtures("moto")


def _state(instance_id: str) -> str:
    ec2 = boto3.client("ec2", region_name=REGION)
    raw = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return str(raw["State"]["Name"])


def _tags(instance_id: str) -> dict[str, str]:
    ec2 = boto3.client("ec2", region_name=REGION)
    raw = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


def _seen(make_provider: ProviderFactory, count: int = 1) -> tuple[AwsProvider, list[Instance]]:
    run_instances(count=count)
    provider = make_provider()
    return provider, provider.list_instances().instances


def test_stop_stops_a_running_instance_and_reports_the_state_after(
    make_provider: ProviderFactory,
) -> None:
    provider, (inst,) = _seen(make_provider)

    result = provider.stop(inst, dry_run=False)

    assert result.outcome is ActionOutcome.DONE
    assert result.state_after in (InstanceState.STOPPING, InstanceState.STOPPED)
    assert _state(inst.instance_id) in ("stopping", "stopped")


def test_stop_skips_an_instance_that_is_no_longer_running(make_provider: ProviderFactory) -> None:
    provider, (inst,) = _seen(make_provider)
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[inst.instance_id])

    result = provider.stop(inst, dry_run=False)

    assert result.outcome is ActionOutcome.SKIPPED
    assert "stopped now" in result.detail
    assert result.state_after is InstanceState.STOPPED


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"launch_time_shift": timedelta(minutes=-30)}, "relaunched"),
        ({"instance_type": "g5.2xlarge"}, "type is now g5.xlarge"),
    ],
)
def test_stop_skips_an_instance_that_changed_meanwhile(
    make_provider: ProviderFactory, change: dict[str, Any], why: str
) -> None:
    provider, (inst,) = _seen(make_provider)
    # What costguard last saw differs from what runs now: a relaunch, or a resize.
    update: dict[str, Any] = {}
    if "launch_time_shift" in change:
        update["launch_time"] = inst.launch_time + change["launch_time_shift"]
    else:
        update["instance_type"] = change["instance_type"]
    last_seen = inst.model_copy(update=update)

    result = provider.stop(last_seen, dry_run=False)

    assert result.outcome is ActionOutcome.SKIPPED
    assert "changed meanwhile" in result.detail and why in result.detail
    assert _state(inst.instance_id) == "running"


def test_stop_skips_an_instance_that_no_longer_exists(make_provider: ProviderFactory) -> None:
    provider, (inst,) = _seen(make_provider)
    ghost = inst.model_copy(update={"instance_id": "i-0123456789abcdef0"})

    result = provider.stop(ghost, dry_run=False)

    assert result.outcome is ActionOutcome.SKIPPED
    assert "no longer exists" in result.detail


def test_dry_run_verifies_permission_and_changes_nothing(make_provider: ProviderFactory) -> None:
    provider, (inst,) = _seen(make_provider)

    result = provider.stop(inst, dry_run=True)

    assert result.outcome is ActionOutcome.DRY_RUN
    assert result.detail == "permission verified"
    assert _state(inst.instance_id) == "running"


def test_unauthorized_stop_fails_with_a_message_naming_the_permission(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    _, (inst,) = _seen(make_provider)

    def deny(**_: Any) -> tuple[Any, dict[str, Any]]:
        # before-call short-circuits the request (a before-send answer would still let
        # moto's own handler carry the stop out behind it).
        error = {"Code": "UnauthorizedOperation", "Message": "You are not authorized."}
        return AWSResponse("https://ec2", 403, HTTPHeaders(), None), {
            "Error": error,
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }

    session.events.register_first("before-call.ec2.StopInstances", deny)  # type: ignore[arg-type]
    fresh = make_provider()  # clients copy the session's hooks when they are created

    for dry_run in (True, False):
        result = fresh.stop(inst, dry_run=dry_run)
        assert result.outcome is ActionOutcome.FAILED
        assert "ec2:StopInstances" in result.detail
    assert _state(inst.instance_id) == "running"


def test_start_starts_a_stopped_instance_and_skips_a_running_one(
    make_provider: ProviderFactory,
) -> None:
    provider, (to_stop, running) = _seen(make_provider, count=2)
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[to_stop.instance_id])
    stopped = make_provider().list_instances().instances
    by_id = {i.instance_id: i for i in stopped}

    started = provider.start(by_id[running.instance_id], dry_run=False)
    assert started.outcome is ActionOutcome.SKIPPED and "running now" in started.detail

    target = next(i for i in stopped if i.state is InstanceState.STOPPED)
    assert provider.start(target, dry_run=True).outcome is ActionOutcome.DRY_RUN
    result = provider.start(target, dry_run=False)
    assert result.outcome is ActionOutcome.DONE
    assert result.state_after in (InstanceState.PENDING, InstanceState.RUNNING)


def test_set_tags_adds_overwrites_and_removes(make_provider: ProviderFactory) -> None:
    provider, (inst,) = _seen(make_provider)
    boto3.client("ec2", region_name=REGION).create_tags(
        Resources=[inst.instance_id],
        Tags=[{"Key": "team", "Value": "old"}, {"Key": "stale", "Value": "x"}],
    )

    dry = provider.set_tags(inst, {"team": "nlp"}, remove=["stale"], dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN
    assert _tags(inst.instance_id) == {"team": "old", "stale": "x"}

    done = provider.set_tags(inst, {"team": "nlp", "owner": "ada"}, remove=["stale"], dry_run=False)

    assert done.outcome is ActionOutcome.DONE
    assert _tags(inst.instance_id) == {"team": "nlp", "owner": "ada"}


def test_set_tags_skips_a_vanished_instance_and_refuses_reserved_keys(
    make_provider: ProviderFactory,
) -> None:
    provider, (inst,) = _seen(make_provider)
    ghost = inst.model_copy(update={"instance_id": "i-0123456789abcdef0"})

    # EC2 would accept tags for a gone id silently; costguard checks first.
    assert provider.set_tags(ghost, {"a": "b"}, dry_run=False).outcome is ActionOutcome.SKIPPED
    reserved = provider.set_tags(inst, {"aws:owner": "x"}, dry_run=False)
    assert reserved.outcome is ActionOutcome.FAILED and "reserved" in reserved.detail
