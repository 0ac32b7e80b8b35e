"""The alerts outbox: rows written in the same transaction as the event they report.

Delivery (Slack, email, console) reads pending rows later; a crash between the event and the
delivery loses nothing, and the dedupe key keeps one row per event.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlmodel import Session, col, select

from costguard.store.tables import AlertRow

_ADDED = "costguard.outbox.added"  # session.info: (transaction, dedupe keys enqueued in it)
_KEYS_PER_QUERY = 500  # bound parameters per IN (...) list


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


def enqueue_many(session: Session, alerts: Sequence[dict[str, Any]]) -> list[bool]:
    """`enqueue` for many alerts (each a dict of its keyword arguments), in order: one
    SELECT per 500 dedupe keys and one INSERT for those added. Returns, per alert, whether
    it was added. The rows are inserted at once, after the session's pending rows (the
    INSERT autoflushes), so alerts added earlier with `enqueue` keep coming first."""
    if not alerts:
        return []
    keys = [a["dedupe_key"] for a in alerts]
    exists: set[str] = set()
    with session.no_autoflush:
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            exists.update(session.exec(select(AlertRow.dedupe_key).where(
                col(AlertRow.dedupe_key).in_(keys[start : start + _KEYS_PER_QUERY]))))
    added = _added_in_transaction(session)  # after the query: the transaction has begun
    rows: list[dict[str, Any]] = []
    out: list[bool] = []
    for a in alerts:
        key = a["dedupe_key"]
        if key in exists or key in added:
            out.append(False)
            continue
        added.add(key)
        out.append(True)
        now = a["now"]
        rows.append({
            "dedupe_key": key, "kind": a["kind"], "severity": a.get("severity", "info"),
            "created_at": now, "policy": a.get("policy"), "provider": a.get("provider"),
            "instance_id": a.get("instance_id"), "team": a.get("team"),
            "owner": a.get("owner"), "recipients": list(a.get("recipients", ())),
            "subject": a["subject"], "body": a["body"], "context": a.get("context") or {},
            "status": "pending", "attempts": 0, "next_attempt_at": now, "sent_at": None,
            "last_error": None})
    if rows:
        session.execute(insert(AlertRow.__table__), rows)  # type: ignore[attr-defined]
    return out


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
