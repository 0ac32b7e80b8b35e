"""Collect stage: inventory from every provider into the store; unreadable scopes are gaps."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from costguard.actions.batch import each_scope
from costguard.alerts.gaps import record_gaps
from costguard.errors import ProviderError
from costguard.model import Gap, Inventory
from costguard.providers.base import Provider
from costguard.store.db import Database
from costguard.store.inventory import record_inventory

log = logging.getLogger("costguard.collect")
T = TypeVar("T")
R = TypeVar("R")


def each_provider(items: Sequence[T], call: Callable[[T], R]) -> list[R]:
    """`call` on every item (one per provider), each in a thread of its own, results in the
    items' order: one cloud's answers are waited for while another's are read (each
    provider already reads its own scopes concurrently)."""
    return each_scope(len(items), items, call, name="costguard-provider")


def collect(db: Database, providers: Mapping[str, Provider], now: datetime
            ) -> tuple[dict[str, int], list[Gap]]:
    """List every provider; returns instances seen per provider and this cycle's gaps."""
    seen: dict[str, int] = {}
    gaps: list[Gap] = []

    def listed(provider: Provider) -> Inventory:
        try:
            return provider.list_instances()
        except ProviderError as exc:
            return Inventory(gaps=[Gap(provider=provider.name, scope=exc.scope, error=str(exc))])

    # every provider listed at once, then stored one by one in their order
    inventories = each_provider(list(providers.values()), listed)
    for name, inv in zip(providers, inventories, strict=True):
        with db.session() as s:
            record_inventory(s, name, inv.instances, now, complete=not inv.gaps)
            record_gaps(s, name, inv.gaps, now)
        seen[name] = len(inv.instances)
        gaps.extend(inv.gaps)
    return seen, gaps
