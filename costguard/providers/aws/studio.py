"""SageMaker Studio: the apps that run a space (JupyterLab, Code Editor) or, in Studio
Classic, a user's kernels (KernelGateway) on an ML instance of their own, governed as
`resource: notebook` beside the notebook instances (aws/notebooks.py).

An app is an `Instance` of kind `notebook`: `instance_id` `DOMAIN/space/SPACE/TYPE/APP`
(or `DOMAIN/user/PROFILE/TYPE/APP` for a user's app), the fields DescribeApp and DeleteApp
take, and never an ARN (a notebook instance's id is its ARN: that is how the two are told
apart); `name` the space (or user profile); `instance_type` its ML type from the app's
`ResourceSpec`; its GPUs those of the EC2 type the ML type is named after; its tags the
space's (or the user profile's), read with ListTags. An app on Studio's shared `system`
instance (a Classic JupyterServer) costs nothing of its own and is not listed.

Stopping a space is deleting its app (DeleteApp, what Studio's own "Stop space" does): the
space, its storage and the user's files stay, and the user starts it again from Studio, so
costguard does not start one. Before DeleteApp the app is read again (DescribeApp): only
the app decided about (same creation time), only InService. Tags are set on the space.

API shapes: the SageMaker API reference (ListApps, DescribeApp, DeleteApp, ListTags,
AddTags, DeleteTags).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from costguard.clock import utc
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceKind, InstanceState
from costguard.providers.aws.actions import reserved_keys
from costguard.providers.aws.boundary import error_code, translate
from costguard.providers.aws.gpu_types import GpuSpec
from costguard.providers.aws.notebooks import (
    ML_PREFIX,
    complete,
    ec2_type,
    listed_tags,
    listing,
    put_tags,
)
from costguard.providers.base import tag_detail

log = logging.getLogger(__name__)

# AppStatus -> costguard's; an app bills its instance while Pending or InService
STATES: dict[str, InstanceState] = {
    "Pending": InstanceState.PENDING,
    "InService": InstanceState.RUNNING,
    "Deleting": InstanceState.STOPPING,
    "Failed": InstanceState.STOPPED,
    "Deleted": InstanceState.TERMINATED,
}
_LISTED = frozenset({"Pending", "InService"})
_PAGE = 100  # ListApps MaxResults: at most 100
ID_LIMIT = 128  # instances.instance_id


def is_app(instance: Instance) -> bool:
    """A Studio app (a notebook instance's id is its ARN, an app's never is)."""
    return (instance.provider == "aws" and instance.kind is InstanceKind.NOTEBOOK
            and not instance.instance_id.startswith("arn:"))


def _owner(raw: Mapping[str, Any]) -> tuple[str, str] | None:
    if raw.get("SpaceName"):
        return "space", str(raw["SpaceName"])
    if raw.get("UserProfileName"):
        return "user", str(raw["UserProfileName"])
    return None


def app_id(raw: Mapping[str, Any]) -> str | None:
    """`DOMAIN/space/SPACE/TYPE/APP`; None for an app of neither a space nor a user, or one
    whose names are too long to keep."""
    owner = _owner(raw)
    if owner is None or not complete(raw, ("DomainId", "AppType", "AppName", "CreationTime")):
        return None
    iid = f"{raw['DomainId']}/{owner[0]}/{owner[1]}/{raw['AppType']}/{raw['AppName']}"
    return iid if len(iid) <= ID_LIMIT else None


def app_fields(instance: Instance) -> dict[str, str]:
    """DescribeApp's and DeleteApp's arguments, from the app's id."""
    domain, owner, who, app_type, app_name = instance.instance_id.split("/", 4)
    return {"DomainId": domain, "SpaceName" if owner == "space" else "UserProfileName": who,
            "AppType": app_type, "AppName": app_name}


