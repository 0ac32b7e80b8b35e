"""costguard's DescribeInstances reader gives every field it keeps exactly as botocore's own
parse of the same answer: on moto's answers, and on an answer shaped like real EC2's."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, SPOT, ProviderFactory, run_instances
from botocore.parsers import ResponseParserFactory

from costguard.providers.aws.actions import changed_meanwhile
from costguard.providers.aws.gpu_types import GpuSpec
from costguard.providers.aws.instance_xml import (
    EVENT,
    FIELDS,
    lean_records,
    read_describe_instances,
)
from costguard.providers.aws.inventory import host_names, to_instance

# The members costguard keeps of each structure field; every other field is kept whole.
KEPT_MEMBERS = {
    "State": {"Code", "Name"},
    "StateReason": {"Code", "Message"},
    "Placement": {"AvailabilityZone"},
    "IamInstanceProfile": {"Arn", "Id"},
}


def project(record: dict[str, Any]) -> dict[str, Any]:
    """botocore's record cut to what the reader keeps."""
    out = {}
    for key in FIELDS & record.keys():
        value = record[key]
        if key in KEPT_MEMBERS:
            value = {k: v for k, v in value.items() if k in KEPT_MEMBERS[key]}
        out[key] = value
    return out


def both_ways(**kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same DescribeInstances through a plain client and through the reader."""
    plain: Any = boto3.client("ec2", region_name=REGION)
    read: Any = boto3.client("ec2", region_name=REGION)
    read.meta.events.register(EVENT, read_describe_instances)
    with lean_records():
        lean = read.describe_instances(**kwargs)
    return plain.describe_instances(**kwargs), lean


def records(page: Any) -> dict[str, dict[str, Any]]:
    return {i["InstanceId"]: i for r in page["Reservations"] for i in r["Instances"]}


@pytest.mark.usefixtures("moto")
def test_every_kept_field_equals_botocores_parse_of_moto_answers() -> None:
    boto3.client("iam", region_name=REGION).create_instance_profile(
        InstanceProfileName="vision-train")
    tags = [{"Key": "team", "Value": "vision & speech <ml>"}, {"Key": "Name", "Value": "nüll"},
            {"Key": "empty", "Value": ""}]
    run_instances(count=2, itype="p4d.24xlarge", IamInstanceProfile={"Name": "vision-train"},
                  TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    run_instances(itype="g5.xlarge", **SPOT)
    (stopped,) = run_instances(itype="g6.xlarge")
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[stopped["InstanceId"]])

    full, read = both_ways()

    want, got = records(full), records(read)
    assert len(got) == 4 and got.keys() == want.keys()
    for iid, record in got.items():
        assert record == project(want[iid]), iid
    # the fields that vary here are really exercised, not absent on both sides
    assert {r["State"]["Name"] for r in got.values()} == {"running", "stopped"}
    assert any(r.get("InstanceLifecycle") == "spot" for r in got.values())
    assert any(r.get("IamInstanceProfile") for r in got.values())
    assert any(t["Value"] == "vision & speech <ml>" for r in got.values() for t in r["Tags"])
    assert [r["ReservationId"] for r in read["Reservations"]] == [
        r["ReservationId"] for r in full["Reservations"]]
    assert read["ResponseMetadata"]["RequestId"] == full["ResponseMetadata"]["RequestId"]


@pytest.mark.usefixtures("moto")
def test_what_costguard_builds_from_a_record_is_the_same_either_way() -> None:
    run_instances(count=3, itype="g5.12xlarge",
                  TagSpecifications=[{"ResourceType": "instance",
                                      "Tags": [{"Key": "team", "Value": "nlp"}]}])
    full, read = both_ways()
    now = datetime.now(UTC)
    spec = GpuSpec(4, "A10G", 24576)
    for iid, record in records(read).items():
        whole = records(full)[iid]
        kwargs: dict[str, Any] = {"account": "1", "region": REGION, "gpu": spec,
                                  "observed_at": now}
        instance = to_instance(record, **kwargs)
        assert instance == to_instance(whole, **kwargs)
        assert host_names(record) == host_names(whole)
        assert changed_meanwhile(instance, record) is None


@pytest.mark.usefixtures("moto")
def test_pages_follow_the_token_the_reader_hands_on() -> None:
    for _ in range(7):  # moto pages by reservation: one instance each, two pages of five
        run_instances(itype="m5.large")
    reader: Any = boto3.client("ec2", region_name=REGION)
    reader.meta.events.register(EVENT, read_describe_instances)
    pages: list[list[str]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"MaxResults": 5}
        if token:
            kwargs["NextToken"] = token
        with lean_records():
            page = reader.describe_instances(**kwargs)
        pages.append(list(records(page)))
        token = page.get("NextToken")
        if not token:
            break
    plain: Any = boto3.client("ec2", region_name=REGION)
    assert [len(p) for p in pages] == [5, 2]
    assert sorted(i for p in pages for i in p) == sorted(records(plain.describe_instances()))


@pytest.mark.usefixtures("moto")
def test_costguards_ec2_clients_read_lean_records_only_when_asked(
        make_provider: ProviderFactory) -> None:
    run_instances()
    provider = make_provider()
    ec2 = provider.clients.ec2(provider.clients.accounts()[0], REGION)
    with lean_records():
        (lean,) = records(ec2.describe_instances()).values()
    (whole,) = records(ec2.describe_instances()).values()  # e.g. terminate's block devices
    assert lean.keys() <= FIELDS and "ImageId" not in lean
    assert "ImageId" in whole and "BlockDeviceMappings" in whole


# An answer shaped like EC2's own (API version 2016-11-15): fields moto does not send, a
# state reason with its message, a second page to come.
REAL_SHAPED = b"""<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
  <reservationSet>
    <item>
      <reservationId>r-1234567890abcdef0</reservationId>
      <ownerId>123456789012</ownerId>
      <requesterId>AIDAEXAMPLE</requesterId>
      <groupSet/>
      <instancesSet>
        <item>
          <instanceId>i-1234567890abcdef0</instanceId>
          <imageId>ami-bff32ccc</imageId>
          <instanceState><code>80</code><name>stopped</name></instanceState>
          <privateDnsName>ip-192-168-1-88.eu-west-1.compute.internal</privateDnsName>
          <dnsName/>
          <reason>User initiated (2026-11-20 10:31:22 GMT)</reason>
          <amiLaunchIndex>0</amiLaunchIndex>
          <productCodes/>
          <instanceType>p5.48xlarge</instanceType>
          <launchTime>2026-11-20T09:15:47.000Z</launchTime>
          <placement>
            <availabilityZone>eu-west-1c</availabilityZone>
            <groupName/>
            <tenancy>default</tenancy>
          </placement>
          <monitoring><state>disabled</state></monitoring>
          <blockDeviceMapping>
            <item>
              <deviceName>/dev/xvda</deviceName>
              <ebs>
                <volumeId>vol-1234567890abcdef0</volumeId>
                <status>attached</status>
                <attachTime>2026-11-20T09:15:48.000Z</attachTime>
                <deleteOnTermination>true</deleteOnTermination>
              </ebs>
            </item>
          </blockDeviceMapping>
          <iamInstanceProfile>
            <arn>arn:aws:iam::123456789012:instance-profile/train</arn>
            <id>AIPAEXAMPLE</id>
          </iamInstanceProfile>
          <instanceLifecycle>spot</instanceLifecycle>
          <spotInstanceRequestId>sir-08b93456</spotInstanceRequestId>
          <stateReason>
            <code>Client.UserInitiatedShutdown</code>
            <message>Client.UserInitiatedShutdown: User initiated shutdown</message>
          </stateReason>
          <tagSet>
            <item><key>team</key><value>vision</value></item>
            <item><key>costguard:protect</key><value/></item>
          </tagSet>
          <hypervisor>xen</hypervisor>
          <ebsOptimized>true</ebsOptimized>
          <metadataOptions><state>applied</state><httpTokens>required</httpTokens></metadataOptions>
        </item>
      </instancesSet>
    </item>
  </reservationSet>
  <nextToken>eyJ2IjoiMiIsImMiOiJleGFtcGxlIn0=</nextToken>
</DescribeInstancesResponse>
"""


def _botocore_parse(body: bytes, *, with_reader: bool, status: int = 200) -> dict[str, Any]:
    model = boto3.Session(region_name=REGION)._session.get_service_model("ec2")
    shape = model.operation_model("DescribeInstances").output_shape
    assert shape is not None
    response = {"body": body, "headers": {}, "status_code": status}
    customized: dict[str, Any] = {}
    if with_reader:
        with lean_records():
            read_describe_instances(response_dict=response, customized_response_dict=customized)
    parsed: dict[str, Any] = ResponseParserFactory().create_parser("ec2").parse(response, shape)
    parsed.update(customized)
    return parsed


def test_an_answer_shaped_like_real_ec2s_reads_the_same() -> None:
    full = _botocore_parse(REAL_SHAPED, with_reader=False)
    read = _botocore_parse(REAL_SHAPED, with_reader=True)

    (record,) = records(read).values()
    assert record == project(records(full)["i-1234567890abcdef0"])
    assert record["StateReason"]["Code"] == "Client.UserInitiatedShutdown"
    assert record["Tags"] == [{"Key": "team", "Value": "vision"},
                              {"Key": "costguard:protect", "Value": ""}]
    assert record["LaunchTime"] == datetime(2026, 11, 20, 9, 15, 47, tzinfo=UTC)
    assert read["NextToken"] == full["NextToken"] == "eyJ2IjoiMiIsImMiOiJleGFtcGxlIn0="
    assert read["ResponseMetadata"] == full["ResponseMetadata"]


def test_a_capacity_block_s_instance_has_its_own_lifecycle() -> None:
    # InstanceLifecycle "capacity-block" (EC2's InstanceLifecycleType: spot, scheduled,
    # capacity-block, interruptible-capacity-reservation): GPU capacity paid upfront
    from costguard.model import Lifecycle
    from costguard.providers.aws.inventory import lifecycle_of

    body = REAL_SHAPED.replace(
        b"<instanceLifecycle>spot</instanceLifecycle>\n"
        b"          <spotInstanceRequestId>sir-08b93456</spotInstanceRequestId>",
        b"<instanceLifecycle>capacity-block</instanceLifecycle>\n"
        b"          <capacityReservationId>cr-0123456789abcdef0</capacityReservationId>\n"
        b"          <capacityBlockId>cb-0123456789abcdef0</capacityBlockId>")
    assert body != REAL_SHAPED
    full = _botocore_parse(body, with_reader=False)
    read = _botocore_parse(body, with_reader=True)
    (record,) = records(read).values()
    assert record == project(records(full)["i-1234567890abcdef0"])
    assert record["InstanceLifecycle"] == "capacity-block"
    assert lifecycle_of(record) is Lifecycle.CAPACITY_BLOCK
    for kind, want in (("spot", Lifecycle.SPOT), ("scheduled", Lifecycle.ON_DEMAND),
                       ("interruptible-capacity-reservation", Lifecycle.ON_DEMAND)):
        assert lifecycle_of({"InstanceLifecycle": kind}) is want
    assert lifecycle_of({}) is Lifecycle.ON_DEMAND


def test_errors_and_unreadable_bodies_are_left_to_botocore() -> None:
    error = (b"<Response><Errors><Error><Code>UnauthorizedOperation</Code>"
             b"<Message>no</Message></Error></Errors><RequestID>x</RequestID></Response>")
    for body, status in ((error, 403), (b"<DescribeInstancesResponse><oops", 200)):
        response = {"body": body, "headers": {}, "status_code": status}
        customized: dict[str, Any] = {}
        with lean_records():
            read_describe_instances(response_dict=response, customized_response_dict=customized)
        assert response["body"] == body and customized == {}


def test_entities_are_not_resolved_and_comments_are_not_elements(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t")
    body = REAL_SHAPED.replace(
        b'<?xml version="1.0" encoding="UTF-8"?>',
        b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE r [<!ENTITY leak SYSTEM "'
        + secret.as_uri().encode() + b'">]>').replace(
        b"<value>vision</value>", b"<value>&leak;</value><!-- a comment -->")
    response = {"body": body, "headers": {}, "status_code": 200}
    customized: dict[str, Any] = {}
    with lean_records():
        read_describe_instances(response_dict=response, customized_response_dict=customized)
    (record,) = records(customized).values()
    assert "s3cr3t" not in repr(customized)
    assert record["Tags"][0]["Key"] == "team"
    assert record["InstanceType"] == "p5.48xlarge"
