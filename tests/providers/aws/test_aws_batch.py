"""Batched describe/stop/tag against moto: chunks of 1,000 ids per (account, region) call."""

from __future__ import annotations

from collections import Counter
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.aws import AwsProvider
from costguard.providers.base import BatchActions, Describes

pytestmark = pytest.mark.usefixtures("moto")

OTHER = "us-west-2"
GHOST = "i-0123456789abcdef0"


def _count(session: boto3.Session) -> Counter[str]:
    """Calls by (operation, region, dry run), counted before they are sent."""
    calls: Counter[str] = Counter()

    def seen(model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        region = context.get("client_region", "?")
        calls[f"{model.name} {region}{' dry' if params.get('DryRun') else ''}"] += 1

    session.events.register("before-parameter-build.ec2", seen)
    return calls


def _live(region: str, ids: list[str]) -> dict[str, tuple[str, dict[str, str]]]:
    ec2: Any = boto3.client("ec2", region_name=region)
    out = {}
    for res in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
        for raw in res["Instances"]:
            out[raw["InstanceId"]] = (raw["State"]["Name"],
                                      {t["Key"]: t["Value"] for t in raw.get("Tags", [])})
    return out


def _fleet(make_provider: ProviderFactory, session: boto3.Session, big: int, small: int
           ) -> tuple[AwsProvider, list[Instance], Counter[str]]:
    run_instances(REGION, count=big)
    run_instances(OTHER, count=small)
    calls = _count(session)
    provider = make_provider(regions=[REGION, OTHER])
    instances = provider.list_instances().instances
    assert len(instances) == big + small
    calls.clear()
    return provider, instances, calls


def _per_region(calls: Counter[str], op: str) -> dict[str, int]:
    out: Counter[str] = Counter()
    for key, n in calls.items():
        name, region, *_ = key.split(" ")
        if name == op:
            out[region] += n
    return dict(out)


def test_the_provider_implements_both_batch_capabilities(make_provider: ProviderFactory) -> None:
    provider = make_provider()
    assert isinstance(provider, Describes) and isinstance(provider, BatchActions)


@pytest.mark.slow
def test_describe_and_stop_many_chunk_per_region(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    provider, instances, calls = _fleet(make_provider, session, big=1003, small=4)

    fresh = provider.describe_many(instances)

    assert set(fresh) == {i.instance_id for i in instances}
    assert all(f is not None and f.state is InstanceState.RUNNING for f in fresh.values())
    assert _per_region(calls, "DescribeInstances") == {REGION: 2, OTHER: 1}

    calls.clear()
    results = provider.stop_many(instances, dry_run=False)

    assert {r.outcome for r in results.values()} == {ActionOutcome.DONE}
    assert set(results) == {i.instance_id for i in instances}
    assert {r.state_after for r in results.values()} <= {InstanceState.STOPPING,
                                                           InstanceState.STOPPED}
    assert _per_region(calls, "StopInstances") == {REGION: 2, OTHER: 1}
    # the states after are StopInstances' answer: nothing more is read
    assert _per_region(calls, "DescribeInstanceStatus") == {}
    assert _per_region(calls, "DescribeInstances") == {}
    live = _live(REGION, [i.instance_id for i in instances if i.region == REGION])
    assert {state for state, _ in live.values()} <= {"stopping", "stopped"}


def test_stop_many_skips_a_vanished_id_and_stops_the_rest(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    provider, instances, calls = _fleet(make_provider, session, big=3, small=0)
    ghost = instances[0].model_copy(update={"instance_id": GHOST})

    results = provider.stop_many([*instances, ghost], dry_run=False)

    assert results[GHOST].outcome is ActionOutcome.SKIPPED
    assert "no longer exists" in results[GHOST].detail
    assert all(results[i.instance_id].outcome is ActionOutcome.DONE for i in instances)
    # the call naming the ghost failed as a whole; it went again without it
    assert calls[f"StopInstances {REGION}"] == 2
    assert provider.describe_many([ghost]) == {GHOST: None}


def test_dry_run_proves_permission_per_chunk_and_a_denied_region_fails_alone(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    run_instances(REGION, count=3)
    run_instances(OTHER, count=2)

    def deny_other(model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any
                   ) -> tuple[Any, dict[str, Any]] | None:
        if context.get("client_region") != OTHER:
            return None
        error = {"Code": "UnauthorizedOperation", "Message": "You are not authorized."}
        return AWSResponse("https://ec2", 403, HTTPHeaders(), None), {
            "Error": error, "ResponseMetadata": {"HTTPStatusCode": 403}}

    session.events.register_first("before-call.ec2.StopInstances", deny_other)  # type: ignore[arg-type]
    calls = _count(session)
    provider = make_provider(regions=[REGION, OTHER])
    instances = provider.list_instances().instances
    calls.clear()

    results = provider.stop_many(instances, dry_run=True)

    by_region = {i.instance_id: i.region for i in instances}
    for iid, result in results.items():
        if by_region[iid] == REGION:
            assert result.outcome is ActionOutcome.DRY_RUN
            assert result.detail == "permission verified"
        else:
            assert result.outcome is ActionOutcome.FAILED
            assert "ec2:StopInstances" in result.detail and OTHER in result.detail
    assert calls[f"StopInstances {REGION} dry"] == 1  # one call proves the whole chunk
    assert calls[f"StopInstances {OTHER} dry"] == 1
    assert "DescribeInstances" not in " ".join(calls)  # nothing to verify after a dry run
    live = _live(REGION, [i.instance_id for i in instances if i.region == REGION])
    assert {state for state, _ in live.values()} == {"running"}


def test_set_tags_many_tags_and_untags_in_one_call_per_region(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    provider, instances, calls = _fleet(make_provider, session, big=5, small=2)
    boto3.client("ec2", region_name=REGION).create_tags(
        Resources=[i.instance_id for i in instances if i.region == REGION],
        Tags=[{"Key": "stale", "Value": "x"}])

    dry = provider.set_tags_many(instances, {"team": "nlp"}, remove=["stale"], dry_run=True)
    assert {r.outcome for r in dry.values()} == {ActionOutcome.DRY_RUN}
    assert calls[f"CreateTags {REGION} dry"] == 1 and calls[f"DeleteTags {REGION} dry"] == 1
    calls.clear()

    done = provider.set_tags_many(instances, {"team": "nlp"}, remove=["stale"], dry_run=False)

    assert {r.outcome for r in done.values()} == {ActionOutcome.DONE}
    assert _per_region(calls, "CreateTags") == {REGION: 1, OTHER: 1}
    assert _per_region(calls, "DeleteTags") == {REGION: 1, OTHER: 1}
    live = _live(REGION, [i.instance_id for i in instances if i.region == REGION])
    assert all(tags == {"team": "nlp"} for _, tags in live.values())


def test_set_tags_many_refuses_reserved_keys_and_skips_a_vanished_id(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    provider, instances, calls = _fleet(make_provider, session, big=2, small=0)
    ghost = instances[0].model_copy(update={"instance_id": GHOST})

    reserved = provider.set_tags_many(instances, {"aws:owner": "x"}, dry_run=False)
    assert {r.outcome for r in reserved.values()} == {ActionOutcome.FAILED}
    assert not calls  # refused before any call

    # moto, like EC2 for a malformed or unknown id, may accept or refuse tags for a ghost;
    # either way the real instances are tagged and the ghost is not reported done
    results = provider.set_tags_many([*instances, ghost], {"k": "v"}, dry_run=False)
    assert all(results[i.instance_id].outcome is ActionOutcome.DONE for i in instances)
    assert results[GHOST].outcome in (ActionOutcome.SKIPPED, ActionOutcome.DONE)


def test_describe_reports_a_changed_instance_as_it_is_now(make_provider: ProviderFactory) -> None:
    run_instances(REGION, count=1)
    provider = make_provider()
    (inst,) = provider.list_instances().instances
    boto3.client("ec2", region_name=REGION).create_tags(
        Resources=[inst.instance_id], Tags=[{"Key": "costguard:protect", "Value": "true"}])

    fresh = provider.describe(inst)

    assert fresh is not None and fresh.tags["costguard:protect"] == "true"
    assert (fresh.gpu_count, fresh.launch_time) == (inst.gpu_count, inst.launch_time)


def _stop_one_left_running(
    make_provider: ProviderFactory, session: boto3.Session, *, answer_states: bool
) -> tuple[str, dict[str, ActionResult], Counter[str]]:
    """Three instances stopped, of which EC2 accepts the first but leaves it running; its
    answer lists every id's state (`answer_states`: the first as running) or none. The id
    left running, the results and the calls of the stop."""
    run_instances(REGION, count=3)
    left: set[str] = set()

    def accept_but_leave_one(params: dict[str, Any], **_: Any
                             ) -> tuple[Any, dict[str, Any]] | None:
        body = params["body"]  # the serialized query: InstanceId.1, InstanceId.2, ...
        ids = [v for k, v in sorted(body.items()) if k.startswith("InstanceId.")]
        if not left:  # the first id: left running
            left.add(ids[0])
        rest = [i for i in ids if i not in left]
        if body.get("DryRun") == "true" or not rest:
            return None
        boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=rest)
        states = [{"InstanceId": i, "CurrentState": {"Code": 16 if i in left else 64,
                                                     "Name": "running" if i in left
                                                     else "stopping"},
                   "PreviousState": {"Code": 16, "Name": "running"}} for i in ids]
        return AWSResponse("https://ec2", 200, HTTPHeaders(), None), {
            "StoppingInstances": states if answer_states else [],
            "ResponseMetadata": {"HTTPStatusCode": 200}}

    session.events.register_first("before-call.ec2.StopInstances", accept_but_leave_one)  # type: ignore[arg-type]
    calls = _count(session)
    provider = make_provider(regions=[REGION])
    instances = provider.list_instances().instances
    calls.clear()
    results = provider.stop_many(instances, dry_run=False)
    (one,) = left
    return one, results, calls


def test_a_stop_ec2_accepted_but_did_not_happen_is_failed_by_the_state_read_after(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    left, results, calls = _stop_one_left_running(make_provider, session, answer_states=False)

    assert results[left].outcome is ActionOutcome.FAILED
    assert results[left].state_after is InstanceState.RUNNING
    assert "still running" in results[left].detail
    others = [r for iid, r in results.items() if iid != left]
    assert len(others) == 2 and {r.outcome for r in others} == {ActionOutcome.DONE}
    assert {r.state_after for r in others} <= {InstanceState.STOPPING, InstanceState.STOPPED}
    assert calls[f"DescribeInstanceStatus {REGION}"] == 1


def test_a_stop_ec2_answers_with_the_instance_still_running_is_failed_without_a_read(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    """The states after come from StopInstances' own answer: one it gives as running is a
    failed stop, and nothing is read after."""
    left, results, calls = _stop_one_left_running(make_provider, session, answer_states=True)

    assert (results[left].outcome, results[left].state_after) == (ActionOutcome.FAILED,
                                                                 InstanceState.RUNNING)
    assert {r.outcome for iid, r in results.items() if iid != left} == {ActionOutcome.DONE}
    assert calls[f"DescribeInstanceStatus {REGION}"] == 0