def _partition(region: str) -> str:
    return ("aws-cn" if region.startswith("cn-") else
            "aws-us-gov" if region.startswith("us-gov-") else "aws")


def holder_arn(account: str, region: str, domain: str, owner: str, who: str) -> str:
    """The ARN of the space (or user profile) whose app it is: its tags are the app's."""
    what = "space" if owner == "space" else "user-profile"
    return f"arn:{_partition(region)}:sagemaker:{region}:{account}:{what}/{domain}/{who}"


def _holder_of(instance: Instance) -> str:
    domain, owner, who, _, _ = instance.instance_id.split("/", 4)
    return holder_arn(instance.account, instance.region, domain, owner, who)


def to_instance(raw: Mapping[str, Any], tags: Mapping[str, str], *, account: str,
                region: str, gpu: GpuSpec, observed_at: datetime) -> Instance | None:
    iid = app_id(raw)
    owner = _owner(raw)
    itype = str((raw.get("ResourceSpec") or {}).get("InstanceType") or "")
    if iid is None or owner is None or not itype.startswith(ML_PREFIX):
        return None
    status = str(raw.get("Status", ""))
    return Instance(
        provider="aws", account=account, region=region, instance_id=iid, name=owner[1],
        instance_type=itype, state=STATES.get(status, InstanceState.PENDING),
        state_reason=(str(raw.get("FailureReason") or "Failed")[:256]
                      if status == "Failed" else None),
        gpu_count=gpu.count, gpu_model=gpu.model, gpu_memory_mib=gpu.memory_mib,
        launch_time=utc(raw["CreationTime"]), tags=dict(tags), observed_at=observed_at,
        kind=InstanceKind.NOTEBOOK)


def read_scope(client: Any, *, account: str, region: str,
               gpus: Callable[[set[str]], dict[str, GpuSpec]],
               observed_at: datetime) -> list[Instance]:
    """Every app of one (account, region) that runs on an ML instance of its own, with its
    space's (or user profile's) tags, one ListTags a space. Raises as notebooks.read_scope
    (the caller maps a refusal)."""
    scope = f"{account}/{region}"
    raws: list[dict[str, Any]] = []
    token: str | None = None
    with listing(scope):
        while True:
            page = client.list_apps(MaxResults=_PAGE, **({"NextToken": token} if token else {}))
            raws += [a for a in page.get("Apps", []) if a.get("Status") in _LISTED]
            token = page.get("NextToken")
            if not token:
                break
    kept = [r for r in raws if app_id(r) is not None]
    if len(kept) < len(raws):
        log.warning("aws %s: %d Studio apps not listed: their domain, space and app names "
                    "are longer together than costguard keeps, or the listing left out one "
                    "of them or the creation time", scope, len(raws) - len(kept))
    types = {ec2_type(str((r.get("ResourceSpec") or {}).get("InstanceType") or ""))
             for r in kept} - {"", "system"}
    specs = gpus(types) if types else {}
    tags_of: dict[str, dict[str, str]] = {}
    out: list[Instance] = []
    for raw in kept:
        owner = _owner(raw)
        assert owner is not None  # app_id said so
        arn = holder_arn(account, region, str(raw["DomainId"]), *owner)
        if arn not in tags_of:
            tags_of[arn] = listed_tags(client, arn, scope)
        itype = ec2_type(str((raw.get("ResourceSpec") or {}).get("InstanceType") or ""))
        inst = to_instance(raw, tags_of[arn], account=account, region=region,
                           gpu=specs.get(itype, GpuSpec.none()), observed_at=observed_at)
        if inst is not None:
            out.append(inst)
    return out


def describe_raw(client: Any, instance: Instance) -> dict[str, Any] | None:
    """DescribeApp now; None when it no longer exists."""
    scope = f"{instance.account}/{instance.region}/{instance.instance_id}"
    try:
        return dict(client.describe_app(**app_fields(instance)))
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFound":
            return None
        raise translate(exc, scope) from exc
    except BotoCoreError as exc:
        raise translate(exc, scope) from exc


