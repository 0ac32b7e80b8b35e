"""Many VMs at once: the optional `Describes` and `BatchActions` capabilities for GCP.

Compute Engine has no multi-instance stop or setLabels, so the per-instance calls run
concurrently in a bounded thread pool, in phases: issue every stop, then wait on every
zone operation, then read every VM back. Issuing all first matters: a real stop takes
tens of seconds, so waiting per instance inside the pool would serialize them by pool size.

`describe_many` reads each VM with `instances.get`, concurrently; for a project where the
batch is large against the project's size (as last listed), one paged `aggregatedList` of
the project costs far fewer calls and is used instead. A failed call never turns into
"gone": only a 404, or the name now belonging to a new VM, does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from costguard.errors import InstanceNotFound, ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.providers.gcp import actions, inventory
from costguard.providers.gcp.errors import from_retry_error, translate

T = TypeVar("T")
R = TypeVar("R")

# aggregatedList replaces per-VM gets when it needs at most 1/LIST_ADVANTAGE as many calls.
LIST_ADVANTAGE = 4


@dataclass
class BatchContext:
    actions: actions.ActionContext
    workers: int
    page_size: int
    now: Callable[[], datetime]
    # instances per project as last listed: lets describe_many choose list vs get
    project_sizes: dict[str, int] = field(default_factory=dict)


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


def _get_one(ctx: BatchContext, inst: Instance) -> Instance | None:
    try:
        vm = actions.read(ctx.actions, inst)
    except InstanceNotFound:
        return None
    if str(vm.id) != inst.instance_id:
        return None  # the name belongs to a new VM: the one we decided about is gone
    return inventory.to_instance(inst.account, vm, ctx.now())


def _list_project(ctx: BatchContext, project: str, wanted: list[Instance]
                  ) -> dict[str, Instance | None] | None:
    """The project's VMs by one paged list, or None when part of it could not be read."""
    listed = inventory.list_project(
        ctx.actions.instances, project, page_size=ctx.page_size, retry=ctx.actions.retry,
        observed_at=ctx.now())
    if listed.gaps:
        return None  # an unreadable zone must not make its VMs look gone: fall back to gets
    ctx.project_sizes[project] = len(listed.instances)
    by_id = {i.instance_id: i for i in listed.instances}
    return {i.instance_id: by_id.get(i.instance_id) for i in wanted}


def _prefers_list(ctx: BatchContext, project: str, wanted: int) -> bool:
    size = ctx.project_sizes.get(project)
    if size is None:
        return False
    pages = max(1, math.ceil(size / ctx.page_size))
    return pages * LIST_ADVANTAGE <= wanted


def describe_many(ctx: BatchContext, instances: Sequence[Instance]
                  ) -> dict[str, Instance | None]:
    """See `Describes.describe_many`. Raises the first ProviderError if any VM could not be
    read: without a fresh read the caller must not act on it."""
    out: dict[str, Instance | None] = {}
    by_project: dict[str, list[Instance]] = {}
    for inst in instances:
        by_project.setdefault(inst.account, []).append(inst)
    singles: list[Instance] = []
    for project, wanted in by_project.items():
        listed = _list_project(ctx, project, wanted) if _prefers_list(
            ctx, project, len(wanted)) else None
        if listed is None:
            singles.extend(wanted)
        else:
            out.update(listed)
    results = each(singles, lambda inst: _get_one(ctx, inst), ctx.workers)
    for inst, result in zip(singles, results, strict=True):
        if isinstance(result, ProviderError):
            raise result
        out[inst.instance_id] = result
    return out


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
    issued = each(todo, lambda inst: _issue_stop(ctx, inst, request_id()), ctx.workers)
    pending: list[tuple[Instance, compute_v1.Operation]] = []
    for inst, op in zip(todo, issued, strict=True):
        if isinstance(op, ProviderError):
            results[inst.instance_id] = _failed(op)
        else:
            pending.append((inst, op))
    finished = each(pending, lambda item: _wait(ctx, item), ctx.workers)
    done: list[tuple[Instance, compute_v1.Operation]] = []
    for (inst, _), op in zip(pending, finished, strict=True):
        if isinstance(op, ProviderError):
            results[inst.instance_id] = _failed(op)
        elif (error := actions.op_error(op)) is not None:
            results[inst.instance_id] = ActionResult(outcome=ActionOutcome.FAILED, detail=error)
        else:
            done.append((inst, op))
    results.update(_verify_stopped(ctx, done))
    return results


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
    """See `BatchActions.set_tags_many`. setLabels needs each VM's label fingerprint, so each
    VM is read (get) and relabelled, a 412 re-reads and retries; VMs run concurrently."""
    results = each(
        instances,
        lambda inst: actions.set_labels(ctx.actions, inst, tags, remove=remove,
                                        dry_run=dry_run),
        ctx.workers)
    return {inst.instance_id: (_failed(r) if isinstance(r, ProviderError) else r)
            for inst, r in zip(instances, results, strict=True)}
