"""Storing imported bill lines: a line's key is recorded (line_keys; a line whose key is
known already adds nothing), and the new lines are summed per UTC day into
`billing_costs`, one row per day and per everything a report splits by.

A bill has a line per resource, hour and SKU, tens of millions a month: stored one row a
line, SQLite itself wrote no more than ~80,000 a second. The keys are 8-byte integers in
blobs per day, and a day's lines of one resource are one row of sums.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Table, bindparam, case, select
from sqlalchemy.engine import Dialect
from sqlmodel import Session

from costguard.billing.line_keys import LineKeys, Replacing
from costguard.store.bill_tables import BillingCostRow, BillingLegacyKeyRow
from costguard.store.upsert import BindProcessors, dialect_insert, driver_sql

_COSTS: Table = BillingCostRow.__table__  # type: ignore[attr-defined]
_LEGACY: Table = BillingLegacyKeyRow.__table__  # type: ignore[attr-defined]
# what a billing_costs row is per day, beside its source: a line adds to the row of its day
# and these values
GROUP_COLUMNS = ("provider", "account", "region", "service", "resource_id", "team", "project",
                 "env", "cost_center", "charge_category", "charge_class", "currency")
_SUMS = ("billed_micros", "effective_micros", "lines")
_COST_COLUMNS = tuple(c.name for c in _COSTS.columns if c.name != "id")
_ROW_ORDER = ("source", "day", "group_key", "imported_at", "charge_start", "charge_end",
              *GROUP_COLUMNS[:5], *_SUMS, *GROUP_COLUMNS[5:])  # as add_day_sums writes rows
if _COST_COLUMNS != _ROW_ORDER:
    raise RuntimeError(f"billing_costs' columns are {_COST_COLUMNS}, not {_ROW_ORDER}")
_BATCH = 50_000
_EPOCH_DAY = date(1970, 1, 1)
_IN_CHUNK = 5_000  # keys per `IN (...)`: under SQLite's and PostgreSQL's parameter limits


@dataclass
class ImportResult:
    read: int = 0
    added: int = 0
    duplicates: int = 0
    billed_micros: int = 0
    version: str = ""  # the FOCUS version; "" for a native export
    format: str = ""  # what the file is: "FOCUS 1.2", "AWS CUR 2.0", ...
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, why), first 20
    skipped_count: int = 0
    by_category: Counter[str] = field(default_factory=Counter)  # billed micros
    by_provider: Counter[str] = field(default_factory=Counter)
    currencies: set[str] = field(default_factory=set)
    # "columns" (focus_columns) or "lines"; why a file the column reader takes was read
    # line by line
    read_by: str = "lines"
    read_by_lines_because: str = ""
    # the charge period the lines imported cover (None: none imported)
    first_charge: datetime | None = None
    last_charge: datetime | None = None

    def cover(self, start: datetime, end: datetime) -> None:
        """Widen the period imported lines cover to [start, end)."""
        if self.first_charge is None or start < self.first_charge:
            self.first_charge = start
        if self.last_charge is None or end > self.last_charge:
            self.last_charge = end

    def skip(self, where: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < 20:
            self.skipped.append((where, why))

    @classmethod
    def total(cls, results: Sequence[ImportResult]) -> ImportResult:
        """The files of one import together (one file: its own result's figures)."""
        out = cls(read_by="columns" if all(r.read_by == "columns" for r in results)
                  else "lines")
        for r in results:
            out.read, out.added = out.read + r.read, out.added + r.added
            out.duplicates += r.duplicates
            out.billed_micros += r.billed_micros
            out.skipped += r.skipped[:20 - len(out.skipped)]
            out.skipped_count += r.skipped_count
            out.by_category.update(r.by_category)
            out.by_provider.update(r.by_provider)
            out.currencies |= r.currencies
            if r.first_charge is not None and r.last_charge is not None:
                out.cover(r.first_charge, r.last_charge)
        out.format = ", ".join(dict.fromkeys(r.format for r in results))
        out.version = ", ".join(dict.fromkeys(r.version for r in results if r.version))
        out.read_by_lines_because = "; ".join(r.read_by_lines_because for r in results
                                              if r.read_by_lines_because)
        return out


def hash64(text: str | bytes) -> int:
    """A signed 64-bit hash (BLAKE2b), as BIGINT columns hold it."""
    data = text.encode() if isinstance(text, str) else text
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def group_key(day: date, values: Sequence[str | None]) -> int:
    """The billing_costs row of `day` and GROUP_COLUMNS' `values` (None is not "");
    focus_columns._group_keys works out the same for a table of them."""
    return hash64("\x1f".join([day.isoformat(), *("\x00" if v is None else v
                                                   for v in values)]))


def has_legacy_keys(session: Session, source: str) -> bool:
    """Whether lines of `source` were imported before billing_costs (their old keys kept)."""
    return session.execute(select(_LEGACY.c.line_key).where(
        _LEGACY.c.source == source).limit(1)).first() is not None


def store_lines(session: Session, lines: Iterable[dict[str, Any]], now: datetime,
                result: ImportResult | None = None,
                replacing: Replacing | None = None) -> ImportResult:
    """Store `lines` (each with `source`, `line_key`, the charge period, GROUP_COLUMNS, the
    amounts, and `legacy_key` where the source has old keys) in batches, in constant memory;
    a line whose key is stored already is counted as a duplicate and adds nothing
    (`replacing`: the days the lines fall on are emptied of earlier imports first)."""
    result = result if result is not None else ImportResult()
    keys: dict[str, LineKeys] = {}
    batch: list[dict[str, Any]] = []
    for line in lines:
        result.read += 1
        batch.append(line)
        if len(batch) >= _BATCH:
            _store_batch(session, batch, now, result, keys, replacing)
            batch = []
    _store_batch(session, batch, now, result, keys, replacing)
    for held in keys.values():
        held.finish()
    return result


def _store_batch(session: Session, batch: list[dict[str, Any]], now: datetime,
                 result: ImportResult, keys: dict[str, LineKeys],
                 replacing: Replacing | None) -> None:
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in batch:
        by_source[line["source"]].append(line)
    for source, lines in by_source.items():
        held = keys.get(source) or keys.setdefault(source,
                                                   LineKeys(session, source, replacing))
        # (a line known by its old key is recorded by its new one too)
        known = held.add([day_number(line["charge_start"]) for line in lines],
                         [line["line_key"] for line in lines])
        legacy = _stored(session, _LEGACY, source, [line["legacy_key"] for line in lines
                                                    if "legacy_key" in line])
        new: list[dict[str, Any]] = []
        for line, already in zip(lines, known, strict=True):
            if already or (legacy and line.get("legacy_key") in legacy):
                result.duplicates += 1
                continue
            new.append(line)
            billed = line["billed_micros"]
            result.billed_micros += billed
            result.by_category[line["charge_category"] or "(none)"] += billed
            result.by_provider[line["provider"] or "(none)"] += billed
            result.currencies.add(line["currency"])
            result.cover(line["charge_start"], line["charge_end"])
        _add_sums(session, source, new, now)
        result.added += len(new)


def _stored(session: Session, table: Table, source: str, keys: list[Any]) -> set[Any]:
    """Which of `keys` `table` holds for `source`."""
    found: set[Any] = set()
    if not keys:
        return found
    stmt = select(table.c.line_key).where(
        table.c.source == source, table.c.line_key.in_(bindparam("keys", expanding=True)))
    for i in range(0, len(keys), _IN_CHUNK):
        found.update(session.execute(stmt, {"keys": keys[i:i + _IN_CHUNK]}).scalars())
    return found


def _add_sums(session: Session, source: str, lines: list[dict[str, Any]],
              now: datetime) -> None:
    """Add `lines` to their days' rows (a row is made for a new day and group)."""
    sums: dict[tuple[Any, ...], list[Any]] = {}
    for line in lines:
        start, end = line["charge_start"], line["charge_end"]
        group = (start.date(), *(line[c] for c in GROUP_COLUMNS))
        acc = sums.get(group)
        if acc is None:
            sums[group] = [start, end, line["billed_micros"], line["effective_micros"], 1]
            continue
        if start < acc[0]:
            acc[0] = start
        if end > acc[1]:
            acc[1] = end
        acc[2] += line["billed_micros"]
        acc[3] += line["effective_micros"]
        acc[4] += 1
    add_day_sums(session, source, [(*group, *acc) for group, acc in sums.items()], now)


def day_number(when: datetime | date) -> int:
    """Days since 1970-01-01 of `when` (a UTC time, or a date)."""
    day = when.date() if isinstance(when, datetime) else when
    return (day - _EPOCH_DAY).days


def add_day_sums(session: Session, source: str, sums: Iterable[Sequence[Any]],
                 now: datetime, keys: Sequence[int] | None = None) -> None:
    """Add each of `sums` (day, GROUP_COLUMNS' values, earliest start, latest end, billed,
    effective, lines) to its day's row of `source` (made where there is none); `keys`:
    each one's `group_key`, where the caller worked them out already."""
    width = len(GROUP_COLUMNS)
    rows = []
    for i, entry in enumerate(sums):
        day, values = entry[0], entry[1:1 + width]
        start, end, billed, effective, count = entry[1 + width:]
        key = group_key(day, values) if keys is None else keys[i]
        # in _COST_COLUMNS' order (checked below)
        rows.append((source, day_number(day), key, now, start, end,
                     *values[:5], billed, effective, count, *values[5:]))
    _execute_many(session, _upsert_sql, _COST_COLUMNS, rows)


@lru_cache(maxsize=4)
def _upsert_sql(dialect: Dialect) -> tuple[str, bool, BindProcessors]:
    """Insert a day's row, or add to the one there (the earliest start, the latest end)."""
    stmt = dialect_insert(_COSTS, dialect.name)
    new, old = stmt.excluded, _COSTS.c
    stmt = stmt.on_conflict_do_update(index_elements=["source", "day", "group_key"], set_={
        "imported_at": new.imported_at,
        "charge_start": case((new.charge_start < old.charge_start, new.charge_start),
                             else_=old.charge_start),
        "charge_end": case((new.charge_end > old.charge_end, new.charge_end),
                           else_=old.charge_end),
        **{c: old[c] + new[c] for c in _SUMS}})
    return driver_sql(stmt, _COSTS, _COST_COLUMNS, dialect)


def _execute_many(session: Session,
                  sql_for: Callable[[Dialect], tuple[str, bool, BindProcessors]],
                  columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
    """One executemany through the driver (`store.upsert.driver_sql`): SQLAlchemy's per-row
    parameter processing cost more than the insert. A column's bind processor runs once per
    distinct value (a bill repeats its hours)."""
    if not rows:
        return
    conn = session.connection()
    sql, positional, procs = sql_for(conn.dialect)
    converting: list[tuple[int, Callable[[Any], Any], dict[Any, Any]]] = [
        (i, procs[n], {}) for i, n in enumerate(columns) if n in procs]
    params: list[Any] = []
    for row in rows:
        values = list(row)
        for i, process, done in converting:
            raw = values[i]
            if raw is not None:
                if raw not in done:
                    done[raw] = process(raw)
                values[i] = done[raw]
        params.append(tuple(values) if positional else dict(zip(columns, values,
                                                                strict=True)))
    conn.exec_driver_sql(sql, params)


