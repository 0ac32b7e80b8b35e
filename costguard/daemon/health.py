"""Health that tells the truth: cycles that finish "ok" while a scope cannot be read (the
cloud unreachable, a role gone) are not a healthy service. Shared by /readyz and
`costguard status`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from costguard.clock import utc
from costguard.store.tables import CycleRow, GapRow

DEGRADED_AFTER_CYCLES = 3  # a scope unreadable for longer than this many poll intervals


def unreadable(s: Session, now: datetime, poll: timedelta,
               cycles: int = DEGRADED_AFTER_CYCLES) -> list[str]:
    """Scopes (inventory or metrics) that have been unreadable for more than `cycles` poll
    intervals, as "provider scope (since ...)"."""
    since = now - poll * cycles
    rows = s.exec(select(GapRow).where(col(GapRow.resolved_at).is_(None),
                                       col(GapRow.first_seen) < since))
    return [f"{g.provider} {g.scope} (since {utc(g.first_seen):%Y-%m-%d %H:%M} UTC)"
            for g in rows]


def last_governed(s: Session) -> int | None:
    """How many instances the last finished cycle governed (None: no cycle yet)."""
    row = s.exec(select(CycleRow).where(col(CycleRow.status) == "ok")
                 .order_by(col(CycleRow.id).desc()).limit(1)).first()
    if row is None:
        return None
    summary: Any = row.summary or {}
    value = summary.get("instances") if isinstance(summary, dict) else None
    if isinstance(value, dict):  # per provider
        return sum(int(n) for n in value.values())
    return int(value) if isinstance(value, int) else None
