"""The re-check before acting: `describe_many` reads the VMs of a project with one
`aggregatedList` filtered by their names (lookup.py; a few calls for thousands of names), a
lone VM with `instances.get`. A failed call never turns into "gone": only a 404, a VM
missing from a complete listing, or the name now belonging to a new VM does. The raw VMs it
read are kept for `READ_FRESH` (pool.py): `set_labels_many` relabels with the label
fingerprint of that read instead of reading each VM again, and `stop_many` prices the
stopped VMs' disks from them (batch.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from costguard.errors import InstanceNotFound, ProviderError
from costguard.model import Instance
from costguard.providers.gcp import actions, inventory, lookup
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.pool import READ_FRESH, BatchContext, each

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


def recent(ctx: BatchContext, inst: Instance, now: datetime) -> compute_v1.Instance | None:
    """The VM as describe_many read it, if that was less than READ_FRESH ago (used once)."""
    with ctx.lock:
        got = ctx.reads.pop(inst.instance_id, None)
    return got[1] if got is not None and now - got[0] <= READ_FRESH else None
