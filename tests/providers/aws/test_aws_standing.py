"""EBS volumes, snapshots and Elastic IPs through the AWS provider, against moto: what is
listed as used and by what, the list prices, the snapshot taken before a delete (found again,
never taken twice), deletes and releases, dry runs, and a resource gone meanwhile."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from aws_helpers import AMI, REGION, ProviderFactory

from costguard.model import ActionOutcome
from costguard.providers.aws.disks import SNAPSHOT_OF_TAG
from costguard.standing.model import Standing, StandingKind

pytestmark = pytest.mark.usefixtures("moto", "capacity")


def _tags(**kv: str) -> list[dict[str, Any]]:
    return [{"Key": k.replace("_", ":"), "Value": v} for k, v in kv.items()]


def _fleet() -> dict[str, str]:
    ec2 = boto3.client("ec2", region_name=REGION)
    spare = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=500, VolumeType="gp3",
                              TagSpecifications=[{"ResourceType": "volume",
                                                  "Tags": _tags(team="vision")}])["VolumeId"]
    io2 = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=100, VolumeType="io2",
                            Iops=1000)["VolumeId"]
    run = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1,
                            Placement={"AvailabilityZone": f"{REGION}a"})
    instance = run["Instances"][0]["InstanceId"]
    used = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=50, VolumeType="gp2")["VolumeId"]
    ec2.attach_volume(VolumeId=used, InstanceId=instance, Device="/dev/sdf")
    lone = ec2.create_snapshot(VolumeId=spare)["SnapshotId"]
    templated = ec2.create_snapshot(VolumeId=spare)["SnapshotId"]
    ec2.create_launch_template(LaunchTemplateName="trainer", LaunchTemplateData={
        "BlockDeviceMappings": [{"DeviceName": "/dev/sdb", "Ebs": {"SnapshotId": templated}}]})
    restored = ec2.create_snapshot(VolumeId=spare)["SnapshotId"]
    ec2.create_volume(AvailabilityZone=f"{REGION}a", SnapshotId=restored)
    managed = ec2.create_snapshot(VolumeId=spare, TagSpecifications=[{
        "ResourceType": "snapshot", "Tags": _tags(aws_dlm_lifecycle_policy_id="p-1")}])[
        "SnapshotId"]
    free = ec2.allocate_address(Domain="vpc")["AllocationId"]
    held = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=held, InstanceId=instance)
    return dict(spare=spare, io2=io2, used=used, instance=instance, lone=lone,
                templated=templated, restored=restored, managed=managed, free=free, held=held)


def test_what_is_listed_as_used_and_by_what(make_provider: ProviderFactory) -> None:
    ids = _fleet()
    provider = make_provider()
    listed = provider.list_standing(frozenset(StandingKind))
    assert not listed.gaps
    by_id = {i.resource_id: i for i in listed.items}
    spare = by_id[ids["spare"]]
    assert (spare.kind, spare.in_use, spare.used_by, spare.size_gb) == (
        StandingKind.VOLUME, False, (), 500)
    assert spare.tags == {"team": "vision"} and spare.usd_per_month == pytest.approx(40.0)
    assert by_id[ids["io2"]].usd_per_month == pytest.approx(100 * 0.125 + 1000 * 0.065)
    used = by_id[ids["used"]]
    assert used.in_use and used.used_by == (ids["instance"],)
    assert not by_id[ids["lone"]].in_use and by_id[ids["lone"]].used_by == ()
    assert by_id[ids["lone"]].usd_per_month == pytest.approx(500 * 0.05)
    assert "upper bound" in by_id[ids["lone"]].price_source
    assert by_id[ids["templated"]].used_by[0].startswith("launch template lt-")
    assert by_id[ids["restored"]].in_use and by_id[ids["restored"]].used_by[0].startswith(
        "volume vol-")
    assert by_id[ids["managed"]].used_by == ("managed by Data Lifecycle Manager",)
    free, held = by_id[ids["free"]], by_id[ids["held"]]
    assert (free.state, free.in_use, free.created_at) == ("unassociated", False, None)
    assert free.usd_per_month == pytest.approx(0.005 * 730)
    assert held.in_use and held.used_by == (ids["instance"],)


def test_an_image_needs_its_snapshot(make_provider: ProviderFactory) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    run = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)
    image = ec2.create_image(InstanceId=run["Instances"][0]["InstanceId"], Name="base")
    described = ec2.describe_images(ImageIds=[image["ImageId"]])["Images"][0]
    snaps = {m["Ebs"]["SnapshotId"] for m in described["BlockDeviceMappings"] if "Ebs" in m}
    assert snaps  # moto backs an image with snapshots, as EC2 does
    listed = make_provider().list_standing(frozenset({StandingKind.SNAPSHOT}))
    backing = [i for i in listed.items if i.resource_id in snaps]
    assert {i.resource_id for i in backing} == snaps  # every one listed, none vacuously
    for item in backing:
        assert item.in_use and item.used_by == (f"image {image['ImageId']}",)


def _one(provider: Any, kind: StandingKind, rid: str) -> Standing:
    items = provider.list_standing(frozenset({kind})).items
    return next(i for i in items if i.resource_id == rid)


def test_a_volume_is_snapshotted_once_then_deleted(make_provider: ProviderFactory) -> None:
    ids = _fleet()
    provider = make_provider()
    spare = _one(provider, StandingKind.VOLUME, ids["spare"])
    assert provider.snapshot_volume(spare, dry_run=True) == ("", "dry-run")
    snap, state = provider.snapshot_volume(spare, dry_run=False)
    assert snap.startswith("snap-") and state == "completed"  # moto completes at once
    assert provider.snapshot_volume(spare, dry_run=False) == (snap, "completed")  # found again
    ec2 = boto3.client("ec2", region_name=REGION)
    tags = {t["Key"]: t["Value"] for t in ec2.describe_snapshots(SnapshotIds=[snap])[
        "Snapshots"][0]["Tags"]}
    assert tags[SNAPSHOT_OF_TAG] == ids["spare"] and tags["team"] == "vision"
    kept = _one(provider, StandingKind.SNAPSHOT, snap)
    assert kept.in_use and kept.used_by[0].startswith("kept by costguard")  # never deleted
    dry = provider.delete_standing(spare, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and "ec2:DeleteVolume verified" in dry.detail
    assert provider.describe_standing(spare) is not None
    assert provider.delete_standing(spare, dry_run=False).outcome is ActionOutcome.DONE
    assert provider.describe_standing(spare) is None
    again = provider.delete_standing(spare, dry_run=False)
    assert again.outcome is ActionOutcome.SKIPPED and again.detail == "gone meanwhile"


def test_addresses_are_released_and_tagged(make_provider: ProviderFactory) -> None:
    ids = _fleet()
    provider = make_provider()
    free = _one(provider, StandingKind.ADDRESS, ids["free"])
    assert provider.tag_standing(free, {"costguard:found": "x"}, dry_run=False).outcome \
        is ActionOutcome.DONE
    fresh = provider.describe_standing(free)
    assert fresh is not None and fresh.tags["costguard:found"] == "x"
    result = provider.delete_standing(free, dry_run=False)
    assert (result.outcome, result.detail) == (ActionOutcome.DONE, "released")
    assert provider.describe_standing(free) is None


def test_a_snapshot_read_again_names_what_now_needs_it(make_provider: ProviderFactory) -> None:
    ids = _fleet()
    provider = make_provider()
    lone = _one(provider, StandingKind.SNAPSHOT, ids["lone"])
    boto3.client("ec2", region_name=REGION).create_volume(
        AvailabilityZone=f"{REGION}a", SnapshotId=ids["lone"])
    fresh = provider.describe_standing(lone)
    assert fresh is not None and fresh.in_use and fresh.used_by[0].startswith("volume vol-")


class _Answers:
    """EC2 answering with the given pages (to_volume's input, as DescribeVolumes documents
    its fields), for what moto never sends: a field missing, a size no float holds."""

    def __init__(self, volumes: list[dict[str, Any]]) -> None:
        self.volumes = volumes

    def describe_volumes(self, **_: Any) -> dict[str, Any]:
        return {"Volumes": self.volumes}


def test_an_unreadable_volume_is_left_out_not_the_scope(
        caplog: pytest.LogCaptureFixture) -> None:
    from datetime import UTC, datetime

    from costguard.providers.aws.standing import read_scope

    now = datetime(2026, 12, 1, tzinfo=UTC)
    good = {"VolumeId": "vol-good", "Size": 100, "VolumeType": "gp3", "State": "available",
            "CreateTime": datetime(9999, 12, 31, tzinfo=UTC), "Attachments": []}
    huge = {**good, "VolumeId": "vol-huge", "Size": 10 ** 5000}  # 5,001 digits
    no_time = {k: v for k, v in good.items() if k != "CreateTime"} | {"VolumeId": "vol-x"}
    items = read_scope(_Answers([huge, good, no_time]),  # type: ignore[arg-type]
                       frozenset({StandingKind.VOLUME}), account="1", region=REGION,
                       observed_at=now)
    assert [i.resource_id for i in items] == ["vol-good"]
    assert items[0].created_at is not None and items[0].created_at.year == 9999
    said = caplog.text
    assert "volume vol-huge left out" in said and "volume vol-x left out" in said


def test_kubernetes_volumes_and_snapshots_are_held(make_provider: ProviderFactory) -> None:
    """What the EBS CSI driver made stays its: a detached PersistentVolume's volume (its
    StatefulSet scaled to zero) and a VolumeSnapshot's snapshot are held, never deletable."""
    ec2 = boto3.client("ec2", region_name=REGION)
    pv = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=200, VolumeType="gp3",
                           TagSpecifications=[{"ResourceType": "volume", "Tags": [
                               {"Key": "CSIVolumeName", "Value": "pvc-3ab0"},
                               {"Key": "kubernetes.io/created-for/pvc/namespace",
                                "Value": "ml"},
                               {"Key": "kubernetes.io/created-for/pvc/name",
                                "Value": "data-trainer-0"}]}])["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=pv, TagSpecifications=[{
        "ResourceType": "snapshot", "Tags": [
            {"Key": "CSIVolumeSnapshotName", "Value": "snapshot-9f1"}]}])["SnapshotId"]
    provider = make_provider()
    volume = _one(provider, StandingKind.VOLUME, pv)
    assert not volume.in_use and volume.attached  # billed, unused, and held
    assert volume.used_by == ("Kubernetes PersistentVolume pvc-3ab0 (claim ml/data-trainer-0)",)
    held = _one(provider, StandingKind.SNAPSHOT, snap)
    assert held.in_use and held.used_by == ("Kubernetes VolumeSnapshot snapshot-9f1",)
