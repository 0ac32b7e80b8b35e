"""SageMaker notebook instances, governed as `resource: notebook` (costguard/policy/kinds.py).

A notebook instance is an `Instance` of kind `notebook`: `instance_id` its ARN (unique across
accounts and regions, and what the shipped lifecycle configuration hands the agent),
`name` its name, `instance_type` its ML type (`ml.g5.xlarge`), its GPUs those of the EC2
type the ML type is named after (`g5.xlarge`), tags from ListTags. It is nobody's member:
SageMaker runs it on its own account's EC2 instance, which DescribeInstances never lists.

Stop and start go to StopNotebookInstance / StartNotebookInstance, after a fresh
DescribeNotebookInstance: only the notebook decided about (same ARN, same creation time),
only from InService (stop) or Stopped (start). Never deleted: its ML storage volume holds the
user's work. SageMaker has no dry-run parameter: a dry run re-reads the notebook and says
what would be done.

API shapes: the SageMaker API reference (ListNotebookInstances, DescribeNotebookInstance,
ListTags, AddTags, DeleteTags, StopNotebookInstance, StartNotebookInstance).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from costguard.clock import utc
from costguard.errors import ProviderError
from costguard.model import (
    ActionOutcome,
    ActionResult,
    Instance,
    InstanceKind,
    InstanceState,
)
from costguard.providers.aws.actions import reserved_keys
from costguard.providers.aws.boundary import aws_call, error_code, error_message, translate
from costguard.providers.aws.gpu_types import GpuSpec
from costguard.providers.base import tag_detail

log = logging.getLogger(__name__)

ML_PREFIX = "ml."
# NotebookInstanceStatus -> costguard's. SageMaker bills a notebook instance while it is
# InService (and its ML storage always); Failed is not running.
STATES: dict[str, InstanceState] = {
    "Pending": InstanceState.PENDING,
    "InService": InstanceState.RUNNING,
    "Updating": InstanceState.PENDING,
    "Stopping": InstanceState.STOPPING,
    "Stopped": InstanceState.STOPPED,
    "Failed": InstanceState.STOPPED,
    "Deleting": InstanceState.TERMINATED,
}
_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
_PAGE = 100  # ListNotebookInstances MaxResults: at most 100


NEEDED = ("NotebookInstanceArn", "NotebookInstanceName", "CreationTime")


def complete(raw: Mapping[str, Any], needed: Sequence[str] = NEEDED) -> bool:
    """A record with what costguard keys and re-checks it by (one without is left out: not
    known, never acted on)."""
    return all(raw.get(k) for k in needed)


def is_notebook(instance: Instance) -> bool:
    return instance.provider == "aws" and instance.kind is InstanceKind.NOTEBOOK


def ec2_type(ml_type: str) -> str:
    """`ml.g5.xlarge` -> `g5.xlarge`: the EC2 type a SageMaker ML type is named after."""
    return ml_type[len(ML_PREFIX):] if ml_type.startswith(ML_PREFIX) else ml_type


def _state(raw: Mapping[str, Any]) -> InstanceState:
    return STATES.get(str(raw.get("NotebookInstanceStatus", "")), InstanceState.PENDING)


def to_instance(raw: Mapping[str, Any], tags: Mapping[str, str], *, account: str,
                region: str, gpu: GpuSpec, observed_at: datetime) -> Instance:
    """One notebook instance from a ListNotebookInstances or DescribeNotebookInstance entry
    (both name it, give its ARN, status, type and times)."""
    status = str(raw.get("NotebookInstanceStatus", ""))
    return Instance(
        provider="aws", account=account, region=region,
        instance_id=str(raw["NotebookInstanceArn"]),
        name=str(raw["NotebookInstanceName"]),
        instance_type=str(raw.get("InstanceType") or ""),
        state=_state(raw),
        state_reason=(str(raw.get("FailureReason") or "Failed")[:256]
                      if status == "Failed" else None),
        gpu_count=gpu.count, gpu_model=gpu.model, gpu_memory_mib=gpu.memory_mib,
        launch_time=utc(raw["CreationTime"]),
        tags=dict(tags), observed_at=observed_at,
        launched_by=str(raw["RoleArn"]) if raw.get("RoleArn") else None,
        kind=InstanceKind.NOTEBOOK,
    )


class NotebooksDenied(ProviderError):
    """costguard's role may not list notebook instances here: it governs none."""


