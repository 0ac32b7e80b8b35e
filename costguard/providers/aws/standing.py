"""EBS volumes, EBS snapshots and Elastic IPs: what an AWS account pays for while nothing
runs (costguard/standing/).

One scope (account, region) is read with DescribeVolumes, DescribeSnapshots (own only),
DescribeAddresses and, to know which snapshots something needs, DescribeImages (own) and
DescribeLaunchTemplateVersions for every template's `$Latest` and `$Default` version (one
call: without a template id EC2 describes those versions of all templates). A snapshot is
needed (`used_by`) when an image, a launch template or an existing volume refers to it, when
a lifecycle service manages it (Data Lifecycle Manager, AWS Backup: their `aws:dlm:` and
`aws:backup:` tags), and when costguard took it before deleting a volume (kept, never deleted
by costguard). A volume's `used_by` is the instances it is attached to, an address's the
instance or interface it is associated with; the standing stage decides from inventory
whether those are running.

Prices are list prices from `data/ebs_prices.json`: a volume by type, size, IOPS and
throughput; a snapshot by its volume's size at the Standard tier rate (an upper bound: the
Standard tier bills changed blocks only) or the Archive rate; an address at the public IPv4
hourly rate. EC2 does not say when a volume was detached: the standing stage counts unused
time from when costguard first saw it unused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from costguard.errors import ProviderError
from costguard.model import HOURS_PER_MONTH, ActionOutcome, ActionResult
from costguard.providers.aws.boundary import aws_call, error_code, translate

# the tag of every snapshot costguard takes: before a terminate, and before a delete here
from costguard.providers.aws.disks import SNAPSHOT_OF_TAG, EbsTable, ebs_table, volume_usd_per_month
from costguard.providers.aws.timestamps import fast_timestamp
from costguard.standing.kubernetes import claim_of, volume_snapshot_of
from costguard.standing.model import Standing, StandingKind

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

log = logging.getLogger(__name__)
MANAGED_PREFIXES = {"aws:dlm:": "Data Lifecycle Manager", "aws:backup:": "AWS Backup"}
_GONE = frozenset({"InvalidVolume.NotFound", "InvalidSnapshot.NotFound",
                   "InvalidAllocationID.NotFound", "InvalidAddress.NotFound",
                   "InvalidCapacityReservationId.NotFound"})


def as_utc(value: Any) -> datetime:
    return (value if isinstance(value, datetime) else fast_timestamp(value)).astimezone(UTC)


def _tags(raw: dict[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in raw.get("Tags") or []}


def _pages(ec2: EC2Client, op: str, key: str, **kwargs: Any) -> Iterator[Any]:
    """Every item of a paged Describe call, following NextToken. Each page is its own call
    on `ec2` (not a botocore paginator: an account's client signs the calls made through
    it, sessions.AccountClient)."""
    call = getattr(ec2, op)
    token: str | None = None
    while True:
        page = call(**kwargs, **({"NextToken": token} if token else {}))
        yield from page.get(key, [])
        token = page.get("NextToken")
        if not token:
            return


def snapshot_needs(ec2: EC2Client, volumes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Snapshot id -> what refers to it: images, launch template versions, volumes."""
    needs: dict[str, list[str]] = {}
    for image in _pages(ec2, "describe_images", "Images", Owners=["self"]):
        for mapping in image.get("BlockDeviceMappings") or []:
            snap = (mapping.get("Ebs") or {}).get("SnapshotId")
            if snap:
                needs.setdefault(snap, []).append(f"image {image.get('ImageId', '?')}")
    for version in _pages(ec2, "describe_launch_template_versions", "LaunchTemplateVersions",
                          Versions=["$Latest", "$Default"]):
        data = version.get("LaunchTemplateData") or {}
        for mapping in data.get("BlockDeviceMappings") or []:
            snap = (mapping.get("Ebs") or {}).get("SnapshotId")
            if snap:
                needs.setdefault(snap, []).append(
                    f"launch template {version.get('LaunchTemplateId', '?')} "
                    f"v{version.get('VersionNumber', '?')}")
    for volume in volumes:
        if volume.get("SnapshotId"):
            needs.setdefault(volume["SnapshotId"], []).append(
                f"volume {volume.get('VolumeId', '?')}")
    return {k: sorted(set(v)) for k, v in needs.items()}


