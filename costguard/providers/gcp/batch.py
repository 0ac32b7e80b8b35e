"""Many VMs at once: the optional `BatchActions` capability for GCP (stop, relabel).

Compute Engine has no multi-instance stop or setLabels, so the per-instance calls run
concurrently in a bounded thread pool, in phases: issue every stop, then wait on every
zone operation, then read every VM back. Issuing all first matters: a real stop takes
tens of seconds, so waiting per instance inside the pool would serialize them by pool size.

The re-check before acting (`describe_many`) is in reads.py. The VMs it read are kept for
`READ_FRESH`: `set_labels_many` relabels with the label fingerprint of that read instead of
reading each VM again (a 412 still re-reads), and `stop_many` prices the stopped VMs'
persistent disks from them with one filtered `disks.aggregatedList` (disks.py), so the
"still costs" note of each stopped VM makes no call.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.gcp import actions, disks, http_batch
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.errors import for_vm, translate, vm_scope
from costguard.providers.gcp.pool import BatchContext, each, failed
from costguard.providers.gcp.reads import describe_many, recent

# -- stop --------------------------------------------------------------------------------


def _issue_stop(ctx: BatchContext, inst: Instance, request_id: str) -> compute_v1.Operation:
    project, zone, name = actions.where(inst)
    request = compute_v1.StopInstanceRequest(
        project=project, zone=zone, instance=name, request_id=request_id)
    return for_vm(inst, lambda: ctx.actions.instances.stop_unary(
        request=request, retry=ctx.actions.retry))


def _wait(ctx: BatchContext, item: tuple[Instance, compute_v1.Operation]
          ) -> compute_v1.Operation:
    inst, op = item
    return for_vm(inst, lambda: actions.wait(ctx.actions, inst, op))


def _before(instances: Iterable[Instance], verb: str, *, dry_run: bool
            ) -> tuple[dict[str, ActionResult], list[Instance]]:
    """Results known without a call (not running, dry run), and the instances to act on."""
    results: dict[str, ActionResult] = {}
    todo: list[Instance] = []
    for inst in instances:
        if inst.state is not InstanceState.RUNNING:
            results[inst.instance_id] = ActionResult(
                outcome=ActionOutcome.SKIPPED, state_after=inst.state,
                detail=f"{inst.name} is {inst.state} at the re-check, not {verb}-able")
        elif dry_run:
            results[inst.instance_id] = ActionResult(
                outcome=ActionOutcome.DRY_RUN, state_after=inst.state,
                detail=f"would {verb} {inst.name} ({inst.instance_type}) in {inst.zone} of "
                       f"project {inst.account}")
        else:
            todo.append(inst)
    return results, todo


def stop_many(ctx: BatchContext, instances: Sequence[Instance], *, dry_run: bool,
              request_id: Callable[[], str]) -> dict[str, ActionResult]:
    """See `BatchActions.stop_many`: issue all stops, wait on all operations, read back."""
    results, todo = _before(instances, "stop", dry_run=dry_run)
    if ctx.batches is not None:
        calls: list[VmCall] = [(inst, _vm_path(inst, "stop", requestId=request_id()), None)
                               for inst in todo]
        try:
            issued = _batched(ctx, calls)
        except ProviderError as exc:  # no answer: each VM failed; the next re-check sees
            issued = [exc] * len(calls)
    else:
        issued = each(todo, lambda inst: _issue_stop(ctx, inst, request_id()), ctx.workers)
    pending: list[tuple[Instance, compute_v1.Operation]] = []
    for inst, op in zip(todo, issued, strict=True):
        if isinstance(op, ProviderError):
            results[inst.instance_id] = failed(op)
        else:
            pending.append((inst, op))
    finished = (_wait_batched(ctx, pending) if ctx.batches is not None
                else each(pending, lambda item: _wait(ctx, item), ctx.workers))
    done: list[tuple[Instance, compute_v1.Operation]] = []
    for (inst, _), op in zip(pending, finished, strict=True):
        if isinstance(op, ProviderError):
            results[inst.instance_id] = failed(op)
        elif (error := actions.op_error(op)) is not None:
            results[inst.instance_id] = ActionResult(outcome=ActionOutcome.FAILED, detail=error)
        else:
            done.append((inst, op))
    results.update(_verify_stopped(ctx, done))
    _price_stopped(ctx, [inst for inst, _ in done
                         if results[inst.instance_id].outcome is ActionOutcome.DONE])
    return results


def _price_stopped(ctx: BatchContext, stopped: Sequence[Instance]) -> None:
    """What the stopped VMs' disks still cost, from the read-back's VMs and one filtered
    disks listing per project; a VM left out is priced by stopped_cost on its own."""
    with ctx.lock:
        for inst in stopped:
            ctx.stopped_costs.pop(inst.instance_id, None)  # an earlier stop's quote is stale
        vms = [(inst, got[1]) for inst in stopped
               if (got := ctx.reads.get(inst.instance_id)) is not None]
    if vms:
        costs = disks.stopped_costs(ctx.disks(), vms, page_size=ctx.page_size,
                                    retry=ctx.actions.retry)
        with ctx.lock:
            ctx.stopped_costs.update(costs)


def _verify_stopped(ctx: BatchContext, done: list[tuple[Instance, compute_v1.Operation]]
                    ) -> dict[str, ActionResult]:
    """Read the stopped VMs back: DONE only if they are stopping or stopped now."""
    if not done:
        return {}
    try:
        fresh = describe_many(ctx, [inst for inst, _ in done])
        unread = ""
    except ProviderError as exc:
        fresh, unread = {}, f" (state after not read back: {exc})"
    out: dict[str, ActionResult] = {}
    for inst, op in done:
        now = fresh.get(inst.instance_id)
        state = now.state if now is not None else (
            InstanceState.TERMINATED if inst.instance_id in fresh else None)
        if state is InstanceState.RUNNING or state is InstanceState.PENDING:
            out[inst.instance_id] = ActionResult(
                outcome=ActionOutcome.FAILED, state_after=state,
                detail=f"stop {inst.name}: operation {op.name} done but the VM is {state}")
        else:
            out[inst.instance_id] = ActionResult(
                outcome=ActionOutcome.DONE, state_after=state,
                detail=f"stop {inst.name}: operation {op.name} done{unread}")
    return out


# -- labels ------------------------------------------------------------------------------


def set_labels_many(ctx: BatchContext, instances: Sequence[Instance], tags: Mapping[str, str],
                    *, remove: Sequence[str], dry_run: bool) -> dict[str, ActionResult]:
    """See `BatchActions.set_tags_many`. setLabels needs each VM's label fingerprint: a VM
    describe_many read less than READ_FRESH ago is relabelled with that read's, the others
    are read (get) first; a 412 re-reads and retries. VMs run concurrently."""
    now = ctx.now()
    first = {inst.instance_id: recent(ctx, inst, now) for inst in instances}
    if ctx.batches is not None:
        return _set_labels_batched(ctx, instances, first, tags, remove=remove, dry_run=dry_run)
    results = each(
        instances,
        lambda inst: actions.set_labels(ctx.actions, inst, tags, remove=remove,
                                        dry_run=dry_run, fresh=first[inst.instance_id]),
        ctx.workers)
    return {inst.instance_id: (failed(r) if isinstance(r, ProviderError) else r)
            for inst, r in zip(instances, results, strict=True)}


# -- HTTP batches --------------------------------------------------------------------------


def _zone_path(inst: Instance, *parts: str, **query: str) -> str:
    """`/compute/v1/projects/P/zones/Z/PART/...?query` for the VM's project and zone."""
    project, zone, _ = actions.where(inst)
    q = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
    return "/".join(["/compute/v1/projects", quote(project, safe=""), "zones",
                     quote(zone, safe=""), *(quote(p, safe="") for p in parts)]) + (
        f"?{q}" if q else "")


