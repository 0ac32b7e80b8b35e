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

_ADDED = "costguard.outbox.added"  # session.info: (transaction, dedupe keys enqueued in it)


def enqueue(
    session: Session, *, dedupe_key: str, kind: str, subject: str, body: str, now: datetime,
    severity: str = "info", recipients: Sequence[str] = (), context: dict[str, Any] | None = None,
    policy: str | None = None, provider: str | None = None, instance_id: str | None = None,
    team: str | None = None, owner: str | None = None,
) -> bool:
    """Add an alert unless one with the same dedupe key exists; True if added.

    The row is flushed with the transaction's other rows, not at once: the check neither
    autoflushes the session nor flushes the new row (per-alert flushes were most of a large
    act stage's CPU), and keys added earlier in this transaction are remembered instead."""
    with session.no_autoflush:
        exists = session.exec(select(AlertRow.id).where(AlertRow.dedupe_key == dedupe_key)).first()
    added = _added_in_transaction(session)  # after the query: the transaction has begun
    if exists is not None or dedupe_key in added:
        return False
    added.add(dedupe_key)
    session.add(AlertRow(
        dedupe_key=dedupe_key, kind=kind, severity=severity, created_at=now, policy=policy,
        provider=provider, instance_id=instance_id, team=team, owner=owner,
        recipients=list(recipients), subject=subject, body=body, context=context or {},
        status="pending", next_attempt_at=now,
    ))
    return True


def _added_in_transaction(session: Session) -> set[str]:
    """Dedupe keys enqueued in the session's current transaction (a rolled-back or committed
    transaction's keys are dropped with it)."""
    transaction = session.get_transaction()
    held = session.info.get(_ADDED)
    if held is None or held[0] is not transaction:
        held = (transaction, set())
        session.info[_ADDED] = held
    keys: set[str] = held[1]
    return keys


def pending(session: Session, now: datetime, limit: int = 500) -> list[AlertRow]:
    stmt = (select(AlertRow)
            .where(AlertRow.status == "pending", col(AlertRow.next_attempt_at) <= now)
            .order_by(col(AlertRow.id)).limit(limit))
    return list(session.exec(stmt))
