"""Re-check, stop and tag many EC2 instances of one (account, region) in few API calls.

Every call takes up to `CHUNK` instance ids: one DescribeInstances per chunk to re-check, one
StopInstances per chunk (its answer gives each instance's state after; an instance it does
not answer for is read with DescribeInstanceStatus, 100 ids a call), one CreateTags and/or
DeleteTags per chunk. A dry run sends the same calls with
DryRun=True, so one call proves the permission for the whole chunk.

EC2 validates every id of a call before acting on any: an id that vanished meanwhile fails
the call with InvalidInstanceID.NotFound, whose message names it. That id is answered
"no longer exists" and the call goes again without it; nothing else is lost.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.aws.actions import _PERMISSION, tag_detail
from costguard.providers.aws.boundary import error_code, error_message, translate
from costguard.providers.aws.gpu_types import GpuSpec, shipped_gpu_table
from costguard.providers.aws.instance_xml import lean_records
from costguard.providers.aws.inventory import EC2_STATES, to_instance

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

CHUNK = 1000  # ids per DescribeInstances / StopInstances / CreateTags call
_ID = re.compile(r"\bi-[0-9a-zA-Z]+\b")
_GONE_CODES = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})

Send = Callable[[list[str], bool], Any]  # (ids, dry_run) -> the API call's answer


def chunks(items: Sequence[Instance], size: int = CHUNK) -> Iterator[Sequence[Instance]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _gone_ids(exc: ClientError, asked: Sequence[str]) -> set[str]:
    """The ids a NotFound/Malformed error names among those asked (empty: another error)."""
    if error_code(exc) not in _GONE_CODES:
        return set()
    return set(_ID.findall(error_message(exc))) & set(asked)


def _pages(call: Callable[[list[str]], Any], ids: Sequence[str], size: int, scope: str
           ) -> Iterator[Any]:
    """`call` on `ids`, `size` at a time; an id EC2 says vanished is dropped and the chunk
    asked again without it. Raises ProviderError otherwise."""
    for start in range(0, len(ids), size):
        pending = list(ids[start : start + size])
        while pending:
            try:
                page = call(pending)
            except ClientError as exc:
                gone = _gone_ids(exc, pending)
                if not gone:
                    raise translate(exc, scope) from exc
                pending = [i for i in pending if i not in gone]
                continue
            except BotoCoreError as exc:
                raise translate(exc, scope) from exc
            yield page
            break


def describe_raw(ec2: EC2Client, ids: Sequence[str], scope: str) -> dict[str, dict[str, Any]]:
    """EC2's current record of each id that still exists, one DescribeInstances per chunk
    (plus one more per vanished id EC2 names). Raises ProviderError otherwise."""
    def describe(chunk: list[str]) -> Any:
        with lean_records():  # the re-check reads what the inventory reads
            return ec2.describe_instances(InstanceIds=chunk)

    out: dict[str, dict[str, Any]] = {}
    for page in _pages(describe, ids, CHUNK, scope):
        for reservation in page.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                out[raw["InstanceId"]] = dict(raw)
    return out


STATUS_CHUNK = 100  # DescribeInstanceStatus takes at most 100 explicit ids


def describe_states(ec2: EC2Client, ids: Sequence[str], scope: str
                    ) -> dict[str, InstanceState]:
    """The state of each id that still exists, from DescribeInstanceStatus (all states):
    a few hundred bytes per instance where DescribeInstances sends its whole record."""
    out: dict[str, InstanceState] = {}
    for page in _pages(lambda chunk: ec2.describe_instance_status(
            InstanceIds=chunk, IncludeAllInstances=True), ids, STATUS_CHUNK, scope):
        for status in page.get("InstanceStatuses", []):
            name = status["InstanceState"]["Name"]
            out[status["InstanceId"]] = EC2_STATES.get(name, InstanceState.PENDING)
    return out


def _state(raw: dict[str, Any]) -> InstanceState:
    return EC2_STATES.get(raw["State"]["Name"], InstanceState.PENDING)


def describe_many(
    ec2: EC2Client, instances: Sequence[Instance], *, observed_at: datetime
) -> dict[str, Instance | None]:
    """Each instance as EC2 shows it now (None: gone or terminated), keyed by id."""
    if not instances:
        return {}
    first = instances[0]
    raws = describe_raw(ec2, [i.instance_id for i in instances], f"{first.account}/{first.region}")
    out: dict[str, Instance | None] = {}
    for inst in instances:
        raw = raws.get(inst.instance_id)
        if raw is None or _state(raw) is InstanceState.TERMINATED:
            out[inst.instance_id] = None
            continue
        same_type = raw["InstanceType"] == inst.instance_type
        gpu = (GpuSpec(inst.gpu_count, inst.gpu_model, inst.gpu_memory_mib) if same_type
               else shipped_gpu_table().get(raw["InstanceType"], GpuSpec.none()))
        out[inst.instance_id] = to_instance(raw, account=inst.account, region=inst.region,
                                            gpu=gpu, observed_at=observed_at)
    return out


def _all(ids: Sequence[str], outcome: ActionOutcome, detail: str,
         state: InstanceState | None = None) -> dict[str, ActionResult]:
    result = ActionResult(outcome=outcome, detail=detail, state_after=state)
    return dict.fromkeys(ids, result)


def send_chunk(operation: str, ids: Sequence[str], send: Send, *, dry_run: bool, scope: str
               ) -> tuple[dict[str, ActionResult], list[str]]:
    """Send one call for `ids`. Returns the final results of the ids it settled (dry run,
    refused, gone, failed) and the ids the real call went through for."""
    settled: dict[str, ActionResult] = {}
    pending = list(ids)
    while pending:
        try:
            send(pending, dry_run)
        except ClientError as exc:
            code = error_code(exc)
            if code == "DryRunOperation":
                settled |= _all(pending, ActionOutcome.DRY_RUN, "permission verified")
                return settled, []
            if code == "UnauthorizedOperation":
                settled |= _all(pending, ActionOutcome.FAILED, (
                    f"not allowed: costguard's AWS role lacks {_PERMISSION[operation]} in "
                    f"{scope} (or a policy condition denies it); add it from "
                    "`costguard iam --provider aws --enforce`"))
                return settled, []
            gone = _gone_ids(exc, pending)
            if gone:
                settled |= _all(sorted(gone), ActionOutcome.SKIPPED, "no longer exists",
                                InstanceState.TERMINATED)
                pending = [i for i in pending if i not in gone]
                continue
            if code == "IncorrectInstanceState" and len(pending) > 1:
                # one of them changed since the re-check: ask for each alone
                through: list[str] = []
                for one in pending:
                    got, ok = send_chunk(operation, [one], send, dry_run=dry_run, scope=scope)
                    settled |= got
                    through += ok
                return settled, through
            if code == "IncorrectInstanceState":
                settled |= _all(pending, ActionOutcome.SKIPPED,
                                f"changed meanwhile: {error_message(exc)}")
                return settled, []
            settled |= _all(pending, ActionOutcome.FAILED, str(translate(exc, scope)))
            return settled, []
        except BotoCoreError as exc:
            settled |= _all(pending, ActionOutcome.FAILED, str(translate(exc, scope)))
            return settled, []
        if dry_run:  # pragma: no cover - EC2 always answers a dry run with an error code
            settled |= _all(pending, ActionOutcome.DRY_RUN, "permission verified")
            return settled, []
        return settled, pending
    return settled, []


def stop_many(ec2: EC2Client, instances: Sequence[Instance], *, dry_run: bool, scope: str
              ) -> dict[str, ActionResult]:
    """StopInstances per chunk; each instance's state after is the one its answer gives
    (`StoppingInstances[].CurrentState`), read with DescribeInstanceStatus where it gives
    none. A controller's member is never in a StopInstances call (the last guard: the act
    stage routes members to scale-in or a notice long before)."""
    out: dict[str, ActionResult] = {
        i.instance_id: ActionResult(outcome=ActionOutcome.SKIPPED,
                                    detail=f"managed by {i.owner}: not stopped as if alone")
        for i in instances if i.owner is not None}
    instances = [i for i in instances if i.owner is None]

    answered: dict[str, InstanceState] = {}  # each id's state in StopInstances' answer

    def send(ids: list[str], dry: bool) -> Any:
        response = ec2.stop_instances(InstanceIds=ids, DryRun=dry)
        for item in response.get("StoppingInstances", []):
            answered[item["InstanceId"]] = EC2_STATES.get(item["CurrentState"]["Name"],
                                                          InstanceState.PENDING)
        return response

    for chunk in chunks(instances):
        settled, through = send_chunk("stop", [i.instance_id for i in chunk], send,
                                      dry_run=dry_run, scope=scope)
        out |= settled
        out |= _verify_stopped(ec2, through, answered, scope)
    return out


def _verify_stopped(ec2: EC2Client, ids: list[str], answered: Mapping[str, InstanceState],
                    scope: str) -> dict[str, ActionResult]:
    unread = [i for i in ids if i not in answered]
    after = {i: answered[i] for i in ids if i in answered}
    out: dict[str, ActionResult] = {}
    if unread:
        try:
            after |= describe_states(ec2, unread, scope)
        except ProviderError:  # the stop went through; only its verification failed
            out |= _all(unread, ActionOutcome.DONE, "stop requested (state after not read)")
    for iid in ids:
        if iid in out:
            continue
        state = after.get(iid, InstanceState.TERMINATED)
        if state in (InstanceState.RUNNING, InstanceState.PENDING):
            out[iid] = ActionResult(outcome=ActionOutcome.FAILED, state_after=state,
                                    detail=f"StopInstances accepted, but the instance is "
                                           f"still {state.value}")
        else:
            out[iid] = ActionResult(outcome=ActionOutcome.DONE, detail="stop requested",
                                    state_after=state)
    return out


def set_tags_many(
    ec2: EC2Client,
    instances: Sequence[Instance],
    tags: Mapping[str, str],
    remove: Sequence[str],
    *,
    dry_run: bool,
    scope: str,
) -> dict[str, ActionResult]:
    """CreateTags and/or DeleteTags per chunk with every id of the chunk as Resources."""
    ids = [i.instance_id for i in instances]
    reserved = sorted(k for k in [*tags, *remove] if k.lower().startswith("aws:"))
    if reserved:
        return _all(ids, ActionOutcome.FAILED,
                    f"tag keys starting with 'aws:' are reserved by AWS: {', '.join(reserved)}")
    pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
    keys = [{"Key": k} for k in remove]

    def create(chunk: list[str], dry: bool) -> Any:
        return ec2.create_tags(Resources=chunk, Tags=pairs, DryRun=dry)  # type: ignore[arg-type]

    def delete(chunk: list[str], dry: bool) -> Any:
        return ec2.delete_tags(Resources=chunk, Tags=keys, DryRun=dry)  # type: ignore[arg-type]

    out: dict[str, ActionResult] = {}
    done = (ActionResult(outcome=ActionOutcome.DRY_RUN, detail="permission verified")
            if dry_run else ActionResult(outcome=ActionOutcome.DONE,
                                         detail=tag_detail(tags, remove)))
    if not tags and not remove:
        done = ActionResult(outcome=ActionOutcome.DRY_RUN if dry_run else ActionOutcome.DONE,
                            detail="nothing to change")
    for start in range(0, len(ids), CHUNK):
        pending = ids[start : start + CHUNK]
        for operation, send, wanted in (("create-tags", create, bool(tags)),
                                        ("delete-tags", delete, bool(remove))):
            if not wanted or not pending:
                continue
            settled, through = send_chunk(operation, pending, send, dry_run=dry_run,
                                          scope=scope)
            # a dry run that proved create-tags goes on to prove delete-tags as well
            proven = [i for i, r in settled.items() if r.outcome is ActionOutcome.DRY_RUN]
            out |= {i: r for i, r in settled.items() if r.outcome is not ActionOutcome.DRY_RUN}
            pending = proven if dry_run else through
        out |= dict.fromkeys(pending, done)
    return out


_VOLUME_FILTER_VALUES = 200  # EC2's limit on filter values per call


class Prefetched:
    """Stands in for the EC2 client in `disks.stopped_cost`: answers with volumes read before."""

    def __init__(self, volumes: list[dict[str, Any]]) -> None:
        self.volumes = volumes

    def describe_volumes(self, **_: Any) -> dict[str, Any]:
        return {"Volumes": self.volumes}


def volumes_by_instance(ec2: EC2Client, ids: Sequence[str], scope: str
                        ) -> dict[str, list[dict[str, Any]]]:
    """The EBS volumes attached to each id, one DescribeVolumes per 200 ids (and page);
    empty when they cannot be read (then stopped_cost asks per instance, as before)."""
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    try:
        for start in range(0, len(ids), _VOLUME_FILTER_VALUES):
            chunk = list(ids[start : start + _VOLUME_FILTER_VALUES])
            kwargs: dict[str, Any] = {
                "Filters": [{"Name": "attachment.instance-id", "Values": chunk}]}
            while True:
                page = ec2.describe_volumes(**kwargs)
                for vol in page.get("Volumes", []):
                    for att in vol.get("Attachments", []):
                        if att.get("InstanceId") in out:
                            out[att["InstanceId"]].append(dict(vol))
                token = page.get("NextToken")
                if not token:
                    break
                kwargs["NextToken"] = token
    except (ClientError, BotoCoreError):
        return {}
    return out


__all__ = ["CHUNK", "Prefetched", "describe_many", "describe_raw", "set_tags_many",
           "stop_many", "volumes_by_instance"]
