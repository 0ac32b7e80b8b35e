"""Fault injection around a provider: throttling storms, outages, hooks mid-call."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from costguard.errors import ProviderError, ProviderThrottled
from costguard.model import ActionResult, GpuMinute, Instance, Inventory, PriceQuote, ProviderName
from costguard.providers.base import Provider


class FlakyProvider:
    """Raises ProviderThrottled / ProviderError before the call, at rate `rate` while on."""

    def __init__(self, inner: Provider, seed: int = 1, rate: float = 0.0,
                 outage: bool = False) -> None:
        self.inner = inner
        self.name: ProviderName = inner.name
        self.rng = random.Random(seed)
        self.rate = rate
        self.outage = outage  # every call fails, as in a regional outage
        self.injected: Counter[str] = Counter()
        self.before: dict[str, Callable[[], None]] = {}  # method -> hook run before it

    def _maybe_fail(self, method: str) -> None:
        if method in self.before:
            self.before[method]()
        if self.outage:
            self.injected[f"outage:{method}"] += 1
            raise ProviderError(self.name, "111111111111/us-east-1", "endpoint unreachable")
        if self.rng.random() < self.rate:
            self.injected[f"throttled:{method}"] += 1
            raise ProviderThrottled(self.name, "111111111111/us-east-1",
                                    "Rate exceeded (retries exhausted)")

    def list_instances(self) -> Inventory:
        self._maybe_fail("list_instances")
        return self.inner.list_instances()

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        self._maybe_fail("gpu_metrics")
        return self.inner.gpu_metrics(instances, start, end)

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        self._maybe_fail("stop")
        return self.inner.stop(instance, dry_run=dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        self._maybe_fail("start")
        return self.inner.start(instance, dry_run=dry_run)

    def set_tags(self, instance: Instance, tags: Mapping[str, str], *,
                 remove: Sequence[str] = (), dry_run: bool) -> ActionResult:
        self._maybe_fail("set_tags")
        return self.inner.set_tags(instance, tags, remove=remove, dry_run=dry_run)

    def price(self, instance: Instance) -> PriceQuote | None:
        return self.inner.price(instance)

    @property
    def total(self) -> int:
        return sum(self.injected.values())