def to_volume(raw: dict[str, Any], *, account: str, region: str, observed_at: datetime,
              table: EbsTable) -> Standing:
    attached = tuple(sorted(str(a["InstanceId"]) for a in raw.get("Attachments") or []
                            if a.get("InstanceId") and a.get("State") != "detached"))
    usd = volume_usd_per_month(raw, table)
    tags = _tags(raw)
    claim = claim_of(tags)
    return Standing(
        kind=StandingKind.VOLUME, provider="aws", account=account, region=region,
        zone=raw.get("AvailabilityZone"), resource_id=str(raw["VolumeId"]),
        name=tags.get("Name") or None, state=str(raw.get("State", "")),
        # attached: in use until the standing stage knows every attached instance is stopped
        in_use=bool(attached) or raw.get("State") not in ("available", "in-use"),
        used_by=attached + ((claim,) if claim else ()), size_gb=int(raw.get("Size") or 0),
        detail=str(raw.get("VolumeType", "")), created_at=as_utc(raw["CreateTime"]),
        usd_per_month=usd,
        price_source=f"EBS list price {table.as_of}" if usd is not None else "",
        tags=tags, observed_at=observed_at)


def _managed_by(tags: dict[str, str]) -> str | None:
    for prefix, service in MANAGED_PREFIXES.items():
        if any(k.startswith(prefix) for k in tags):
            return f"managed by {service}"
    return volume_snapshot_of(tags)  # the EBS CSI driver's, for a VolumeSnapshot


def to_snapshot(raw: dict[str, Any], needs: dict[str, list[str]], *, account: str,
                region: str, observed_at: datetime, table: EbsTable) -> Standing:
    tags = _tags(raw)
    snap_id = str(raw["SnapshotId"])
    used = list(needs.get(snap_id, ()))
    managed = _managed_by(tags)
    if managed:
        used.append(managed)
    if SNAPSHOT_OF_TAG in tags:
        used.append(f"kept by costguard: taken before deleting {tags[SNAPSHOT_OF_TAG]}")
    tier = str(raw.get("StorageTier") or "standard")
    rate = table.snapshot_gb_month.get(tier, table.snapshot_gb_month["standard"])
    size = int(raw.get("VolumeSize") or 0)
    return Standing(
        kind=StandingKind.SNAPSHOT, provider="aws", account=account, region=region,
        resource_id=snap_id, name=tags.get("Name") or raw.get("Description") or None,
        state=str(raw.get("State", "")),
        in_use=bool(used) or raw.get("State") != "completed", used_by=tuple(used),
        size_gb=size, detail=str(raw.get("VolumeId") or ""),
        created_at=as_utc(raw["StartTime"]), usd_per_month=size * rate,
        price_source=(f"EBS snapshot {tier} tier {table.as_of}"
                      + (" (upper bound: billed on changed blocks)" if tier == "standard"
                         else "")),
        tags=tags, observed_at=observed_at)


def to_address(raw: dict[str, Any], *, account: str, region: str, observed_at: datetime,
               table: EbsTable, first_seen: datetime | None = None) -> Standing:
    holder = raw.get("InstanceId") or raw.get("NetworkInterfaceId")
    tags = _tags(raw)
    return Standing(
        kind=StandingKind.ADDRESS, provider="aws", account=account, region=region,
        resource_id=str(raw.get("AllocationId") or raw["PublicIp"]),
        name=tags.get("Name") or str(raw.get("PublicIp", "")) or None,
        state="associated" if raw.get("AssociationId") or holder else "unassociated",
        in_use=bool(holder), used_by=(str(holder),) if holder else (),
        detail=str(raw.get("PublicIp", "")),
        created_at=first_seen,  # EC2 does not say when an address was allocated
        usd_per_month=table.public_ipv4_hour * HOURS_PER_MONTH,
        price_source=f"public IPv4 list price {table.as_of}", tags=tags,
        observed_at=observed_at)


