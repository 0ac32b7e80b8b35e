"""Operator switches and watermarks kept in the store (they survive restarts)."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from costguard.clock import utc
from costguard.store.tables import ControlRow

PAUSED = "paused"
DEMO_MARK = "demo"  # this database was written by `costguard demo` (costguard/demo/run.py)


def get(session: Session, key: str) -> str | None:
    row = session.get(ControlRow, key)
    return row.value if row else None


def put(session: Session, key: str, value: str, now: datetime) -> None:
    row = session.get(ControlRow, key) or ControlRow(key=key, value=value, updated_at=now)
    row.value, row.updated_at = value, now
    session.add(row)


def get_time(session: Session, key: str) -> datetime | None:
    raw = get(session, key)
    return utc(datetime.fromisoformat(raw)) if raw else None


def is_paused(session: Session) -> bool:
    return get(session, PAUSED) == "true"
