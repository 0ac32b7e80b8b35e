"""Inventory against moto: paging, lifecycle, GPU details, tags, accounts, gaps, throttling."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, SPOT, ProviderFactory, Slept, run_instances, xml_error
from botocore.awsrequest import AWSPreparedRequest
from botocore.exceptions import EndpointConnectionError

from costguard.clock import ManualClock
from costguard.model import InstanceState, Lifecycle
from costguard.providers.base import Provider
from costguard.store import control
from costguard.store.db import Database
from costguard.store.memory import StoreMemory

pytestmark = pytest.mark.usefixtures("moto")


def _count_calls(session: boto3.Session, event: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    session.events.register(event, lambda params, **_: seen.append(dict(params)))
    return seen


def test_provider_satisfies_the_protocol(make_provider: ProviderFactory) -> None:
    assert isinstance(make_provider(), Provider)


def test_inventory_follows_next_token_across_pages_of_single_instance_reservations(
    make_provider: ProviderFactory, session: boto3.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # moto counts MaxResults in reservations: one instance per reservation makes paging real.
    # The page is shrunk from 1000 so the loop is exercised without launching 1000 instances.
    monkeypatch.setattr("costguard.providers.aws.inventory.PAGE_SIZE", 5)
    launched = {run_instances(itype="m5.large")[0]["InstanceId"] for _ in range(12)}
    calls = _count_calls(session, "provide-client-params.ec2.DescribeInstances")

    inventory = make_provider().list_instances()

    assert {i.instance_id for i in inventory.instances} == launched
    assert inventory.gaps == []
    assert [c.get("MaxResults") for c in calls] == [5, 5, 5]
    assert "NextToken" not in calls[0] and calls[1]["NextToken"] and calls[2]["NextToken"]


def test_inventory_asks_for_full_pages_of_one_thousand(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    run_instances(count=3)
    calls = _count_calls(session, "provide-client-params.ec2.DescribeInstances")

    assert len(make_provider().list_instances().instances) == 3
    assert [c.get("MaxResults") for c in calls] == [1000]


def test_spot_is_decided_client_side_without_the_lifecycle_filter(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    spot = run_instances(count=2, **SPOT)
    on_demand = run_instances(count=3)
    calls = _count_calls(session, "provide-client-params.ec2.DescribeInstances")

    by_id = {i.instance_id: i for i in make_provider().list_instances().instances}

    assert {by_id[s["InstanceId"]].lifecycle for s in spot} == {Lifecycle.SPOT}
    assert {by_id[s["InstanceId"]].lifecycle for s in on_demand} == {Lifecycle.ON_DEMAND}
    assert all("Filters" not in c for c in calls)


def test_gpu_details_come_from_instance_types_with_shipped_fallback_for_unknown_types(
    make_provider: ProviderFactory,
) -> None:
    # moto's DescribeInstanceTypes knows g5 and p4d but not p3.2xlarge (it fails the batch).
    ids = {
        t: run_instances(itype=t)[0]["InstanceId"]
        for t in ("g5.xlarge", "p4d.24xlarge", "p3.2xlarge", "m5.large")
    }
    provider = make_provider()

    by_id = {i.instance_id: i for i in provider.list_instances().instances}

    g5, p4d, p3, m5 = (
        by_id[ids[t]] for t in ("g5.xlarge", "p4d.24xlarge", "p3.2xlarge", "m5.large")
    )
    assert (g5.gpu_count, g5.gpu_model, g5.gpu_memory_mib) == (1, "NVIDIA A10G", 22888)
    assert (p4d.gpu_count, p4d.gpu_model, p4d.gpu_memory_mib) == (8, "NVIDIA A100", 40960)
    assert (p3.gpu_count, p3.gpu_model) == (1, "NVIDIA V100")
    assert (m5.gpu_count, m5.gpu_model, m5.has_gpu) == (0, None, False)
    # The unknown type was dropped from the batch and asked again: two calls, then cached.
    assert provider.gpu_types.calls == 2
    provider.list_instances()
    assert provider.gpu_types.calls == 2


def test_instance_types_are_described_one_hundred_per_call() -> None:
    from costguard.providers.aws.gpu_types import GpuTypeCatalog

    ec2 = boto3.client("ec2", region_name=REGION)
    # moto answers with every type in one page.
    names = sorted(t["InstanceType"] for t in ec2.describe_instance_types()["InstanceTypes"])
    names = names[:250]
    catalog = GpuTypeCatalog()

    specs = catalog.resolve(ec2, REGION, set(names))

    assert catalog.calls == 3
    assert set(specs) == set(names)


def test_tags_name_state_reason_and_zone_are_read(make_provider: ProviderFactory) -> None:
    iid = run_instances()[0]["InstanceId"]
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.create_tags(
        Resources=[iid], Tags=[{"Key": "Name", "Value": "trainer"}, {"Key": "team", "Value": "nlp"}]
    )
    ec2.stop_instances(InstanceIds=[iid])

    (inst,) = make_provider().list_instances().instances

    assert inst.tags == {"Name": "trainer", "team": "nlp"}
    assert inst.name == "trainer"
    assert inst.state is InstanceState.STOPPED
    assert inst.state_reason == "Client.UserInitiatedShutdown"
    assert inst.zone is not None and inst.zone.startswith(REGION)
    assert inst.account == "123456789012" and inst.region == REGION
    assert inst.launch_time.tzinfo is not None


def _assumed_ec2(account: str) -> Any:
    creds = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/CostguardRole", RoleSessionName="seed"
    )["Credentials"]
    return boto3.client(
        "ec2",
        region_name=REGION,
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )


def test_other_accounts_are_read_through_assume_role_with_external_id(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    other = "111111111111"
    theirs = _assumed_ec2(other).run_instances(
        ImageId="ami-12c6146b", MinCount=2, MaxCount=2, InstanceType="g5.xlarge"
    )["Instances"]
    ours = run_instances()
    assumed = _count_calls(session, "provide-client-params.sts.AssumeRole")

    inventory = make_provider(
        accounts=[{"id": "123456789012"}, {"id": other}], external_id="s3cret-id"
    ).list_instances()

    by_account: dict[str, set[str]] = {}
    for inst in inventory.instances:
        by_account.setdefault(inst.account, set()).add(inst.instance_id)
    assert by_account == {
        "123456789012": {ours[0]["InstanceId"]},
        other: {i["InstanceId"] for i in theirs},
    }
    assert [(c["RoleArn"], c["ExternalId"]) for c in assumed] == [
        (f"arn:aws:iam::{other}:role/CostguardRole", "s3cret-id")
    ]


def test_organizations_discovery_lists_active_accounts(make_provider: ProviderFactory) -> None:
    org = boto3.client("organizations", region_name=REGION)
    org.create_organization(FeatureSet="ALL")
    member = org.create_account(Email="ml@example.com", AccountName="ml")["CreateAccountStatus"]
    member_id = member["AccountId"]
    _assumed_ec2(member_id).run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge"
    )

    inventory = make_provider(discover_accounts="organizations").list_instances()

    assert {i.account for i in inventory.instances} == {member_id}
    assert inventory.gaps == []


def test_failed_assume_role_is_a_gap_for_that_account_and_the_rest_go_on(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    denied = "222222222222"
    ours = run_instances()[0]["InstanceId"]

    def deny(request: AWSPreparedRequest, **_: Any) -> Any:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        if "AssumeRole" in body and denied in body:
            return xml_error(
                request, 403, "AccessDenied", "not authorized to perform sts:AssumeRole"
            )
        return None

    session.events.register_first("before-send.sts.AssumeRole", deny)

    inventory = make_provider(accounts=[{"id": "123456789012"}, {"id": denied}]).list_instances()

    assert [i.instance_id for i in inventory.instances] == [ours]
    (gap,) = inventory.gaps
    assert gap.scope == denied
    assert "AccessDenied" in gap.error and "trust policy" in gap.error


def test_unreachable_region_is_a_gap_for_that_scope_only(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    run_instances(region="us-east-1")
    west = run_instances(region="us-west-2")[0]["InstanceId"]

    def unreachable(request: AWSPreparedRequest, **_: Any) -> None:
        if "us-east-1" in (request.url or ""):
            raise EndpointConnectionError(endpoint_url=request.url)

    session.events.register_first("before-send.ec2.DescribeInstances", unreachable)

    inventory = make_provider(regions=["us-east-1", "us-west-2"], max_attempts=2).list_instances()

    assert [i.instance_id for i in inventory.instances] == [west]
    (gap,) = inventory.gaps
    assert gap.scope == "123456789012/us-east-1"
    assert "cannot reach" in gap.error


def test_throttling_is_retried_and_the_cycle_completes(
    make_provider: ProviderFactory, session: boto3.Session, no_sleep: Slept
) -> None:
    launched = {i["InstanceId"] for i in run_instances(count=5)}
    throttled: list[str] = []

    def throttle(request: AWSPreparedRequest, **_: Any) -> Any:
        if len(throttled) < 3:
            throttled.append(request.url or "")
            return xml_error(request, 503, "RequestLimitExceeded", "Request limit exceeded.")
        return None

    session.events.register_first("before-send.ec2.DescribeInstances", throttle)

    inventory = make_provider(max_attempts=5).list_instances()

    assert {i.instance_id for i in inventory.instances} == launched
    assert inventory.gaps == []
    assert len(throttled) == 3
    assert len(no_sleep.backoffs) == 3


def test_throttling_past_the_retry_budget_is_a_gap_not_a_crash(
    make_provider: ProviderFactory, session: boto3.Session, no_sleep: Slept
) -> None:
    run_instances(region="us-west-2")

    def always(request: AWSPreparedRequest, **_: Any) -> Any:
        if "us-east-1" in (request.url or ""):
            return xml_error(request, 400, "RequestLimitExceeded", "Request limit exceeded.")
        return None

    session.events.register_first("before-send.ec2.DescribeInstances", always)

    inventory = make_provider(regions=["us-east-1", "us-west-2"], max_attempts=3).list_instances()

    assert len(inventory.instances) == 1
    (gap,) = inventory.gaps
    assert "throttled" in gap.error and gap.scope.endswith("us-east-1")


def test_regions_all_asks_describe_regions(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    run_instances(region="eu-west-1")
    run_instances(region="ap-south-1")
    asked = _count_calls(session, "provide-client-params.ec2.DescribeRegions")

    def opted_in_only(parsed: dict[str, Any], **_: Any) -> None:
        # An account with two regions enabled (moto would list all of its ~38).
        parsed["Regions"] = [
            r for r in parsed["Regions"] if r["RegionName"] in ("eu-west-1", "us-east-1")
        ]

    session.events.register("after-call.ec2.DescribeRegions", opted_in_only)

    inventory = make_provider(regions="all", max_workers=16).list_instances()

    assert len(asked) == 1
    assert [i.region for i in inventory.instances] == ["eu-west-1"]


def test_instance_types_described_in_one_region_serve_the_others() -> None:
    from costguard.providers.aws.gpu_types import GpuTypeCatalog

    catalog = GpuTypeCatalog()
    east = boto3.client("ec2", region_name=REGION)
    west = boto3.client("ec2", region_name="us-west-2")

    first = catalog.resolve(east, REGION, {"g5.xlarge", "p4d.24xlarge"})
    second = catalog.resolve(west, "us-west-2", {"g5.xlarge", "p4d.24xlarge"})

    assert catalog.calls == 1
    assert second == first and first["p4d.24xlarge"].count == 8
    # a type one region could not describe is asked again in the next region
    catalog.resolve(east, REGION, {"p3.2xlarge"})
    catalog.resolve(west, "us-west-2", {"p3.2xlarge"})
    assert catalog.calls == 3


def test_a_restarted_provider_reads_instance_types_from_the_store_not_the_api(
    make_provider: ProviderFactory, tmp_path: Path, clock: ManualClock,
) -> None:
    ids = {t: run_instances(itype=t)[0]["InstanceId"]
           for t in ("g5.xlarge", "p4d.24xlarge", "p3.2xlarge")}
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    said = clock.now().date().isoformat()
    first = make_provider()
    first.attach_memory(StoreMemory(db, "aws", clock))
    before = {i.instance_id: i for i in first.list_instances().instances}
    assert first.gpu_types.calls == 2
    with db.session() as s:  # what DescribeInstanceTypes said; the shipped fallback is not kept
        assert sorted(json.loads(control.get(s, "memory:aws:gpu_types") or "{}")) == [
            "g5.xlarge", "p4d.24xlarge"]

    again = make_provider()  # a new process: nothing cached in memory
    again.attach_memory(StoreMemory(db, "aws", clock))
    after = {i.instance_id: i for i in again.list_instances().instances}
    # nothing is asked: not the described types, nor p3.2xlarge, which this region said
    # it does not know (the shipped table's entry serves)
    assert again.gpu_types.calls == 0
    for iid in ids.values():
        assert (after[iid].gpu_count, after[iid].gpu_model, after[iid].gpu_memory_mib) == (
            before[iid].gpu_count, before[iid].gpu_model, before[iid].gpu_memory_mib)
    # a week on, the region is asked about p3.2xlarge again (it may know it by then)
    clock.advance(timedelta(days=7))
    later = make_provider()
    later.attach_memory(StoreMemory(db, "aws", clock))
    later.list_instances()
    assert later.gpu_types.calls == 1
    with db.session() as s:
        assert json.loads(control.get(s, "memory:aws:gpu_types_undescribed") or "{}") == {
            REGION: {"p3.2xlarge": clock.now().date().isoformat()}}
    assert said != clock.now().date().isoformat()


def test_a_damaged_stored_type_is_asked_for_again_not_trusted(
    make_provider: ProviderFactory, tmp_path: Path,
) -> None:
    iid = run_instances(itype="g5.xlarge")[0]["InstanceId"]
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    clock = ManualClock(datetime(2026, 11, 2, tzinfo=UTC))
    StoreMemory(db, "aws", clock).put("gpu_types", {"g5.xlarge": {"count": "many"}})
    provider = make_provider()
    provider.attach_memory(StoreMemory(db, "aws", clock))
    got = {i.instance_id: i for i in provider.list_instances().instances}[iid]
    assert provider.gpu_types.calls == 1
    assert (got.gpu_count, got.gpu_model) == (1, "NVIDIA A10G")
    with db.session() as s:  # a row that is not JSON at all: forgotten, not a failing cycle
        control.put(s, "memory:aws:gpu_types", "{truncated", clock.now())
    again = make_provider()
    again.attach_memory(StoreMemory(db, "aws", clock))
    assert again.list_instances().instances and again.gpu_types.calls == 1


def test_remembered_undescribed_types_expire_and_bad_entries_are_skipped() -> None:
    from costguard.providers.aws.gpu_types import GpuTypeCatalog

    today = datetime(2026, 11, 20, tzinfo=UTC).date()
    catalog = GpuTypeCatalog(lambda: today)
    catalog.learn_undescribed({
        REGION: {"p3.2xlarge": "2026-11-19", "p2.xlarge": "2026-11-13",  # a week: expired
                 "g3.4xlarge": "yesterday"},
        "us-west-2": ["p3.2xlarge"],
    })
    assert catalog.undescribed() == {REGION: {"p3.2xlarge": "2026-11-19"}}
    east = boto3.client("ec2", region_name=REGION)
    spec = catalog.resolve(east, REGION, {"p3.2xlarge"})["p3.2xlarge"]
    assert catalog.calls == 0 and (spec.count, spec.model) == (1, "NVIDIA V100")


def test_trainium_and_inferentia_are_accelerators_from_their_neuron_info(
    make_provider: ProviderFactory,
) -> None:
    ids = {t: run_instances(itype=t)[0]["InstanceId"]
           for t in ("trn1.32xlarge", "inf2.xlarge", "inf1.6xlarge")}
    provider = make_provider()
    by_id = {i.instance_id: i for i in provider.list_instances().instances}
    trn, inf2, inf1 = (by_id[ids[t]] for t in ("trn1.32xlarge", "inf2.xlarge", "inf1.6xlarge"))
    # NeuronInfo's devices (chips), named as the API names them, one device's memory
    assert (trn.gpu_count, trn.gpu_model, trn.gpu_memory_mib) == (16, "AWS Trainium", 32768)
    assert (inf2.gpu_count, inf2.gpu_model) == (1, "AWS Inferentia2")
    assert (inf1.gpu_count, inf1.gpu_model) == (4, "AWS Inferentia")
    assert trn.has_gpu  # idle policies judge them (no data from them is never idle)


def test_every_accelerated_type_ec2_lists_has_a_shipped_entry() -> None:
    """The shipped tables serve where a region's DescribeInstanceTypes does not know a
    type: every type moto's AWS-derived data lists with GPUs or Neuron devices is there,
    with the API's own count and model."""
    from costguard.providers.aws.gpu_types import shipped_gpu_table, spec_from_type_info

    ec2 = boto3.client("ec2", region_name=REGION)
    shipped = shipped_gpu_table()
    listed = [t for page in ec2.get_paginator("describe_instance_types").paginate()
              for t in page["InstanceTypes"] if t.get("GpuInfo") or t.get("NeuronInfo")]
    assert len(listed) > 70
    missing = sorted(t["InstanceType"] for t in listed if t["InstanceType"] not in shipped)
    assert missing == []
    for info in listed:
        api = spec_from_type_info(dict(info))
        table = shipped[info["InstanceType"]]
        assert (table.count, table.model, table.host_memory_mib) == (
            api.count, api.model, api.host_memory_mib), info["InstanceType"]


def test_types_stored_before_neuron_devices_or_host_memory_were_read_are_asked_again(
) -> None:
    from costguard.providers.aws.gpu_types import GpuTypeCatalog

    catalog = GpuTypeCatalog()
    catalog.learn({"trn1.32xlarge": {"count": 0, "model": None, "memory_mib": None},
                   "g5.xlarge": {"count": 1, "model": "NVIDIA A10G", "memory_mib": 22888,
                                 "neuron": True},
                   "g5.2xlarge": {"count": 1, "model": "NVIDIA A10G", "memory_mib": 22888,
                                  "host_memory_mib": 32768, "neuron": True}})
    ec2 = boto3.client("ec2", region_name=REGION)
    specs = catalog.resolve(ec2, REGION, {"trn1.32xlarge", "g5.xlarge", "g5.2xlarge"})
    assert catalog.calls == 1  # trn1 and g5.xlarge asked again; g5.2xlarge taken as stored
    assert specs["trn1.32xlarge"].count == 16
    assert specs["g5.xlarge"].host_memory_mib == 16384  # MemoryInfo, answered
    assert set(catalog.known()) == {"trn1.32xlarge", "g5.xlarge", "g5.2xlarge"}
