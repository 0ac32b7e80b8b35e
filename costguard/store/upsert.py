"""Portable INSERT ... ON CONFLICT for SQLite and PostgreSQL, and statements compiled for the
driver's own executemany."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Table, insert
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


def insert_many(session: Session, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT `rows` into `table`, in order, in the session's transaction (after what it has
    pending, as `session.execute` would flush it first).

    On SQLite as the driver's own executemany of plain tuples (`driver_sql`): SQLAlchemy's
    processing of every parameter of every row cost more than the insert (the act stage's
    journal, findings and alerts at fleet scale). Each value still goes through its column
    type's bind processor, once per distinct value in a run of rows (a block's rows share
    their timestamps). Elsewhere through SQLAlchemy, whose insertmanyvalues batches an
    executemany for PostgreSQL already. Consecutive rows that name the same columns go in
    one statement; a column a row leaves out takes its scalar default."""
    if not rows:
        return
    if session.autoflush:
        session.flush()
    conn = session.connection()
    for run in _runs(rows):
        if conn.dialect.name == "sqlite":
            _insert_run(conn, table, run)
        else:
            session.execute(insert(table), [dict(r) for r in run])


def _runs(rows: Sequence[Mapping[str, Any]]) -> Iterator[Sequence[Mapping[str, Any]]]:
    """Consecutive rows that name the same columns, in order."""
    start = 0
    for end in range(1, len(rows) + 1):
        if end == len(rows) or rows[end].keys() != rows[start].keys():
            yield rows[start:end]
            start = end


def _insert_run(conn: Any, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows that name the same columns, as one executemany through the driver."""
    given = tuple(rows[0])
    sql, columns, procs, defaults = _insert_sql(table, given, conn.dialect)
    at = {name: i for i, name in enumerate(columns)}
    bound = [(at[name], _last_value(process)) for name, process in procs.items()
             if name in at]
    params: list[Any] = []
    for row in rows:
        values = [row[name] if name in row else defaults[name] for name in columns]
        for i, process in bound:
            values[i] = process(values[i])
        params.append(tuple(values))
    conn.exec_driver_sql(sql, params)


_IMMUTABLE = frozenset({datetime, str, int, float, bool, type(None)})


def _last_value(process: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`process`, remembering its last value when that is a scalar: a run of rows binds its
    shared timestamp (the same object, or an equal one) once. A list or a dict (a JSON
    column's) is bound every time: comparing it with the last one costs what binding does."""
    last: list[Any] = [object(), None]

    def bind(value: Any) -> Any:
        if type(value) not in _IMMUTABLE:
            return process(value)
        if value is not last[0] and value != last[0]:
            last[0], last[1] = value, process(value)
        return last[1]

    return bind


@lru_cache(maxsize=64)
def _insert_sql(table: Table, given: tuple[str, ...], dialect: Dialect
                ) -> tuple[str, list[str], BindProcessors, dict[str, Any]]:
    """The driver SQL inserting `given` and the columns with a scalar default the rows leave
    out; its columns in parameter order (the table's), their bind processors, and those
    defaults."""
    defaults: dict[str, Any] = {}
    for c in table.columns:
        if c.name in given or c.default is None:
            continue
        if not c.default.is_scalar:
            raise TypeError(f"{table.name}.{c.name}: a default insert_many cannot compute; "
                            "give the column a value in every row")
        defaults[c.name] = c.default.arg  # type: ignore[attr-defined]
    columns = [c.name for c in table.columns if c.name in given or c.name in defaults]
    if len(columns) != len(given) + len(defaults):
        unknown = sorted(set(given) - set(columns))
        raise KeyError(f"{table.name} has no column {', '.join(unknown)}")
    sql, positional, procs = driver_sql(insert(table), table, columns, dialect)
    if not positional:
        raise RuntimeError(f"{dialect.name}: insert_many's driver path takes positional "
                           "parameters (SQLite's)")
    return sql, columns, procs, defaults