def _vm_path(inst: Instance, verb: str, **query: str) -> str:
    _, _, name = actions.where(inst)
    return _zone_path(inst, "instances", name, verb, **query)


VmCall = tuple[Instance, str, dict[str, Any] | None]  # the VM, the call's path, its body


def _operation(inst: Instance, answer: http_batch.Answer
               ) -> compute_v1.Operation | ProviderError:
    """The operation an answer carries, or its error as the client library would have
    raised it, translated."""
    if not answer.ok:
        return translate(answer.error(), vm_scope(inst))
    op: compute_v1.Operation = compute_v1.Operation.from_json(json.dumps(answer.body),
                                                              ignore_unknown_fields=True)
    return op


def _answers(ctx: BatchContext, calls: Sequence[VmCall], method: str = "POST"
             ) -> list[http_batch.Answer]:
    if not calls:
        return []
    assert ctx.batches is not None
    return http_batch.send(ctx.batches.send,
                           [http_batch.Call(method, path, body) for _, path, body in calls],
                           ctx.retry_settings, f"{calls[0][0].account}/batch", sleep=ctx.sleep)


def _batched(ctx: BatchContext, calls: Sequence[VmCall], method: str = "POST"
             ) -> list[compute_v1.Operation | ProviderError]:
    """One call per VM, sent in HTTP batches: each VM's operation, or its error."""
    return [_operation(inst, answer) for (inst, _, _), answer in
            zip(calls, _answers(ctx, calls, method), strict=True)]


