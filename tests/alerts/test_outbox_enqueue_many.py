"""`enqueue_many` is `enqueue` for a batch: the same rows, in order, with the same dedupe
(against stored keys, keys enqueued earlier in the transaction, and repeats in the batch)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlmodel import col, select

from costguard.alerts.outbox import enqueue, enqueue_many
from costguard.store.db import Database
from costguard.store.tables import AlertRow

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _alert(key: str, **extra: Any) -> dict[str, Any]:
    return {"dedupe_key": key, "kind": "finding", "subject": f"s {key}", "body": "b",
            "now": NOW, **extra}


def _stored(db: Database) -> list[tuple[Any, ...]]:
    with db.session() as s:
        return [(r.dedupe_key, r.kind, r.severity, r.created_at, r.policy, r.provider,
                 r.instance_id, r.team, r.owner, r.recipients, r.subject, r.body, r.context,
                 r.status, r.attempts, r.next_attempt_at, r.sent_at, r.last_error)
                for r in s.exec(select(AlertRow).order_by(col(AlertRow.id)))]


def test_same_rows_as_enqueue(db_url: str) -> None:
    full = _alert("k", severity="warning", recipients=("team:ml", "email:a@b.c"),
                  context={"usd_per_hour": 1.5, "deadline": None}, policy="p",
                  provider="aws", instance_id="i-1", team="ml", owner="a@b.c")
    plain = _alert("p")
    one = Database(db_url)
    try:
        with one.session() as s:
            assert enqueue_many(s, [full, plain]) == [True, True]
        batched = _stored(one)
        with one.session() as s:
            s.execute(AlertRow.__table__.delete())  # type: ignore[attr-defined]
        with one.session() as s:
            assert enqueue(s, **full) is True
            assert enqueue(s, **plain) is True
        assert _stored(one) == batched
    finally:
        one.dispose()


def test_dedupe_against_stored_earlier_and_repeated_keys(db_url: str) -> None:
    db = Database(db_url)
    try:
        with db.session() as s:
            assert enqueue(s, **_alert("stored")) is True
        with db.session() as s:
            assert enqueue(s, **_alert("earlier")) is True  # same transaction, not flushed
            assert enqueue_many(s, [_alert("a"), _alert("stored"), _alert("earlier"),
                                    _alert("b"), _alert("a")]) == [
                True, False, False, True, False]
            assert enqueue(s, **_alert("b")) is False  # the batch's keys count for enqueue
            assert enqueue_many(s, []) == []
        with db.session() as s:
            assert [r.dedupe_key for r in s.exec(select(AlertRow).order_by(
                col(AlertRow.id)))] == ["stored", "earlier", "a", "b"]
        with db.session() as s:
            assert enqueue_many(s, [_alert("c")]) == [True]
            s.rollback()
            assert enqueue_many(s, [_alert("c")]) == [True]  # rolled back: again
        with db.session() as s:
            assert len(list(s.exec(select(AlertRow)))) == 5
    finally:
        db.dispose()


def test_more_keys_than_one_query_holds(db_url: str) -> None:
    db = Database(db_url)
    try:
        keys = [f"k{i}" for i in range(1203)]
        with db.session() as s:
            assert enqueue_many(s, [_alert(k) for k in keys[::2]]) == [True] * 602
        with db.session() as s:
            flags = enqueue_many(s, [_alert(k) for k in keys])
        assert flags == [i % 2 == 1 for i in range(1203)]
        with db.session() as s:
            assert len(list(s.exec(select(AlertRow.id)))) == 1203
    finally:
        db.dispose()


def test_one_by_one_and_batched_give_the_same_flags_and_rows(db_url: str) -> None:
    """The dedupe rule is one (`outbox._claim`): the same alerts, one `enqueue` each or one
    `enqueue_many`, are refused and added alike, stored key and repeats in the call included."""
    batch = [_alert("a"), _alert("stored"), _alert("b", severity="warning"),
             _alert("a", subject="again"), _alert("c"), _alert("b")]
    got = []
    for batched in (False, True):
        db = Database(db_url)
        try:
            with db.session() as s:
                assert enqueue(s, **_alert("stored")) is True
            with db.session() as s:
                flags = (enqueue_many(s, batch) if batched
                         else [enqueue(s, **a) for a in batch])
            got.append((flags, _stored(db)))
            with db.session() as s:
                s.execute(AlertRow.__table__.delete())  # type: ignore[attr-defined]
        finally:
            db.dispose()
    assert got[0] == got[1]
    assert got[0][0] == [True, False, True, False, True, False]
    assert [r[0] for r in got[0][1]] == ["stored", "a", "b", "c"]


def test_enqueue_defers_its_row_and_enqueue_many_inserts_at_once(db_url: str) -> None:
    """`enqueue` adds an ORM row flushed with the transaction (no id yet, nothing flushed);
    `enqueue_many` autoflushes the session's pending rows first, then inserts its own."""
    db = Database(db_url)
    try:
        with db.session() as s:
            assert enqueue(s, **_alert("one")) is True
            pending = [o for o in s.new if isinstance(o, AlertRow)]
            assert [(r.dedupe_key, r.id) for r in pending] == [("one", None)]
            with s.no_autoflush:
                assert list(s.exec(select(AlertRow.dedupe_key))) == []
            assert enqueue_many(s, [_alert("two"), _alert("three")]) == [True, True]
            assert not s.new  # flushed by the INSERT
            assert pending[0].id is not None
            with s.no_autoflush:
                assert list(s.exec(select(AlertRow.dedupe_key).order_by(
                    col(AlertRow.id)))) == ["one", "two", "three"]
            assert enqueue(s, **_alert("four")) is True
            # a caller reading the id right after `enqueue` (autoflush) finds the row
            assert s.exec(select(AlertRow.id).where(AlertRow.dedupe_key == "four")).one()
    finally:
        db.dispose()