def _parsed(parse: Callable[[dict[str, Any]], Standing], raws: Iterable[Any], what: str,
            scope: str) -> list[Standing]:
    """Each raw item parsed; one EC2 answers with a field missing or out of every range (a
    size no float holds) is left out and logged, never the scope with it."""
    out = []
    for raw in raws:
        try:
            out.append(parse(dict(raw)))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # ValidationError too
            ident = next((str(raw.get(k)) for k in ("VolumeId", "SnapshotId", "AllocationId",
                                                     "PublicIp", "CapacityReservationId")
                          if raw.get(k)), "?")
            log.warning("%s: %s %s left out, not readable (%s: %s)", scope, what, ident[:64],
                        type(exc).__name__, str(exc)[:200])
    return out


def read_scope(ec2: EC2Client, kinds: frozenset[StandingKind], *, account: str, region: str,
               observed_at: datetime) -> list[Standing]:
    """Every standing resource of `kinds` in one (account, region)."""
    table = ebs_table()
    scope = f"{account}/{region}"
    at: dict[str, Any] = dict(account=account, region=region, observed_at=observed_at,
                              table=table)
    out: list[Standing] = []
    with aws_call(scope):
        volumes: list[dict[str, Any]] = []
        if StandingKind.VOLUME in kinds or StandingKind.SNAPSHOT in kinds:
            volumes = list(_pages(ec2, "describe_volumes", "Volumes"))
        if StandingKind.VOLUME in kinds:
            out += _parsed(lambda v: to_volume(v, **at), volumes, "volume", scope)
        if StandingKind.SNAPSHOT in kinds:
            needs = snapshot_needs(ec2, volumes)
            out += _parsed(lambda raw: to_snapshot(raw, needs, **at), _pages(
                ec2, "describe_snapshots", "Snapshots", OwnerIds=["self"]), "snapshot", scope)
        if StandingKind.ADDRESS in kinds:
            out += _parsed(lambda a: to_address(a, **at),
                           _pages(ec2, "describe_addresses", "Addresses"), "address", scope)
    return out


def describe(ec2: EC2Client, item: Standing, observed_at: datetime) -> Standing | None:
    """`item` as EC2 shows it now; None when it is gone."""
    table = ebs_table()
    at: dict[str, Any] = dict(account=item.account, region=item.region,
                              observed_at=observed_at, table=table)
    try:
        with aws_call(_scope(item)):
            if item.kind is StandingKind.VOLUME:
                vols = list(_pages(ec2, "describe_volumes", "Volumes",
                                   VolumeIds=[item.resource_id]))
                return to_volume(vols[0], **at) if vols else None
            if item.kind is StandingKind.SNAPSHOT:
                snaps = list(_pages(ec2, "describe_snapshots", "Snapshots",
                                    SnapshotIds=[item.resource_id]))
                if not snaps:
                    return None
                vols = list(_pages(ec2, "describe_volumes", "Volumes", Filters=[
                    {"Name": "snapshot-id", "Values": [item.resource_id]}]))
                return to_snapshot(snaps[0], snapshot_needs(ec2, vols), **at)
            addrs = list(_pages(ec2, "describe_addresses", "Addresses",
                                AllocationIds=[item.resource_id]))
            return to_address(addrs[0], first_seen=item.created_at, **at) if addrs else None
    except ProviderError as exc:  # aws_call's, raised from the client's error
        if says_gone(exc):
            return None
        raise
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # never a delete on it
        raise ProviderError("aws", _scope(item), f"unreadable answer ({type(exc).__name__}):"
                            " not acted on") from exc


def says_gone(exc: ProviderError) -> bool:
    """The error is EC2 saying the resource does not exist (any more)."""
    return isinstance(exc.__cause__, ClientError) and error_code(exc.__cause__) in _GONE


