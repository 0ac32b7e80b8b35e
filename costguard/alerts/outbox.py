"""The alerts outbox: rows written in the same transaction as the event they report.

Delivery (Slack, email, console) reads pending rows later; a crash between the event and the
delivery loses nothing, and the dedupe key keeps one row per event.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from costguard.store.tables import AlertRow
from costguard.store.upsert import insert_many

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
    if not next(_claim(session, [dedupe_key])):
        return False
    session.add(AlertRow(**_row(dict(
        dedupe_key=dedupe_key, kind=kind, severity=severity, now=now, policy=policy,
        provider=provider, instance_id=instance_id, team=team, owner=owner,
        recipients=recipients, subject=subject, body=body, context=context))))
    return True


def enqueue_many(session: Session, alerts: Sequence[dict[str, Any]]) -> list[bool]:
    """`enqueue` for many alerts (each a dict of its keyword arguments), in order: one
    SELECT per 500 dedupe keys and one INSERT for those added (`insert_many`: the driver's
    own executemany on SQLite). Returns, per alert, whether it was added. The rows are
    inserted at once, after the session's pending rows (flushed first), so alerts added
    earlier with `enqueue` keep coming first."""
    if not alerts:
        return []
    claims = _claim(session, [a["dedupe_key"] for a in alerts])
    rows: list[dict[str, Any]] = []
    out: list[bool] = []
    for a, fresh in zip(alerts, claims, strict=True):
        out.append(fresh)
        if fresh:
            rows.append(_row(a))
    if rows:
        insert_many(session, AlertRow.__table__, rows)  # type: ignore[attr-defined]
    return out


def _claim(session: Session, keys: Sequence[str]) -> Iterator[bool]:
    """The dedupe rule of `enqueue` and `enqueue_many`: per key, in order, whether it may be
    added: not if a row with that key is stored, nor if the key was claimed earlier in this
    transaction (by this call included); a key yielded True is remembered as claimed. The
    stored keys are read at the first key, one SELECT per 500 keys, without autoflushing
    the session; each later key is claimed only when the caller asks for it."""
    stored: set[str] = set()
    with session.no_autoflush:
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            stored.update(session.exec(select(AlertRow.dedupe_key).where(
                col(AlertRow.dedupe_key).in_(keys[start : start + _KEYS_PER_QUERY]))))
    added = _added_in_transaction(session)  # after the query: the transaction has begun
    for key in keys:
        fresh = key not in stored and key not in added
        if fresh:
            added.add(key)
        yield fresh


def _row(a: dict[str, Any]) -> dict[str, Any]:
    """The column values of the alert row for `a` (`enqueue`'s keyword arguments)."""
    now = a["now"]
    return {
        "dedupe_key": a["dedupe_key"], "kind": a["kind"], "severity": a.get("severity", "info"),
        "created_at": now, "policy": a.get("policy"), "provider": a.get("provider"),
        "instance_id": a.get("instance_id"), "team": a.get("team"),
        "owner": a.get("owner"), "recipients": list(a.get("recipients", ())),
        "subject": a["subject"], "body": a["body"], "context": a.get("context") or {},
        "status": "pending", "attempts": 0, "next_attempt_at": now, "sent_at": None,
        "last_error": None}


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
