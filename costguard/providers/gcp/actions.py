"""Stop, start and relabel one VM: check it is still as last seen, act, wait, check again.

GCP has no DryRun flag, so a dry run re-reads the VM and reports what would happen.
Mutations use the `*_unary` calls with a `requestId` (GCE drops a repeated request with
the same id, which makes retrying a 503 safe) and wait on our own ZoneOperationsClient:
`ExtendedOperation.result()` would poll the public endpoint, not a configured one.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from costguard.actions.safety import SAME_LAUNCH
from costguard.clock import utc
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.errors import for_vm, from_retry_error, translate, vm_scope
from costguard.providers.gcp.inventory import parse_timestamp, status_name, to_state
from costguard.providers.gcp.owners import owner_from_labels

_LABEL_INVALID = re.compile(r"[^a-z0-9_-]")
SET_LABELS_ATTEMPTS = 4


def label_key(tag: str) -> str:
    """A costguard tag key as a GCE label key: `costguard:protect` -> `costguard_protect`.

    Label keys allow lowercase letters, digits, `_` and `-`, start with a letter, 63 chars.
    """
    key = _LABEL_INVALID.sub("_", tag.lower())[:63]
    return key if key[:1].isalpha() else f"k{key}"[:63]


def label_value(value: str) -> str:
    return _LABEL_INVALID.sub("_", value.lower())[:63]


@dataclass(frozen=True)
class ActionContext:
    instances: compute_v1.InstancesClient
    operations: compute_v1.ZoneOperationsClient
    retry: gretry.Retry
    operation_timeout_s: float


def _where(instance: Instance) -> tuple[str, str, str]:
    if not instance.zone or not instance.name:
        raise ProviderError(
            "gcp",
            instance.account,
            f"instance {instance.instance_id} has no zone/name; re-run inventory before acting",
        )
    return instance.account, instance.zone, instance.name


where = _where  # public name for batch.py and reads.py (other importers use the underscore one)


def read(ctx: ActionContext, instance: Instance) -> compute_v1.Instance:
    project, zone, name = _where(instance)
    return for_vm(instance, lambda: ctx.instances.get(
        project=project, zone=zone, instance=name, retry=ctx.retry))


def recreated(instance: Instance, vm: compute_v1.Instance) -> str | None:
    """Why the VM is not the one we decided about, if its name now belongs to another."""
    if str(vm.id) != instance.instance_id:
        return f"{instance.name} was recreated (id {vm.id}, expected {instance.instance_id})"
    return None


def restarted(instance: Instance, vm: compute_v1.Instance) -> str | None:
    """Why a stop, start or delete must not go ahead: the VM started again since it was last
    seen (its owner came back to it), as EC2's LaunchTime tells. One never started has not."""
    if not vm.last_start_timestamp:
        return None
    seen = utc(instance.launch_time)
    started = parse_timestamp(vm.last_start_timestamp, seen)
    if abs(started - seen) > SAME_LAUNCH:  # the re-check's rule (actions.safety.skip_reason)
        return f"changed meanwhile: started again at {started.isoformat()} (was {seen.isoformat()})"
    return None


def changed(instance: Instance, vm: compute_v1.Instance) -> str | None:
    """Why a stop, start or delete must not touch the VM: recreated, or started again."""
    return recreated(instance, vm) or restarted(instance, vm)


def managed_now(vm: compute_v1.Instance) -> str | None:
    """The last guard before a stop, start or delete call: never on a controller's member."""
    owner = owner_from_labels(vm.labels, {i.key: i.value for i in vm.metadata.items})
    if owner is None:
        return None
    return f"managed by {owner} ({owner.via}): not acted on as if it were alone"