def _scope(item: Standing) -> str:
    return f"{item.account}/{item.region}/{item.resource_id}"


def snapshot_volume(ec2: EC2Client, item: Standing, *, dry_run: bool) -> tuple[str, str]:
    """The snapshot taken before deleting volume `item`: found by its tag where an earlier
    attempt took it, else started now. (id, state); a dry run only checks the permission
    and answers ("", "dry-run")."""
    with aws_call(_scope(item)):
        if dry_run:
            _dry(ec2.create_snapshot, VolumeId=item.resource_id)
            return "", "dry-run"
        found = ec2.describe_snapshots(OwnerIds=["self"], Filters=[
            {"Name": f"tag:{SNAPSHOT_OF_TAG}", "Values": [item.resource_id]},
            {"Name": "volume-id", "Values": [item.resource_id]}]).get("Snapshots", [])
        usable = sorted((s for s in found if s.get("State") != "error"),
                        key=lambda s: str(s.get("StartTime", "")))
        if usable:
            return str(usable[-1]["SnapshotId"]), str(usable[-1].get("State", "pending"))
        if found:  # every earlier attempt failed: say so, do not take another blindly
            return str(found[-1]["SnapshotId"]), "error"
        tags = [{"Key": SNAPSHOT_OF_TAG, "Value": item.resource_id},
                {"Key": "Name", "Value": f"costguard: {item.name or item.resource_id} "
                                         "before delete"},
                *({"Key": k, "Value": v} for k, v in item.tags.items()
                  if not k.startswith("aws:") and k != "Name")]
        got = ec2.create_snapshot(
            VolumeId=item.resource_id,
            Description=f"costguard: before deleting unused volume {item.resource_id}",
            TagSpecifications=[{"ResourceType": "snapshot", "Tags": tags}])  # type: ignore[list-item,misc]
        return str(got["SnapshotId"]), str(got.get("State", "pending"))


def _dry(call: Any, **kwargs: Any) -> None:
    try:
        call(DryRun=True, **kwargs)
    except ClientError as exc:
        if error_code(exc) != "DryRunOperation":
            raise


_DELETE = {StandingKind.VOLUME: ("delete_volume", "VolumeId", "ec2:DeleteVolume", "deleted"),
           StandingKind.SNAPSHOT: ("delete_snapshot", "SnapshotId", "ec2:DeleteSnapshot",
                                   "deleted"),
           StandingKind.ADDRESS: ("release_address", "AllocationId", "ec2:ReleaseAddress",
                                  "released")}


def delete(ec2: EC2Client, item: Standing, *, dry_run: bool) -> ActionResult:
    op, key, permission, done = _DELETE[item.kind]
    call = getattr(ec2, op)
    try:
        if dry_run:
            _dry(call, **{key: item.resource_id})
            return ActionResult(outcome=ActionOutcome.DRY_RUN,
                                detail=f"would be {done} ({permission} verified)")
        call(**{key: item.resource_id})
    except ClientError as exc:
        if error_code(exc) in ("UnauthorizedOperation", "AccessDenied"):
            return ActionResult(outcome=ActionOutcome.FAILED,
                                detail=f"not allowed: costguard's AWS role lacks {permission};"
                                       " add it from `costguard iam --provider aws`")
        if error_code(exc) in _GONE:
            return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
        raise translate(exc, _scope(item)) from exc
    except BotoCoreError as exc:
        raise translate(exc, _scope(item)) from exc
    return ActionResult(outcome=ActionOutcome.DONE, detail=done)


def tag(ec2: EC2Client, item: Standing, tags: dict[str, str], *, dry_run: bool
        ) -> ActionResult:
    pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
    with aws_call(_scope(item)):
        if dry_run:
            _dry(ec2.create_tags, Resources=[item.resource_id], Tags=pairs)
            return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="would be tagged")
        ec2.create_tags(Resources=[item.resource_id], Tags=pairs)  # type: ignore[arg-type]
    return ActionResult(outcome=ActionOutcome.DONE, detail="tagged")
