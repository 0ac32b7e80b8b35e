"""Gaps: scopes a provider could not read. One row and one alert per outage, closed when
the scope reads again; inventory, metrics and storage gaps are kept apart."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlmodel import Session, col, select

from costguard.alerts.outbox import enqueue
from costguard.model import Gap
from costguard.store.tables import GapRow

log = logging.getLogger("costguard.engine")

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
