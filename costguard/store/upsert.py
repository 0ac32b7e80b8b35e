"""Portable INSERT ... ON CONFLICT for SQLite and PostgreSQL, and statements compiled for the
driver's own executemany."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement
from sqlmodel import Session

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import Insert as PostgresInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

BindProcessors = dict[str, Callable[[Any], Any]]


def dialect_insert(table: Table, dialect: str) -> PostgresInsert | SqliteInsert:
    """`INSERT INTO table` in `dialect`'s own flavour (the one with ON CONFLICT). PostgreSQL's
    dialect package is imported only here, for PostgreSQL: importing it costs every SQLite
    process about 30 ms of start-up."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgres_insert

        return postgres_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def driver_sql(stmt: ClauseElement, table: Table, columns: Sequence[str], dialect: Dialect
               ) -> tuple[str, bool, BindProcessors]:
    """`stmt` (an insert of `columns` into `table`) as the driver's SQL, whether it takes
    positional parameters (then in `columns` order, checked), and the bind processor of each
    of `table`'s columns that has one on `dialect` (its own implementation: SQLite's
    DATETIME writes its own text form).

    For bulk writes at fleet scale: SQLAlchemy's per-parameter processing of every row
    costs more than the insert itself, so callers bind what needs binding and pass plain
    tuples (or dicts, for a named paramstyle) to `exec_driver_sql`."""
    compiled = cast(SQLCompiler, stmt.compile(dialect=dialect, column_keys=list(columns)))
    if compiled.positional and list(compiled.positiontup or []) != list(columns):
        raise RuntimeError(f"{table.name}: statement binds {compiled.positiontup}, "
                           f"not {list(columns)}")
    procs: BindProcessors = {}
    for c in table.columns:
        process = c.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            procs[c.name] = process
    return str(compiled), bool(compiled.positional), procs


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
    # one statement executed with many parameter sets: compiled once and cached, where a
    # multi-VALUES insert would be recompiled for every batch
    stmt = dialect_insert(table, dialect)
    if update:
        cols = {c: stmt.excluded[c] for c in rows[0] if c not in key}
        stmt = stmt.on_conflict_do_update(index_elements=list(key), set_=cols)
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
    session.execute(stmt, list(rows))