def wait(ctx: ActionContext, instance: Instance, op: compute_v1.Operation) -> compute_v1.Operation:
    project, zone, _ = _where(instance)
    deadline = time.monotonic() + ctx.operation_timeout_s
    while op.status != compute_v1.Operation.Status.DONE:
        if time.monotonic() > deadline:
            raise ProviderError(
                "gcp",
                vm_scope(instance),
                f"operation {op.name} not done after {ctx.operation_timeout_s:.0f} s",
                retryable=True,
            )
        # zoneOperations.wait blocks server-side until done or about 2 minutes pass.
        op = ctx.operations.wait(project=project, zone=zone, operation=op.name, retry=ctx.retry)
    return op


def _op_error(op: compute_v1.Operation) -> str | None:
    # an unset `error` reads as an empty message: no errors
    return "; ".join(f"{e.code}: {e.message}" for e in op.error.errors) or None


op_error = _op_error


def change_power(
    ctx: ActionContext,
    instance: Instance,
    *,
    verb: str,
    allowed_from: set[InstanceState],
    call: Callable[[str], compute_v1.Operation],
    dry_run: bool,
) -> ActionResult:
    """Shared flow of stop/start: `call(request_id)` issues the unary request."""
    vm = read(ctx, instance)
    state = to_state(status_name(vm))
    why = changed(instance, vm) or managed_now(vm)
    if why:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why, state_after=state)
    if state not in allowed_from:
        return ActionResult(
            outcome=ActionOutcome.SKIPPED,
            detail=f"{instance.name} is {status_name(vm)} now, not {verb}-able; nothing done",
            state_after=state,
        )
    if dry_run:
        return ActionResult(
            outcome=ActionOutcome.DRY_RUN,
            detail=f"would {verb} {instance.name} ({vm.machine_type.rpartition('/')[2]}, "
            f"{status_name(vm)}) in {instance.zone} of project {instance.account}",
            state_after=state,
        )
    op = for_vm(instance, lambda: wait(ctx, instance, call(str(uuid.uuid4()))))
    after = to_state(status_name(read(ctx, instance)))
    error = _op_error(op)
    if error:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=error, state_after=after)
    return ActionResult(
        outcome=ActionOutcome.DONE,
        detail=f"{verb} {instance.name}: operation {op.name} done",
        state_after=after,
    )


def stop(ctx: ActionContext, instance: Instance, *, dry_run: bool) -> ActionResult:
    project, zone, name = _where(instance)

    def call(request_id: str) -> compute_v1.Operation:
        request = compute_v1.StopInstanceRequest(
            project=project, zone=zone, instance=name, request_id=request_id
        )
        return ctx.instances.stop_unary(request=request, retry=ctx.retry)

    return change_power(
        ctx, instance, verb="stop", allowed_from={InstanceState.RUNNING}, call=call, dry_run=dry_run
    )


def start(ctx: ActionContext, instance: Instance, *, dry_run: bool) -> ActionResult:
    project, zone, name = _where(instance)

    def call(request_id: str) -> compute_v1.Operation:
        request = compute_v1.StartInstanceRequest(
            project=project, zone=zone, instance=name, request_id=request_id
        )
        return ctx.instances.start_unary(request=request, retry=ctx.retry)

    return change_power(
        ctx,
        instance,
        verb="start",
        allowed_from={InstanceState.STOPPED},
        call=call,
        dry_run=dry_run,
    )


def wanted_labels(current: Mapping[str, str], tags: Mapping[str, str],
                  remove: Sequence[str]) -> dict[str, str]:
    """`current` labels with costguard's `tags` set and the keys in `remove` dropped, each
    written as a label (a VM's or a TPU node's: the same rules)."""
    add = {label_key(k): label_value(v) for k, v in tags.items()}
    drop = {label_key(k) for k in remove}
    return {k: v for k, v in {**current, **add}.items() if k not in drop}


