"""Portable INSERT ... ON CONFLICT for SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session


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
    # one statement executed with many parameter sets: compiled once and cached, where a
    # multi-VALUES insert would be recompiled for every batch
    stmt = insert(table)
    if update:
        cols = {c: stmt.excluded[c] for c in rows[0] if c not in key}
        stmt = stmt.on_conflict_do_update(index_elements=list(key), set_=cols)
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
    session.execute(stmt, list(rows))