@contextmanager
def listing(scope: str) -> Iterator[None]:
    """A SageMaker listing: a refusal raises NotebooksDenied, any other failure
    ProviderError."""
    try:
        yield
    except ClientError as exc:
        if error_code(exc) in _DENIED:
            raise NotebooksDenied("aws", scope,
                                  f"{error_code(exc)}: {error_message(exc)}") from exc
        raise translate(exc, scope) from exc
    except BotoCoreError as exc:
        raise translate(exc, scope) from exc


def listed_tags(client: Any, arn: str, scope: str) -> dict[str, str]:
    """A SageMaker resource's tags (ListTags, every page)."""
    out: dict[str, str] = {}
    token: str | None = None
    with aws_call(scope):
        while True:
            page = client.list_tags(ResourceArn=arn, **({"NextToken": token} if token else {}))
            out |= {t["Key"]: t.get("Value", "") for t in page.get("Tags", [])}
            token = page.get("NextToken")
            if not token:
                return out


def read_scope(client: Any, *, account: str, region: str,
               gpus: Callable[[set[str]], dict[str, GpuSpec]],
               observed_at: datetime) -> list[Instance]:
    """Every notebook instance of one (account, region), with its tags (one ListTags each).
    Raises NotebooksDenied when the role may not list them, ProviderError on any other
    failure (a gap for the scope's notebooks)."""
    scope = f"{account}/{region}"
    raws: list[dict[str, Any]] = []
    token: str | None = None
    with listing(scope):
        while True:
            page = client.list_notebook_instances(
                MaxResults=_PAGE, **({"NextToken": token} if token else {}))
            raws += [r for r in page.get("NotebookInstances", []) if complete(r)]
            token = page.get("NextToken")
            if not token:
                break
    specs = gpus({ec2_type(str(r.get("InstanceType") or "")) for r in raws} - {""})
    return [to_instance(r, listed_tags(client, str(r["NotebookInstanceArn"]), scope),
                        account=account, region=region,
                        gpu=specs.get(ec2_type(str(r.get("InstanceType") or "")),
                                      GpuSpec.none()),
                        observed_at=observed_at)
            for r in raws]


def _gone(exc: ClientError) -> bool:
    """DescribeNotebookInstance on a name that does not exist: ValidationException,
    "RecordNotFound"."""
    return error_code(exc) == "ValidationException" and "RecordNotFound" in error_message(exc)


def describe_raw(client: Any, instance: Instance) -> dict[str, Any] | None:
    """DescribeNotebookInstance now; None when it no longer exists."""
    scope = f"{instance.account}/{instance.region}/{instance.name}"
    try:
        return dict(client.describe_notebook_instance(NotebookInstanceName=instance.name))
    except ClientError as exc:
        if _gone(exc):
            return None
        raise translate(exc, scope) from exc
    except BotoCoreError as exc:
        raise translate(exc, scope) from exc


def describe(client: Any, instance: Instance, observed_at: datetime) -> Instance | None:
    """The notebook as SageMaker shows it now, tags read again (None: gone, or another
    notebook now has its name)."""
    raw = describe_raw(client, instance)
    if raw is None or not complete(raw) or raw.get("NotebookInstanceArn") != instance.instance_id:
        return None
    tags = listed_tags(client, instance.instance_id, f"{instance.account}/{instance.region}")
    gpu = GpuSpec(instance.gpu_count, instance.gpu_model, instance.gpu_memory_mib)
    return to_instance(raw, tags, account=instance.account, region=instance.region, gpu=gpu,
                       observed_at=observed_at)


