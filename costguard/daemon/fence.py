"""Fencing: cloud actions refuse to run on a replica that no longer leads.

The engine needs no change: `fence_engine` wraps each of its providers in place, so every
stop, start and tag call asks `fence()` first (for PostgreSQL: is the advisory lock still
held on our own connection?). A refused call raises `NotLeader`, a `ProviderError`, which
the act stage journals as failed; the policy state stays `warned`, and the new leader acts
on it under the same journal key, so nothing is lost and nothing is done twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costguard.errors import ProviderError
from costguard.model import ActionResult, GpuMinute, Instance, Inventory, PriceQuote, ProviderName
from costguard.providers.base import Provider

if TYPE_CHECKING:
    from costguard.engine.cycle import Engine

Fence = Callable[[], bool]


class NotLeader(ProviderError):
    def __init__(self, provider: str, scope: str) -> None:
        super().__init__(provider, scope, "refused: this replica is no longer the leader "
                         "(another replica acts now; nothing was changed)")


class FencedProvider:
    """A provider whose mutating calls pass the fence first; reads go straight through."""

    def __init__(self, inner: Provider, fence: Fence) -> None:
        self.inner = inner
        self.fence = fence
        self.name: ProviderName = inner.name
        self.refused = 0

    def _check(self, instance: Instance) -> None:
        if not self.fence():
            self.refused += 1
            raise NotLeader(self.name, f"{instance.account}/{instance.region}")

    def list_instances(self) -> Inventory:
        return self.inner.list_instances()

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> Sequence[GpuMinute]:
        return self.inner.gpu_metrics(instances, start, end)

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        if not dry_run:
            self._check(instance)
        return self.inner.stop(instance, dry_run=dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        if not dry_run:
            self._check(instance)
        return self.inner.start(instance, dry_run=dry_run)

    def set_tags(self, instance: Instance, tags: Mapping[str, str], *,
                 remove: Sequence[str] = (), dry_run: bool) -> ActionResult:
        if not dry_run:
            self._check(instance)
        return self.inner.set_tags(instance, tags, remove=remove, dry_run=dry_run)

    def price(self, instance: Instance) -> PriceQuote | None:
        return self.inner.price(instance)

    def __getattr__(self, name: str) -> Any:  # provider extras (on_demand_price, close ...)
        return getattr(self.inner, name)


def fence_engine(engine: Engine, fence: Fence) -> None:
    """Wrap the engine's providers in place (the engine and its action runner share them)."""
    providers: dict[str, Provider] = engine.providers
    for name, provider in list(providers.items()):
        if not isinstance(provider, FencedProvider):
            providers[name] = FencedProvider(provider, fence)
    runner_providers: Mapping[str, Provider] = engine.runner.providers
    if runner_providers is not providers and isinstance(runner_providers, dict):
        runner_providers.update(providers)


def fenced(providers: Mapping[str, Provider], fence: Fence) -> dict[str, Provider]:
    return {n: p if isinstance(p, FencedProvider) else FencedProvider(p, fence)
            for n, p in providers.items()}