def plan_labels(instance: Instance, vm: compute_v1.Instance, tags: Mapping[str, str], *,
                remove: Sequence[str], dry_run: bool
                ) -> ActionResult | tuple[dict[str, str], dict[str, str], InstanceState]:
    """What setLabels would send for `vm` as read: the result when no call is due (changed
    VM, labels already as wanted, dry run), else (labels now, labels wanted, state)."""
    _, _, name = _where(instance)
    why = recreated(instance, vm)  # a label is right whenever it started
    if why:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why)
    current = dict(vm.labels)
    wanted = wanted_labels(current, tags, remove)
    state = to_state(status_name(vm))
    if wanted == current:
        return ActionResult(
            outcome=ActionOutcome.DRY_RUN if dry_run else ActionOutcome.DONE,
            detail=f"labels of {name} already as wanted; nothing to change",
            state_after=state,
        )
    if dry_run:
        return ActionResult(
            outcome=ActionOutcome.DRY_RUN,
            detail=f"would set labels of {name}: {label_diff(current, wanted)}",
            state_after=state,
        )
    return current, wanted, state


def labels_set(instance: Instance, op: compute_v1.Operation, current: Mapping[str, str],
               wanted: Mapping[str, str], state: InstanceState) -> ActionResult:
    """The result of a finished setLabels operation."""
    _, _, name = _where(instance)
    error = _op_error(op) or _retargeted(instance, op)
    if error:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=error, state_after=state)
    return ActionResult(
        outcome=ActionOutcome.DONE,
        detail=f"labels of {name}: {label_diff(current, wanted)}",
        state_after=state,
    )


def set_labels(
    ctx: ActionContext,
    instance: Instance,
    tags: Mapping[str, str],
    *,
    remove: Sequence[str] = (),
    dry_run: bool,
    fresh: compute_v1.Instance | None = None,
) -> ActionResult:
    """Merge `tags` into the labels and drop `remove`; a 412 (someone else relabelled
    meanwhile) re-reads the labels and tries again. `fresh`: the VM as just read by the
    caller (reads.describe_many), used instead of reading it again for the first try."""
    project, zone, name = _where(instance)
    for attempt in range(SET_LABELS_ATTEMPTS):
        vm = fresh if attempt == 0 and fresh is not None else read(ctx, instance)
        planned = plan_labels(instance, vm, tags, remove=remove, dry_run=dry_run)
        if isinstance(planned, ActionResult):
            return planned
        current, wanted, state = planned
        request = compute_v1.SetLabelsInstanceRequest(
            project=project,
            zone=zone,
            instance=name,
            request_id=str(uuid.uuid4()),
            instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
                label_fingerprint=vm.label_fingerprint, labels=wanted
            ),
        )
        try:
            op = wait(
                ctx, instance, ctx.instances.set_labels_unary(request=request, retry=ctx.retry)
            )
        except gexc.PreconditionFailed:
            continue  # fingerprint moved: read the new labels and merge again
        except gexc.GoogleAPICallError as exc:
            raise translate(exc, vm_scope(instance)) from exc
        except gexc.RetryError as exc:
            raise from_retry_error(exc, vm_scope(instance)) from exc
        return labels_set(instance, op, current, wanted, state)
    return ActionResult(
        outcome=ActionOutcome.FAILED,
        detail=f"labels of {name} kept changing under us ({SET_LABELS_ATTEMPTS} tries, HTTP 412)",
    )


def _retargeted(instance: Instance, op: compute_v1.Operation) -> str | None:
    """setLabels addresses a VM by name; the operation names the VM it changed. Another id:
    the VM was deleted and recreated under that name, with the same labels (else the
    fingerprint would have answered 412), between our read and the call."""
    if op.target_id and str(op.target_id) != instance.instance_id:
        return (f"{instance.name} was recreated (id {op.target_id}, expected "
                f"{instance.instance_id}) after it was read; the labels went to the new VM")
    return None


def label_diff(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """What a relabel changes, as the journal says it: `+team=nlp, -owner`."""
    parts = [f"+{k}={v}" for k, v in sorted(after.items()) if before.get(k) != v]
    parts += [f"-{k}" for k in sorted(before) if k not in after]
    return ", ".join(parts)
