"""What the many-VM calls of GCP share: the `BatchContext` the provider keeps, the bounded
pool `each` runs calls in, and what a VM's failed call makes of its result (`failed`).

The reads before acting are in reads.py, the stops and relabels in batch.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from costguard.errors import InstanceNotFound, ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState, PriceQuote
from costguard.providers.gcp import actions
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.batch_joiner import Joiner
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
    # Compute Engine HTTP batches (http_batch.py), each sent with the other projects'
    # calls of the moment (batch_joiner.py); None: one call per VM in the pool
    batches: Joiner | None = None
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


def act_each(items: Sequence[Instance], act: Callable[[Instance], ActionResult],
             workers: int) -> dict[str, ActionResult]:
    """`act` on every instance, `workers` at a time; an instance's error is its result."""
    results = each(items, act, workers)
    return {i.instance_id: (failed(r) if isinstance(r, ProviderError) else r)
            for i, r in zip(items, results, strict=True)}


def read_each(items: Sequence[Instance], read: Callable[[Instance], R],
              workers: int) -> dict[str, R]:
    """`read` of every instance, `workers` at a time; the first error is raised."""
    out: dict[str, R] = {}
    for item, got in zip(items, each(items, read, workers), strict=True):
        if isinstance(got, ProviderError):
            raise got
        out[item.instance_id] = got
    return out


def failed(exc: ProviderError) -> ActionResult:
    if isinstance(exc, InstanceNotFound):
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail=f"gone: {exc}",
                            state_after=InstanceState.TERMINATED)
    return ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))
