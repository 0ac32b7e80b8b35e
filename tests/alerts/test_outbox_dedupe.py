"""The outbox's dedupe without a flush per alert: a key enqueued twice in one transaction
is one row, a key already stored is refused, and a rolled-back key may be enqueued again."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlmodel import Session, select

from costguard.alerts.outbox import enqueue
from costguard.store.db import Database
from costguard.store.tables import AlertRow

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _enqueue(s: Session, key: str) -> bool:
    return enqueue(s, dedupe_key=key, kind="finding", subject=key, body="b", now=NOW)


def test_dedupe_within_a_transaction_across_sessions_and_after_a_rollback(db_url: str) -> None:
    db = Database(db_url)
    try:
        with db.session() as s:
            assert [_enqueue(s, "a"), _enqueue(s, "b"), _enqueue(s, "a")] == [True, True, False]
            s.commit()
        with db.session() as s:
            assert _enqueue(s, "a") is False  # stored by the earlier session
            assert _enqueue(s, "c") is True
            s.rollback()
            assert _enqueue(s, "c") is True  # the rolled-back row is gone: enqueue it again
            s.commit()
        with db.session() as s:
            assert sorted(r.dedupe_key for r in s.exec(select(AlertRow))) == ["a", "b", "c"]
    finally:
        db.dispose()
