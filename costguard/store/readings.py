"""GPU-minute readings: idempotent writes, windowed reads for the classifier."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from operator import attrgetter
from typing import Any

from sqlalchemy import Table, and_, delete, or_, select
from sqlalchemy.engine import Dialect
from sqlmodel import Session

from costguard.model import MAX_SPAN_MINUTES, GpuMinute, covering
from costguard.store.tables import GpuReadingRow
from costguard.store.upsert import dialect_insert, driver_sql

_TABLE: Table = GpuReadingRow.__table__  # type: ignore[attr-defined]
_KEY = ("provider", "instance_id", "gpu_index", "minute")

InstanceRef = tuple[str, str]  # (provider, instance_id)


def write_minutes(session: Session, minutes: Sequence[GpuMinute]) -> int:
    """Store readings; the same (provider, instance, gpu, minute) sent twice is kept once.
    Returns the GPU-minutes they cover.

    A cycle writes tens of thousands of readings at fleet scale, so they go to the driver's
    own executemany as plain tuples: SQLAlchemy's per-parameter processing cost more than
    the insert itself. The statement is still SQLAlchemy's (compiled once per dialect), and
    the one typed column (`minute`) goes through its column type's own bind processor."""
    if not minutes:
        return 0
    conn = session.connection()
    sql, names, to_db = _upsert_sql(conn.dialect)
    rows: dict[tuple[Any, ...], list[Any]] = {}
    for m in minutes:
        row = list(_ATTRS(m))
        row[_SOURCE_AT] = str(row[_SOURCE_AT])
        # a batch may repeat a key (agent replay): last one wins, as the upsert would
        rows[tuple(row[:_KEY_LEN])] = row
    for row in rows.values():
        row[_MINUTE_AT] = to_db(row[_MINUTE_AT])
    if names is None:  # positional paramstyle, in `_FIELDS` order
        conn.exec_driver_sql(sql, [tuple(r) for r in rows.values()])
    else:
        conn.exec_driver_sql(sql, [dict(zip(names, r, strict=True)) for r in rows.values()])
    return sum(r[_SPAN_AT] for r in rows.values())


# key columns first, so a row's key is a slice of its values
_FIELDS = list(_KEY) + [c.name for c in _TABLE.columns if c.name not in _KEY]
_KEY_LEN = len(_KEY)
_ATTRS = attrgetter(*_FIELDS)
_SOURCE_AT = _FIELDS.index("source")
_MINUTE_AT = _FIELDS.index("minute")
_SPAN_AT = _FIELDS.index("span_minutes")


@lru_cache(maxsize=4)
def _upsert_sql(dialect: Dialect) -> tuple[str, list[str] | None, Callable[[Any], Any]]:
    """The upsert as driver SQL, the parameter names it wants (None: positional, in
    `_FIELDS` order), and the `minute` column's bind processor."""
    stmt = dialect_insert(_TABLE, dialect.name)
    stmt = stmt.on_conflict_do_update(
        index_elements=list(_KEY), set_={c: stmt.excluded[c] for c in _FIELDS[_KEY_LEN:]})
    sql, positional, procs = driver_sql(stmt, _TABLE, _FIELDS, dialect)
    # `minute` is the one column to bind: the others with a processor (SQLite's float
    # conversion) hold what a GpuMinute already validated as float (checked in the tests)
    return sql, (None if positional else _FIELDS), procs.get("minute", _same)


def _same(value: Any) -> Any:
    return value


_ONE_MINUTE = timedelta(minutes=1)
_LONGEST = MAX_SPAN_MINUTES * _ONE_MINUTE
_IN_CHUNK = 500  # instance ids per IN list: well under every SQLite's variable limit


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
    by_provider: dict[str, list[str]] = defaultdict(list)
    for provider, instance_id in set(refs):
        by_provider[provider].append(instance_id)
    cols = [_TABLE.c[f] for f in _FIELDS]
    for provider, ids in by_provider.items():
        ids.sort()
        for first in range(0, len(ids), _IN_CHUNK):
            stmt = select(*cols).where(
                _TABLE.c.provider == provider,
                _TABLE.c.instance_id.in_(ids[first : first + _IN_CHUNK]),
                # a reading of several minutes that began before `start` still covers it
                or_(_TABLE.c.minute >= start,
                    and_(_TABLE.c.span_minutes > 1, _TABLE.c.minute > start - _LONGEST)),
                _TABLE.c.minute < end,
            )
            if skip is not None:
                source, since = skip
                stmt = stmt.where(or_(_TABLE.c.source != source, _TABLE.c.minute < since))
            for row in session.execute(stmt):
                values = dict(zip(_FIELDS, row, strict=True))
                minute = values["minute"]
                if minute < start and minute + values["span_minutes"] * _ONE_MINUTE <= start:
                    continue
                # model_validate of a plain dict: 3x faster than model_construct, and far
                # faster than of the row's mapping
                out[(provider, values["instance_id"])].append(GpuMinute.model_validate(values))
    return out