def _changed(instance: Instance, raw: Mapping[str, Any] | None) -> str | None:
    if raw is None:
        return f"notebook {instance.name} no longer exists"
    if raw.get("NotebookInstanceArn") != instance.instance_id:
        return (f"notebook {instance.name} is another notebook now "
                f"({raw.get('NotebookInstanceArn')})")
    if not complete(raw):
        return f"notebook {instance.name}'s record lacks {', '.join(NEEDED)}: not acted on"
    if utc(raw["CreationTime"]) != utc(instance.launch_time):
        return (f"notebook {instance.name} was recreated at "
                f"{utc(raw['CreationTime']).isoformat()}")
    return None


def _failed(exc: Exception, instance: Instance, call: str) -> ActionResult:
    if isinstance(exc, ClientError) and error_code(exc) in _DENIED:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=(
            f"not allowed: costguard's AWS role lacks sagemaker:{call} on notebook "
            f"{instance.name} (or a policy condition denies it); add it from "
            "`costguard iam --provider aws --enforce`"))
    scope = f"{instance.account}/{instance.region}/{instance.name}"
    return ActionResult(outcome=ActionOutcome.FAILED, detail=str(translate(exc, scope)))


def power(client: Any, instance: Instance, verb: str, *, dry_run: bool) -> ActionResult:
    """Stop (from InService) or start (from Stopped) the notebook decided about."""
    needed = "InService" if verb == "stop" else "Stopped"
    try:
        raw = describe_raw(client, instance)
    except ProviderError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=f"cannot re-check: {exc}")
    why = _changed(instance, raw)
    if why is None and raw is not None and raw.get("NotebookInstanceStatus") != needed:
        why = f"notebook is {raw.get('NotebookInstanceStatus')} now, not {needed}"
    if why is not None:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why,
                            state_after=_state(raw) if raw is not None else None)
    if dry_run:  # SageMaker has no DryRun parameter
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail=f"would {verb} notebook {instance.name} ({needed})")
    call = "StopNotebookInstance" if verb == "stop" else "StartNotebookInstance"
    try:
        if verb == "stop":
            client.stop_notebook_instance(NotebookInstanceName=instance.name)
        else:
            client.start_notebook_instance(NotebookInstanceName=instance.name)
    except (ClientError, BotoCoreError) as exc:
        return _failed(exc, instance, call)
    try:
        after = describe_raw(client, instance)
    except ProviderError:
        after = None
    return ActionResult(outcome=ActionOutcome.DONE, detail=f"{verb} requested ({call})",
                        state_after=_state(after) if after is not None else None)


def put_tags(client: Any, arn: str, tags: Mapping[str, str], remove: Sequence[str]) -> None:
    """AddTags, then DeleteTags, on a SageMaker resource (raises the client's errors)."""
    if tags:
        client.add_tags(ResourceArn=arn, Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    if remove:
        client.delete_tags(ResourceArn=arn, TagKeys=list(remove))


def set_tags(client: Any, instance: Instance, tags: Mapping[str, str],
             remove: Sequence[str], *, dry_run: bool) -> ActionResult:
    """AddTags / DeleteTags on the notebook's ARN, after checking it still exists."""
    refused = reserved_keys(tags, remove)
    if refused is not None:
        return refused
    try:
        raw = describe_raw(client, instance)
    except ProviderError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=f"cannot re-check: {exc}")
    why = _changed(instance, raw)
    if why is not None or raw is None:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why or "gone",
                            state_after=InstanceState.TERMINATED)
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail="would " + tag_detail(tags, remove))
    try:
        put_tags(client, instance.instance_id, tags, remove)
    except (ClientError, BotoCoreError) as exc:
        return _failed(exc, instance, "AddTags" if tags else "DeleteTags")
    return ActionResult(outcome=ActionOutcome.DONE, detail=tag_detail(tags, remove),
                        state_after=_state(raw))