def describe(client: Any, instance: Instance, observed_at: datetime) -> Instance | None:
    """The app as Studio shows it now, its space's tags read again (None: gone)."""
    raw = describe_raw(client, instance)
    if raw is None or raw.get("Status") == "Deleted":
        return None
    tags = listed_tags(client, _holder_of(instance), f"{instance.account}/{instance.region}")
    gpu = GpuSpec(instance.gpu_count, instance.gpu_model, instance.gpu_memory_mib)
    return to_instance(raw, tags, account=instance.account, region=instance.region, gpu=gpu,
                       observed_at=observed_at)


def power(client: Any, instance: Instance, verb: str, *, dry_run: bool) -> ActionResult:
    """Stop a space: delete its app (InService only, the app decided about). Starting one is
    the user's, from Studio."""
    if verb != "stop":
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=(
            f"Studio space {instance.name} is started from Studio by its user (costguard "
            "stops a space by deleting its app; it does not start one)"))
    try:
        raw = describe_raw(client, instance)
    except ProviderError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=f"cannot re-check: {exc}")
    if raw is None or raw.get("Status") == "Deleted":
        return ActionResult(outcome=ActionOutcome.SKIPPED, state_after=InstanceState.TERMINATED,
                            detail=f"Studio app {instance.instance_id} no longer exists")
    state = STATES.get(str(raw.get("Status")), InstanceState.PENDING)
    if not raw.get("CreationTime") or utc(raw["CreationTime"]) != utc(instance.launch_time):
        return ActionResult(outcome=ActionOutcome.SKIPPED, state_after=state, detail=(
            f"Studio space {instance.name}'s app was made again at "
            f"{utc(raw['CreationTime']).isoformat()}: not the one decided about"))
    if raw.get("Status") != "InService":
        return ActionResult(outcome=ActionOutcome.SKIPPED, state_after=state, detail=(
            f"Studio app is {raw.get('Status')} now, not InService"))
    if dry_run:  # SageMaker has no DryRun parameter
        return ActionResult(outcome=ActionOutcome.DRY_RUN, state_after=state, detail=(
            f"would stop Studio space {instance.name} (DeleteApp; the space and its storage "
            "stay)"))
    try:
        client.delete_app(**app_fields(instance))
    except (ClientError, BotoCoreError) as exc:
        if isinstance(exc, ClientError) and error_code(exc) in {
                "AccessDenied", "AccessDeniedException"}:
            return ActionResult(outcome=ActionOutcome.FAILED, detail=(
                f"not allowed: costguard's AWS role lacks sagemaker:DeleteApp on Studio "
                f"space {instance.name}'s app; add it from `costguard iam --provider aws "
                "--enforce`"))
        return ActionResult(outcome=ActionOutcome.FAILED, detail=str(translate(
            exc, f"{instance.account}/{instance.region}/{instance.instance_id}")))
    return ActionResult(outcome=ActionOutcome.DONE, state_after=InstanceState.STOPPING,
                        detail=f"stop requested (DeleteApp of {instance.instance_id}; the "
                               "space and its storage stay)")


def set_tags(client: Any, instance: Instance, tags: Mapping[str, str],
             remove: Sequence[str], *, dry_run: bool) -> ActionResult:
    """AddTags / DeleteTags on the app's space (or user profile)."""
    refused = reserved_keys(tags, remove)
    if refused is not None:
        return refused
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail="would " + tag_detail(tags, remove) + " on its space")
    try:
        put_tags(client, _holder_of(instance), tags, remove)
    except (ClientError, BotoCoreError) as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=str(translate(
            exc, f"{instance.account}/{instance.region}/{instance.name}")))
    return ActionResult(outcome=ActionOutcome.DONE, detail=tag_detail(tags, remove),
                        state_after=instance.state)
