"""The alerts outbox: rows written in the same transaction as the event they report.

Delivery (Slack, email, console) reads pending rows later; a crash between the event and the
delivery loses nothing, and the dedupe key keeps one row per event.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from costguard.store.tables import AlertRow


def enqueue(
    session: Session, *, dedupe_key: str, kind: str, subject: str, body: str, now: datetime,
    severity: str = "info", recipients: Sequence[str] = (), context: dict[str, Any] | None = None,
    policy: str | None = None, provider: str | None = None, instance_id: str | None = None,
    team: str | None = None, owner: str | None = None,
) -> bool:
    """Add an alert unless one with the same dedupe key exists; True if added."""
    exists = session.exec(select(AlertRow.id).where(AlertRow.dedupe_key == dedupe_key)).first()
    if exists is not None:
        return False
    session.add(AlertRow(
        dedupe_key=dedupe_key, kind=kind, severity=severity, created_at=now, policy=policy,
        provider=provider, instance_id=instance_id, team=team, owner=owner,
        recipients=list(recipients), subject=subject, body=body, context=context or {},
        status="pending", next_attempt_at=now,
    ))
    session.flush()
    return True


def pending(session: Session, now: datetime, limit: int = 500) -> list[AlertRow]:
    stmt = (select(AlertRow)
            .where(AlertRow.status == "pending", col(AlertRow.next_attempt_at) <= now)
            .order_by(col(AlertRow.id)).limit(limit))
    return list(session.exec(stmt))
