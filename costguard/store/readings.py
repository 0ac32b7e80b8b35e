"""GPU-minute readings: idempotent writes, windowed reads for the classifier."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from itertools import compress
from operator import attrgetter, is_not
from typing import Any, TypeVar, cast

from sqlalchemy import Table, and_, delete, null, or_, select, type_coerce
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.types import NullType
from sqlmodel import Session

from costguard.minute_rows import LEAD, SOURCE, MinuteRows, names_of
from costguard.model import MAX_SPAN_MINUTES, GpuMinute, TelemetrySource
from costguard.store.packed_view import make_tuple
from costguard.store.refs import InstanceRef, ids_by_provider
from costguard.store.tables import GpuReadingRow
from costguard.store.upsert import dialect_insert, driver_sql

_TABLE: Table = GpuReadingRow.__table__  # type: ignore[attr-defined]
_KEY = ("provider", "instance_id", "gpu_index", "minute")


def write_minutes(session: Session, minutes: Sequence[GpuMinute]) -> int:
    """Store readings; the same (provider, instance, gpu, minute) sent twice is kept once
    (the later copy replaces the earlier one whole). Returns the GPU-minutes they cover.

    A cycle writes tens of thousands of readings at fleet scale, so they go to the driver's
    own executemany as plain tuples: SQLAlchemy's per-parameter processing cost more than
    the insert itself. The statement is still SQLAlchemy's (compiled once per dialect and
    shape), and the one typed column (`minute`) goes through its column type's own bind
    processor. Models (an agent's readings) are written grouped by which of their 28 fields
    are set, binding only those (it halves the database's work per row); a cloud's rows
    (`MinuteRows`) bind the dozen names their call gives, all of them. Either way a column a
    reading does not set is NULL after a conflict, as the later copy replaces it whole."""
    if not minutes:
        return 0
    if isinstance(minutes, MinuteRows):  # a cloud's readings: their rows as they are
        return _write(session.connection(), minutes.names, minutes.rows, shaped=False)
    return _write(session.connection(), _NAMES, map(_ATTRS, minutes), shaped=True)


def _write(conn: Connection, names: tuple[str, ...], rows: Iterable[tuple[Any, ...]], *,
           shaped: bool) -> int:
    """`write_minutes` of readings' `rows`, each the values of `names` (the key's columns
    first, then `source`, the rest in the table's order). `shaped`: the rows are written
    grouped by which of their values are set, each binding only those (a reading with all
    28 fields, most of them unset: an agent's); else every row binds all of `names`, an
    unset value as NULL, which sets the column NULL as leaving it out does (a cloud's rows:
    the dozen names its metrics give, nearly all set)."""
    unique: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:
        # a batch may repeat a key (agent replay): last one wins, as the upsert would
        unique[row[:_KEY_LEN]] = row
    # readings share their minutes and sources: each bound once
    minutes: dict[Any, Any] = {}
    sources: dict[Any, str] = {}
    to_db = _minute_to_db(conn.dialect)

    def bound(row: tuple[Any, ...]) -> tuple[Any, ...]:
        # the key and `source` (never None) come first: their places are the same in any
        # shape
        minute, source = row[_MINUTE_AT], row[_SOURCE_AT]
        value = minutes.get(minute)
        if value is None:
            value = minutes[minute] = to_db(minute)
        text = sources.get(source)
        if text is None:
            text = sources[source] = str(source)
        # concatenated, not unpacked into a new tuple: ~20 % less a row, millions a cold cycle
        return row[:_MINUTE_AT] + (value, text) + row[_SOURCE_AT + 1:]  # noqa: RUF005

    shapes: dict[tuple[bool, ...], list[tuple[Any, ...]]] = defaultdict(list)
    if shaped:
        nones = (None,) * len(names)
        for row in unique.values():
            shape = tuple(map(is_not, row, nones))
            shapes[shape].append(tuple(compress(row, shape)))
    else:
        shapes[(True,) * len(names)] = list(unique.values())
    for shape, rows_of in shapes.items():
        sql, params = _upsert_sql(conn.dialect, tuple(compress(names, shape)))
        # bound and sent `_WRITE_BATCH` at a time: each bound row is a copy of its reading
        for first in range(0, len(rows_of), _WRITE_BATCH):
            values = list(map(bound, rows_of[first:first + _WRITE_BATCH]))
            if params is None:  # positional paramstyle, in the shape's column order
                conn.exec_driver_sql(sql, values)
            else:
                conn.exec_driver_sql(sql, [dict(zip(params, r, strict=True)) for r in values])
    span_at = names.index("span_minutes")
    return sum(r[span_at] for r in unique.values())  # span_minutes is never None


# rows bound and sent to the driver at once: a call's readings bound all together (a copy of
# each, ~1 KB an agent's) were the telemetry stage's peak memory beside the readings
_WRITE_BATCH = 5_000
# key columns first, so a row's key is a slice of its values; the table's columns are a
# reading's fields in `GpuMinute`'s order, as `MinuteRows` names them (checked)
_NAMES = tuple(_KEY) + tuple(c.name for c in _TABLE.columns if c.name not in _KEY)
_KEY_LEN = len(_KEY)
_ATTRS = attrgetter(*_NAMES)
_MINUTE_AT = _NAMES.index("minute")
_SOURCE_AT = _NAMES.index("source")
assert names_of(_NAMES) == _NAMES and _NAMES[:_KEY_LEN] == LEAD[:_KEY_LEN]
assert _SOURCE_AT == _KEY_LEN == SOURCE == _MINUTE_AT + 1  # `_write` places them


@lru_cache(maxsize=64)
def _upsert_sql(dialect: Dialect, columns: tuple[str, ...]) -> tuple[str, list[str] | None]:
    """The upsert of `columns` (the key's first, the rest in the table's order) as driver
    SQL, and the parameter names it wants (None: positional, in the columns' order). On a
    conflict every other column is set NULL, as a whole row's replacement would."""
    stmt = dialect_insert(_TABLE, dialect.name)
    updates: dict[str, Any] = {c: stmt.excluded[c] for c in columns[_KEY_LEN:]}
    updates.update({c: null() for c in _NAMES if c not in columns})
    stmt = stmt.on_conflict_do_update(index_elements=list(_KEY), set_=updates)
    sql, positional, _ = driver_sql(stmt, _TABLE, columns, dialect)
    return sql, None if positional else list(columns)


@lru_cache(maxsize=4)
def _minute_to_db(dialect: Dialect) -> Callable[[Any], Any]:
    """The `minute` column's bind processor on `dialect`: the one column `write_minutes`
    binds itself (the others with a processor, SQLite's float conversion, hold what a
    GpuMinute already validated as float; checked in the tests)."""
    process = _TABLE.c.minute.type.dialect_impl(dialect).bind_processor(dialect)
    return process if process is not None else _same


@lru_cache(maxsize=4)
def _minute_from_db(dialect: Dialect) -> Callable[[Any], datetime]:
    """The `minute` column's result processor on `dialect` (the driver's value to an aware
    UTC datetime), for `read_rows`, which reads the column raw and converts each distinct
    value once."""
    process = _TABLE.c.minute.type.dialect_impl(dialect).result_processor(dialect, None)
    assert process is not None  # UTCDateTime always post-processes
    return cast(Callable[[Any], datetime], process)


def _same(value: Any) -> Any:
    return value


_ONE_MINUTE = timedelta(minutes=1)
_LONGEST = MAX_SPAN_MINUTES * _ONE_MINUTE
_IN_CHUNK = 500  # instance ids per IN list: well under every SQLite's variable limit
_FETCH = 5_000  # rows fetched from the driver at a time (one at a time cost ~2 us a row)


def read_rows(
    session: Session,
    refs: Iterable[InstanceRef],
    start: datetime,
    end: datetime,
    *,
    skip: tuple[str, datetime] | None = None,
    spanning: bool = True,
    fields: Sequence[str] = _NAMES,
    settled: bool = True,
    minutes: dict[Any, datetime] | None = None,
) -> Iterator[tuple[InstanceRef, list[Any]]]:
    """The stored rows (their `fields`' values, in that order: `minute` and `span_minutes`
    among them) that `read_minutes` returns, unvalidated; with `spanning` False, only those
    that begin at or after `start`. Settled hours come from their blocks
    (`costguard.store.block_reads`), the rest from `gpu_readings` (with `settled` False,
    only those). `minutes`: the driver's minutes converted so far, to share between reads
    of the same span."""
    from costguard.store.block_reads import SettledReads

    by_provider = ids_by_provider(refs)
    # `minute` as the driver returns it, converted once per distinct value: a read of hours
    # of a fleet's readings repeats a few hundred minutes millions of times
    cols = [_TABLE.c.instance_id, _TABLE.c.gpu_index,
            *(type_coerce(_TABLE.c[f], NullType()) if f == "minute" else _TABLE.c[f]
              for f in fields)]
    at_minute, at_span = fields.index("minute") + 2, fields.index("span_minutes") + 2
    from_db = _minute_from_db(session.get_bind().dialect)
    minutes = {} if minutes is None else minutes
    lo = start - _LONGEST if spanning else start
    for provider, ids in by_provider.items():
        ids.sort()
        for first in range(0, len(ids), _IN_CHUNK):
            chunk = ids[first : first + _IN_CHUNK]
            blocks = SettledReads(session, provider, chunk, lo, end if settled else lo)
            stmt = select(*cols).where(
                _TABLE.c.provider == provider,
                _TABLE.c.instance_id.in_(chunk),
                # a reading of several minutes that began before `start` still covers it
                or_(_TABLE.c.minute >= start,
                    and_(_TABLE.c.span_minutes > 1, _TABLE.c.minute > lo))
                if spanning else _TABLE.c.minute >= start,
                _TABLE.c.minute < end,
            )
            if skip is not None:
                source, since = skip
                stmt = stmt.where(or_(_TABLE.c.source != source, _TABLE.c.minute < since))
            for rows in session.execute(stmt).partitions(_FETCH):
                for row in rows:
                    raw = row[at_minute]
                    minute = minutes.get(raw)
                    if minute is None:
                        minute = minutes[raw] = from_db(raw)
                    if minute < start and minute + row[at_span] * _ONE_MINUTE <= start:
                        continue
                    blocks.shadow(row[0], row[1], minute)
                    values = list(row[2:])
                    values[at_minute - 2] = minute
                    yield (provider, row[0]), values
            for instance_id, values in blocks.rows(fields, start, end, spanning=spanning,
                                                   skip=skip):
                yield (provider, instance_id), values


def read_minutes(
    session: Session,
    refs: Iterable[InstanceRef],
    start: datetime,
    end: datetime,
    *,
    skip: tuple[str, datetime] | None = None,
) -> dict[InstanceRef, list[GpuMinute]]:
    """Readings that cover any minute of [start, end) for the given instances, grouped per
    instance; `skip` (source, since) leaves out that source's readings from `since` on."""
    out: dict[InstanceRef, list[GpuMinute]] = defaultdict(list)
    for ref, values in read_rows(session, refs, start, end, skip=skip):
        # model_validate of a plain dict: 3x faster than model_construct, and far faster
        # than of the row's mapping
        out[ref].append(GpuMinute.model_validate(dict(zip(_NAMES, values, strict=True))))
    return out


_SOURCES: dict[str, TelemetrySource] = {str(s): s for s in TelemetrySource}
Shaped = TypeVar("Shaped", bound=tuple[Any, ...])


def read_shaped(session: Session, refs: Iterable[InstanceRef], start: datetime,
                end: datetime, shape: type[Shaped], *,
                minutes: dict[Any, datetime] | None = None) -> dict[InstanceRef, list[Shaped]]:
    """The readings that cover any minute of [start, end) for `refs`, per instance, as
    `read_minutes` finds them (raw rows and settled blocks alike), each a `shape`: a
    NamedTuple of the `GpuMinute` fields its reader reads (`source` as its member). The
    store's values as written (validated then): no model built per reading, for the reads
    of a window's every reading (the efficiency verdict's, the stop's checks). `minutes` as
    `read_rows` takes it."""
    fields: tuple[str, ...] = shape._fields  # type: ignore[attr-defined]  # a NamedTuple
    at_source = fields.index("source")
    out: dict[InstanceRef, list[Shaped]] = defaultdict(list)
    for ref, values in read_rows(session, refs, start, end, fields=fields, minutes=minutes):
        values[at_source] = _SOURCES[values[at_source]]
        out[ref].append(make_tuple(shape, values))  # shape._make, unchecked
    return out


def instances_with_source(
    session: Session, source: str, since: datetime, refs: Iterable[InstanceRef] | None = None
) -> set[InstanceRef]:
    """Instances (of `refs`, or all) that `source` (e.g. the agent) reported for since
    `since`: in `gpu_readings` and in the settled hours' blocks."""
    from costguard.store.block_reads import heard

    stmt = (
        select(_TABLE.c.provider, _TABLE.c.instance_id)
        .where(_TABLE.c.source == source, _TABLE.c.minute >= since)
        .distinct()
    )
    if refs is None:
        found = {(r.provider, r.instance_id) for r in session.execute(stmt)}
        return found | heard(session, source, since)
    wanted = set(refs)
    found = set()
    for provider, ids in ids_by_provider(wanted).items():
        for first in range(0, len(ids), _IN_CHUNK):
            found.update((r.provider, r.instance_id) for r in session.execute(stmt.where(
                _TABLE.c.provider == provider,
                _TABLE.c.instance_id.in_(ids[first:first + _IN_CHUNK]))))
    return found | heard(session, source, since, wanted - found)


def prune_minutes(session: Session, before: datetime) -> int:
    result = session.execute(delete(_TABLE).where(_TABLE.c.minute < before))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
