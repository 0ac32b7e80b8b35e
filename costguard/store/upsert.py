"""Portable INSERT ... ON CONFLICT for SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

_CHUNK = 500


def upsert(
    session: Session,
    table: Table,
    rows: Sequence[dict[str, Any]],
    key: Sequence[str],
    *,
    update: bool = True,
) -> None:
    """Insert `rows`; on a key conflict overwrite the other columns (or keep the old row)."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i : i + _CHUNK]
        stmt = insert(table).values(list(chunk))
        if update:
            cols = {c: stmt.excluded[c] for c in chunk[0] if c not in key}
            stmt = stmt.on_conflict_do_update(index_elements=list(key), set_=cols)
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
        session.execute(stmt)
