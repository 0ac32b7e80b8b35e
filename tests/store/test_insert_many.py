"""insert_many: the act stage's bulk rows (journal, findings, alerts, new policy states) end
as the ORM would have stored them, in order, after what the session had pending; on SQLite
through the driver's executemany, on PostgreSQL through SQLAlchemy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table
from sqlmodel import col, select

from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow
from costguard.store.upsert import insert_many

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
_ALERTS = AlertRow.__table__  # type: ignore[attr-defined]
_JOURNAL = ActionJournalRow.__table__  # type: ignore[attr-defined]


def _alert(key: str, when: datetime, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "dedupe_key": key, "kind": "idle-warning", "severity": "warning", "created_at": when,
        "policy": "idle-gpu", "provider": "aws", "instance_id": f"i-{key}", "team": "nlp",
        "owner": "ana", "recipients": ["ana@example.com"], "subject": f"s {key}",
        "body": f"b {key}", "context": {"usd": 1.5, "gpus": [0, 1]}, "status": "pending",
        "attempts": 0, "next_attempt_at": when, "sent_at": None, "last_error": None}
    row.update(kw)
    return row


def test_rows_are_stored_as_the_orm_stores_them_in_order(db_url: str) -> None:
    db = Database(db_url)
    later = T0 + timedelta(minutes=5)
    paris = T0.astimezone(timezone(timedelta(hours=1)))  # the same instant, another zone
    shared = ["team@example.com", "late@example.com"]
    rows = [_alert("a", T0), _alert("b", T0), _alert("c", later, recipients=shared),
            _alert("d", paris, context={}), _alert("e", later, recipients=shared)]
    with db.session() as s:
        s.add(AlertRow(**_alert("pending", T0)))  # pending in the session: stored first
        insert_many(s, _ALERTS, rows)
    with db.session() as s:
        got = list(s.exec(select(AlertRow).order_by(col(AlertRow.id))))
    assert [r.dedupe_key for r in got] == ["pending", "a", "b", "c", "d", "e"]
    by_key = {r.dedupe_key: r for r in got}
    assert by_key["a"].created_at == T0 and by_key["a"].created_at.tzinfo is not None
    assert by_key["c"].created_at == later and by_key["c"].next_attempt_at == later
    assert by_key["d"].created_at == T0  # stored as UTC
    assert by_key["a"].context == {"usd": 1.5, "gpus": [0, 1]} and by_key["d"].context == {}
    assert by_key["c"].recipients == by_key["e"].recipients == [
        "team@example.com", "late@example.com"]
    assert by_key["b"].sent_at is None and by_key["b"].attempts == 0
    db.dispose()


def test_rows_naming_other_columns_and_scalar_defaults(db_url: str) -> None:
    db = Database(db_url)
    full = {"key": "k1", "cycle_id": 7, "policy": "idle-gpu", "provider": "aws",
            "instance_id": "i-1", "action": "stop", "dry_run": True, "status": "dry-run",
            "detail": "would stop", "usd_per_hour": 3.5, "intent_at": T0, "result_at": T0}
    short = {k: v for k, v in full.items()
             if k not in ("dry_run", "detail", "usd_per_hour", "result_at")}
    with db.session() as s:
        insert_many(s, _JOURNAL, [full, {**short, "key": "k2"}, {**full, "key": "k3"}])
    with db.session() as s:
        got = list(s.exec(select(ActionJournalRow).order_by(col(ActionJournalRow.id))))
    assert [r.key for r in got] == ["k1", "k2", "k3"]
    k2 = got[1]
    assert (k2.dry_run, k2.detail, k2.usd_per_hour, k2.result_at) == (False, "", 0.0, None)
    assert got[2].usd_per_hour == 3.5 and got[2].result_at == T0
    db.dispose()


def test_a_default_it_cannot_compute_is_refused(tmp_path: Any) -> None:
    table = Table("t", MetaData(), Column("id", Integer, primary_key=True),
                  Column("n", Integer, default=lambda: 1))
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    with db.session() as s, pytest.raises(TypeError, match=r"t\.n: a default"):
        insert_many(s, table, [{"id": 1}])
    db.dispose()