def _wait_batched(ctx: BatchContext, pending: Sequence[tuple[Instance, compute_v1.Operation]]
                  ) -> list[compute_v1.Operation | ProviderError]:
    """Poll every operation with zoneOperations.get in HTTP batches until each is DONE (a
    short wait between rounds, growing), or `operation_timeout_s` passes."""
    out: list[compute_v1.Operation | ProviderError] = [op for _, op in pending]
    deadline = time.monotonic() + ctx.actions.operation_timeout_s
    delay = 0.0
    while True:
        waiting = [i for i, op in enumerate(out) if isinstance(op, compute_v1.Operation)
                   and op.status != compute_v1.Operation.Status.DONE]
        if not waiting:
            return out
        if time.monotonic() + delay > deadline:
            for i in waiting:
                inst, op = pending[i]
                out[i] = ProviderError(
                    "gcp", vm_scope(inst), f"operation {op.name} not done after "
                    f"{ctx.actions.operation_timeout_s:.0f} s", retryable=True)
            return out
        if delay:
            ctx.sleep(delay)
        calls: list[VmCall] = [(pending[i][0], _zone_path(pending[i][0], "operations",
                                                          pending[i][1].name), None)
                               for i in waiting]
        try:
            polled = _batched(ctx, calls, method="GET")
        except ProviderError as exc:
            polled = [exc] * len(calls)
        for i, op_now in zip(waiting, polled, strict=True):
            out[i] = op_now
        delay = min(max(delay * 2, 0.5), 5.0)


def _set_labels_batched(ctx: BatchContext, instances: Sequence[Instance],
                        first: Mapping[str, compute_v1.Instance | None], tags: Mapping[str, str],
                        *, remove: Sequence[str], dry_run: bool) -> dict[str, ActionResult]:
    """setLabels of every VM read by describe_many in HTTP batches, then their operations
    polled in batches; a VM not read lately, or answered 412 (relabelled meanwhile), takes
    the one-VM path (read, merge, retry)."""
    results: dict[str, ActionResult] = {}
    planned: list[tuple[Instance, dict[str, str], dict[str, str], InstanceState]] = []
    alone: list[Instance] = []
    calls: list[VmCall] = []
    for inst in instances:
        vm = first.get(inst.instance_id)
        if vm is None:
            alone.append(inst)
            continue
        plan = actions.plan_labels(inst, vm, tags, remove=remove, dry_run=dry_run)
        if isinstance(plan, ActionResult):
            results[inst.instance_id] = plan
            continue
        current, wanted, state = plan
        planned.append((inst, current, wanted, state))
        calls.append((inst, _vm_path(inst, "setLabels", requestId=str(uuid.uuid4())),
                      {"labels": wanted, "labelFingerprint": vm.label_fingerprint}))
    try:
        answers: list[http_batch.Answer | ProviderError] = list(_answers(ctx, calls))
    except ProviderError as exc:
        answers = [exc] * len(calls)
    pending: list[tuple[Instance, compute_v1.Operation]] = []
    kept: list[tuple[dict[str, str], dict[str, str], InstanceState]] = []
    for (inst, current, wanted, state), answer in zip(planned, answers, strict=True):
        if isinstance(answer, http_batch.Answer) and answer.status == 412:
            alone.append(inst)  # the fingerprint moved: read, merge and try again
            continue
        op = answer if isinstance(answer, ProviderError) else _operation(inst, answer)
        if isinstance(op, ProviderError):
            results[inst.instance_id] = failed(op)
            continue
        pending.append((inst, op))
        kept.append((current, wanted, state))
    finished = _wait_batched(ctx, pending)
    for (inst, _), (current, wanted, state), op in zip(pending, kept, finished, strict=True):
        results[inst.instance_id] = (failed(op) if isinstance(op, ProviderError)
                                     else actions.labels_set(inst, op, current, wanted, state))
    solo = each(alone, lambda inst: actions.set_labels(ctx.actions, inst, tags, remove=remove,
                                                       dry_run=dry_run), ctx.workers)
    for inst, r in zip(alone, solo, strict=True):
        results[inst.instance_id] = failed(r) if isinstance(r, ProviderError) else r
    return results
