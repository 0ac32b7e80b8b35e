"""Many VMs at once: the optional `Describes` and `BatchActions` capabilities for GCP.

Compute Engine has no multi-instance stop or setLabels, so the per-instance calls run
concurrently in a bounded thread pool, in phases: issue every stop, then wait on every
zone operation, then read every VM back. Issuing all first matters: a real stop takes
tens of seconds, so waiting per instance inside the pool would serialize them by pool size.

`describe_many` reads the VMs of a project with one `aggregatedList` filtered by their
names (lookup.py; a few calls for thousands of names), a lone VM with `instances.get`. A
failed call never turns into "gone": only a 404, a VM missing from a complete listing, or
the name now belonging to a new VM does. The raw VMs it read are kept for `READ_FRESH`:
`set_labels_many` relabels with the label fingerprint of that read instead of reading each
VM again (a 412 still re-reads), and `stop_many` prices the stopped VMs' persistent disks
from them with one filtered `disks.aggregatedList` (disks.py), so the "still costs" note of
each stopped VM makes no call.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote

from google.api_core import exceptions as gexc

from costguard.errors import InstanceNotFound, ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState, PriceQuote
from costguard.providers.gcp import actions, disks, http_batch, inventory, lookup
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.errors import from_retry_error, translate
from costguard.providers.gcp.settings import RetrySettings

T = TypeVar("T")
R = TypeVar("R")

# How long a VM read by describe_many stands in for set_labels' own read.
READ_FRESH = timedelta(seconds=60)


@dataclass
class BatchContext:
    actions: actions.ActionContext
    workers: int
    page_size: int
    now: Callable[[], datetime]
    disks: Callable[[], compute_v1.DisksClient]  # the provider's, made on first use
    # Compute Engine HTTP batches (http_batch.py): how to POST one, where, with what
    # back-off; None: one call per VM in the pool
    post: http_batch.Post | None = None
    base_url: str = ""
    retry_settings: RetrySettings = field(default_factory=RetrySettings)
    sleep: Callable[[float], None] = time.sleep
    # raw VMs read by describe_many: instance id -> (when, VM)
    reads: dict[str, tuple[datetime, compute_v1.Instance]] = field(default_factory=dict)
    # what each VM stop_many stopped still costs, read in bulk; popped by stopped_cost
    stopped_costs: dict[str, PriceQuote | None] = field(default_factory=dict)
    # guards both: the act stage calls projects concurrently (its scopes), all on this context
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the re-check listing's partial-response selection (None: whole VMs; inventory.py)
    fields: Callable[[], str | None] = lambda: None


def each(
    items: Sequence[T], fn: Callable[[T], R], workers: int
) -> list[R | ProviderError]:
    """`fn` over `items` in a bounded pool; a ProviderError is returned in place, not raised."""

    def guarded(item: T) -> R | ProviderError:
        try:
            return fn(item)
        except ProviderError as exc:
            return exc

    if not items:
        return []
    if len(items) == 1:
        return [guarded(items[0])]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(guarded, items))


def _scope(inst: Instance) -> str:
    return f"{inst.account}/{inst.zone}/{inst.name}"


def _call(inst: Instance, fn: Callable[[], T]) -> T:
    """Run one Compute call for `inst`, with SDK errors translated at this boundary."""
    try:
        return fn()
    except gexc.GoogleAPICallError as exc:
        raise translate(exc, _scope(inst)) from exc
    except gexc.RetryError as exc:
        raise from_retry_error(exc, _scope(inst)) from exc


# -- describe ----------------------------------------------------------------------------

Raw = dict[str, compute_v1.Instance | None]  # instance id -> the VM now, None: gone


def _get_one(ctx: BatchContext, inst: Instance) -> compute_v1.Instance | None:
    try:
        vm = actions.read(ctx.actions, inst)
    except InstanceNotFound:
        return None
    if str(vm.id) != inst.instance_id:
        return None  # the name belongs to a new VM: the one we decided about is gone
    return vm


def _list_named(ctx: BatchContext, project: str, wanted: list[Instance]
                ) -> tuple[Raw, list[Instance]]:
    """The wanted VMs found by filtered listing, and those left to read one by one (a name
    that cannot go in a filter, or all of them when the listing was incomplete)."""
    named = [i for i in wanted if lookup.filterable(i.name)]
    rest = [i for i in wanted if not lookup.filterable(i.name)]
    if len(named) < 2:
        return {}, wanted  # one get is as cheap as one list
    listed = lookup.instances(ctx.actions.instances, project, (i.name or "" for i in named),
                              page_size=ctx.page_size, retry=ctx.actions.retry,
                              fields=ctx.fields())
    if listed is None:
        return {}, wanted  # an unreadable zone must not make its VMs look gone: gets
    by_id = {str(vm.id): vm for _, vm in listed}
    return {i.instance_id: by_id.get(i.instance_id) for i in named}, rest


def read_many(ctx: BatchContext, instances: Sequence[Instance]) -> Raw:
    """Each VM as Compute shows it now (None: gone). Raises the first ProviderError."""
    out: Raw = {}
    by_project: dict[str, list[Instance]] = {}
    for inst in instances:
        by_project.setdefault(inst.account, []).append(inst)
    singles: list[Instance] = []
    for project, wanted in by_project.items():
        listed, rest = _list_named(ctx, project, wanted)
        out.update(listed)
        singles.extend(rest)
    results = each(singles, lambda inst: _get_one(ctx, inst), ctx.workers)
    for inst, result in zip(singles, results, strict=True):
        if isinstance(result, ProviderError):
            raise result
        out[inst.instance_id] = result
    return out


def describe_many(ctx: BatchContext, instances: Sequence[Instance]
                  ) -> dict[str, Instance | None]:
    """See `Describes.describe_many`. Raises the first ProviderError if any VM could not be
    read: without a fresh read the caller must not act on it."""
    now = ctx.now()
    with ctx.lock:
        for iid in [i for i, (at, _) in ctx.reads.items() if now - at > READ_FRESH]:
            del ctx.reads[iid]
    raw = read_many(ctx, instances)
    out: dict[str, Instance | None] = {}
    fresh: dict[str, tuple[datetime, compute_v1.Instance]] = {}
    for inst in instances:
        vm = raw.get(inst.instance_id)
        if vm is not None:
            fresh[inst.instance_id] = (now, vm)
        out[inst.instance_id] = (inventory.to_instance(inst.account, vm, now)
                                 if vm is not None else None)
    with ctx.lock:
        ctx.reads.update(fresh)
    return out


def _recent(ctx: BatchContext, inst: Instance, now: datetime) -> compute_v1.Instance | None:
    """The VM as describe_many read it, if that was less than READ_FRESH ago (used once)."""
    with ctx.lock:
        got = ctx.reads.pop(inst.instance_id, None)
    return got[1] if got is not None and now - got[0] <= READ_FRESH else None


# -- stop --------------------------------------------------------------------------------


def _failed(exc: ProviderError) -> ActionResult:
    if isinstance(exc, InstanceNotFound):
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=f"gone: {exc}",
                            state_after=InstanceState.TERMINATED)
    return ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))


def _issue_stop(ctx: BatchContext, inst: Instance, request_id: str) -> compute_v1.Operation:
    project, zone, name = actions.where(inst)
    request = compute_v1.StopInstanceRequest(
        project=project, zone=zone, instance=name, request_id=request_id)
    return _call(inst, lambda: ctx.actions.instances.stop_unary(
        request=request, retry=ctx.actions.retry))


def _wait(ctx: BatchContext, item: tuple[Instance, compute_v1.Operation]
          ) -> compute_v1.Operation:
    inst, op = item
    return _call(inst, lambda: actions.wait(ctx.actions, inst, op))


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
    if ctx.post is not None:
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
            results[inst.instance_id] = _failed(op)
        else:
            pending.append((inst, op))
    finished = (_wait_batched(ctx, pending) if ctx.post is not None
                else each(pending, lambda item: _wait(ctx, item), ctx.workers))
    done: list[tuple[Instance, compute_v1.Operation]] = []
    for (inst, _), op in zip(pending, finished, strict=True):
        if isinstance(op, ProviderError):
            results[inst.instance_id] = _failed(op)
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
    first = {inst.instance_id: _recent(ctx, inst, now) for inst in instances}
    if ctx.post is not None:
        return _set_labels_batched(ctx, instances, first, tags, remove=remove, dry_run=dry_run)
    results = each(
        instances,
        lambda inst: actions.set_labels(ctx.actions, inst, tags, remove=remove,
                                        dry_run=dry_run, fresh=first[inst.instance_id]),
        ctx.workers)
    return {inst.instance_id: (_failed(r) if isinstance(r, ProviderError) else r)
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
        return translate(answer.error(), _scope(inst))
    op: compute_v1.Operation = compute_v1.Operation.from_json(json.dumps(answer.body),
                                                              ignore_unknown_fields=True)
    return op


def _answers(ctx: BatchContext, calls: Sequence[VmCall], method: str = "POST"
             ) -> list[http_batch.Answer]:
    if not calls:
        return []
    assert ctx.post is not None
    return http_batch.send(ctx.post, ctx.base_url,
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
                    "gcp", _scope(inst), f"operation {op.name} not done after "
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
            results[inst.instance_id] = _failed(op)
            continue
        pending.append((inst, op))
        kept.append((current, wanted, state))
    finished = _wait_batched(ctx, pending)
    for (inst, _), (current, wanted, state), op in zip(pending, kept, finished, strict=True):
        results[inst.instance_id] = (_failed(op) if isinstance(op, ProviderError)
                                     else actions.labels_set(inst, op, current, wanted, state))
    solo = each(alone, lambda inst: actions.set_labels(ctx.actions, inst, tags, remove=remove,
                                                       dry_run=dry_run), ctx.workers)
    for inst, r in zip(alone, solo, strict=True):
        results[inst.instance_id] = _failed(r) if isinstance(r, ProviderError) else r
    return results
