"""Collect stage: inventory from every provider into the store; unreadable scopes are gaps."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from sqlmodel import Session, col, select

from costguard.actions.batch import each_scope
from costguard.alerts.outbox import enqueue
from costguard.errors import ProviderError
from costguard.model import Gap, Inventory
from costguard.providers.base import Provider
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.tables import GapRow

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


METRICS_SCOPE = " metrics"  # suffix of a scope whose inventory reads but metrics do not
STORAGE_SCOPE = " storage"  # suffix of a scope whose volumes, snapshots, addresses do not


def _gap_class(scope: str) -> str:
    return ("metrics" if scope.endswith(METRICS_SCOPE) else
            "storage" if scope.endswith(STORAGE_SCOPE) else "inventory")


_GAP_MEANS = {
    "metrics": "GPU metrics there cannot be read: no instance there is treated as idle until "
               "this is fixed; the rest of the fleet is governed.",
    "storage": "Volumes, snapshots and addresses there are not governed until this is fixed; "
               "the rest are.",
    "inventory": "Instances there are not governed until this is fixed; the rest of the "
                 "fleet is.",
}


def record_gaps(s: Session, provider: str, gaps: list[Gap], now: datetime, *,
                metrics: bool = False, storage: bool = False) -> None:
    """Open a gap row (and one alert) per newly unreadable scope; close the ones that read
    again. Inventory, metrics and storage gaps (scopes ending in METRICS_SCOPE,
    STORAGE_SCOPE) are kept apart: each stage closes only its own."""
    own = "metrics" if metrics else "storage" if storage else "inventory"
    open_rows = {g.scope: g for g in s.exec(select(GapRow).where(
        GapRow.provider == provider, col(GapRow.resolved_at).is_(None)))
        if _gap_class(g.scope) == own}
    for gap in gaps:
        row = open_rows.pop(gap.scope, None)
        if row is None:
            row = GapRow(provider=provider, scope=gap.scope, error=gap.error,
                         first_seen=now, last_seen=now)
            s.add(row)
            s.flush()
            # one alert per outage, not one per cycle
            enqueue(s, dedupe_key=f"gap|{provider}|{gap.scope}|{row.id}", kind="gap",
                    severity="warning", now=now, provider=provider,
                    subject=f"costguard cannot read {provider} {gap.scope}",
                    body=f"{gap.error}\n{_GAP_MEANS[own]}", context={"scope": gap.scope})
            log.warning("gap: %s %s: %s", provider, gap.scope, gap.error)
        else:
            row.last_seen, row.error = now, gap.error
            s.add(row)
    for row in open_rows.values():
        row.resolved_at = now
        s.add(row)