def instances_with_source(
    session: Session, source: str, since: datetime
) -> set[InstanceRef]:
    """Instances that `source` (e.g. the agent) reported for since `since`."""
    stmt = (
        select(_TABLE.c.provider, _TABLE.c.instance_id)
        .where(_TABLE.c.source == source, _TABLE.c.minute >= since)
        .distinct()
    )
    return {(r.provider, r.instance_id) for r in session.execute(stmt)}


def prune_minutes(session: Session, before: datetime) -> int:
    result = session.execute(delete(_TABLE).where(_TABLE.c.minute < before))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


class ReadingWindow:
    """A rolling in-memory view of recent readings, refreshed incrementally from the store.

    Each cycle needs the last hour or so of GPU-minutes twice (accrual and idle evaluation);
    re-reading the whole window every cycle dominated a cycle's cost. The store stays the
    source of truth: each refresh re-reads the newest `late` span, so agent minutes that
    arrive a little late are still seen.
    """

    def __init__(self, late: timedelta = timedelta(minutes=5)) -> None:
        self.late = late
        self._until: datetime | None = None
        self._start: datetime | None = None
        self._by_ref: dict[InstanceRef, dict[tuple[int, datetime], GpuMinute]] = {}
        # instances `add` filled since the last refresh: the (source, since) they were fed
        self._fed: dict[InstanceRef, tuple[str, datetime]] = {}

    def add(self, minutes: Iterable[GpuMinute], *, since: datetime) -> None:
        """Write-through: readings this process just stored, fetched from their source for
        [since, now), need no read back."""
        for m in minutes:
            ref = (m.provider, m.instance_id)
            self._fed[ref] = (str(m.source), since)
            self._by_ref.setdefault(ref, {})[(m.gpu_index, m.minute)] = m

    def refresh(self, session: Session, refs: Iterable[InstanceRef], start: datetime,
                end: datetime) -> None:
        """Bring the window to [start, end), reading from the store only what `add` did not
        bring: on first use, a fed instance's other sources and older minutes; after that,
        the newest `late` span of the instances that were not fed."""
        wanted = set(refs)
        fed, self._fed = self._fed, {}
        fresh: dict[InstanceRef, list[GpuMinute]] = {}
        if self._until is None or self._start is None or start < self._start:
            # first use, or a longer window than cached: read it all but what was just fed
            self._by_ref = {ref: v for ref, v in self._by_ref.items() if ref in fed}
            fresh = read_minutes(session, wanted - set(fed), start, end)
            by_span: dict[tuple[str, datetime], list[InstanceRef]] = defaultdict(list)
            for ref, span in fed.items():
                if ref in wanted:
                    by_span[span].append(ref)
            for span, members in by_span.items():
                fresh.update(read_minutes(session, members, start, end, skip=span))
        else:
            fresh = read_minutes(session, wanted - set(fed), max(start, self._until - self.late),
                                 end)
        for ref in list(self._by_ref):
            if ref not in wanted:
                del self._by_ref[ref]
        for ref, minutes in fresh.items():
            slots = self._by_ref.setdefault(ref, {})
            for m in minutes:
                slots[(m.gpu_index, m.minute)] = m
        for slots in self._by_ref.values():
            for key in [k for k, m in slots.items()
                        if k[1] < start and k[1] + m.span_minutes * _ONE_MINUTE <= start]:
                del slots[key]
        self._start, self._until = start, end

    def minutes(self, ref: InstanceRef, start: datetime, end: datetime) -> list[GpuMinute]:
        slots = self._by_ref.get(ref)
        if not slots:
            return []
        return covering(slots.values(), start, end)

    def as_dict(self, start: datetime, end: datetime) -> dict[InstanceRef, list[GpuMinute]]:
        return {ref: self.minutes(ref, start, end) for ref in self._by_ref}
