"""Accrual: the cost of every instance's interval since the last poll, with idle dollars.

An interval is charged in the state the instance was in when it began (`accrue_state`): a
change noticed at a poll is charged from that poll on. Stopped instances accrue only their
attached disks, and only where `disk_price_of` knows them. Money is integer micro-dollars.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, Text, cast, insert, select, type_coerce, update
from sqlalchemy.engine import Dialect
from sqlalchemy.types import NullType
from sqlmodel import Session

from costguard.costs.attribution import Attributor
from costguard.model import GpuMinute, Instance, InstanceState, Lifecycle, PriceQuote, Verdict
from costguard.store.inventory import to_instance
from costguard.store.readings import InstanceRef, read_minutes
from costguard.store.tables import CostIntervalRow, InstanceRow
from costguard.telemetry.classify import SignalChoice, classify

PriceLookup = Callable[[Instance], PriceQuote | None]
MinutesLookup = Callable[[InstanceRef, datetime, datetime], list[GpuMinute]]
MICROS = 1_000_000
_INSTANCES: Table = InstanceRow.__table__  # type: ignore[attr-defined]
_INTERVALS: Table = CostIntervalRow.__table__  # type: ignore[attr-defined]
_COLUMNS = ("provider", "instance_id", "account", "region", "name", "instance_type", "state",
            "lifecycle", "gpu_count", "accrue_state", "gone")
_TIMES = ("state_changed_at", "accrued_until")
_SIGNALS = ("auto", "sm_active", "util_gpu")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class AccrualStats:
    intervals: int = 0
    cost_micros: int = 0
    idle_cost_micros: int = 0
    unpriced: set[str] = field(default_factory=set)  # instance types without a price


def accrue(
    session: Session,
    now: datetime,
    price_of: Mapping[str, PriceLookup],
    attributor: Attributor,
    *,
    idle_signal: SignalChoice = "auto",
    idle_below: float = 5.0,
    minutes_of: MinutesLookup | None = None,
    disk_price_of: PriceLookup | None = None,
) -> AccrualStats:
    """Charge every instance from its watermark to `now`; `minutes_of` gives readings
    (default: read them from the store); `disk_price_of` prices a stopped instance's disks.

    Rows are read and written with bulk Core statements (one executemany INSERT and two
    set-based UPDATEs per cycle), without a domain `Instance` per row: prices are looked up
    once per (provider, region, type, lifecycle) and attribution once per distinct tags.
    """
    stats = AccrualStats()
    session.flush()  # pending ORM changes first: the statements below bypass the ORM
    # only the columns accrual reads: every datetime and JSON column costs a conversion per row
    # tags as their JSON text: decoded once per distinct text (see _DimensionCache)
    # and the two timestamps unconverted: a cycle's watermarks repeat, so each distinct one
    # is converted once (_memo)
    raw_times = [type_coerce(_INSTANCES.c[c], NullType()).label(c) for c in _TIMES]
    rows = session.execute(select(
        *(_INSTANCES.c[c] for c in _COLUMNS), *raw_times,
        cast(_INSTANCES.c.tags, Text).label("tags_text"),
    ).where(_INSTANCES.c.accrued_until < now)).all()
    read_time = _memo(_time_reader(session.get_bind().dialect))
    due: list[tuple[Any, datetime, datetime]] = []  # (row, charged from, charged until)
    for row in rows:
        until = read_time(row.accrued_until)
        if row.gone:
            changed = read_time(row.state_changed_at)
            if until < changed:
                due.append((row, until, changed))
        else:
            due.append((row, until, now))
    gpu_refs = [(r.provider, r.instance_id) for r, _, _ in due
                if r.accrue_state == "running" and r.gpu_count > 0]
    if minutes_of is None:
        earliest = min((start for _, start, _ in due), default=now)
        stored = read_minutes(session, gpu_refs, earliest, now)

        def minutes_of(ref: InstanceRef, start: datetime, end: datetime) -> list[GpuMinute]:
            return [m for m in stored.get(ref, []) if start <= m.minute < end]
    price_cache: dict[tuple[str, str, str, str], PriceQuote | None] = {}
    dims_of = _DimensionCache(attributor)
    intervals: list[tuple[Any, ...]] = []

    for row, start, end in due:
        if row.accrue_state == "running" and end > start:
            ckey = (row.provider, row.region, row.instance_type, row.lifecycle)
            if ckey not in price_cache:
                lookup = price_of.get(row.provider)
                price_cache[ckey] = lookup(_full_instance(session, row)) if lookup else None
            quote = price_cache[ckey]
            if quote is None:
                stats.unpriced.add(f"{row.provider}:{row.instance_type}")
            seconds = (end - start).total_seconds()
            rate = quote.usd_per_hour if quote else 0.0
            cost = round(rate * seconds / 3600 * MICROS)
            gpu_seconds = round(row.gpu_count * seconds)
            verdict = Verdict.NO_DATA
            if row.gpu_count:
                window = minutes_of((row.provider, row.instance_id), start, end)
                # no readings at all is always "no data" (coverage 0); classify would say
                # the same after building a Classification, which costs ~20 us per instance
                if window or idle_signal not in _SIGNALS:
                    verdict = classify(window, window_start=start, window_end=end,
                                       gpu_count=row.gpu_count, signal=idle_signal,
                                       below=idle_below).verdict
            idle = verdict is Verdict.IDLE
            intervals.append(_interval(
                row, dims_of(row), start, end, state=row.accrue_state, rate=rate,
                source=quote.source if quote else "no price known", cost=cost,
                gpu_seconds=gpu_seconds, idle=idle, verdict=verdict))
            stats.intervals += 1
            stats.cost_micros += cost
            stats.idle_cost_micros += cost if idle else 0
        elif row.accrue_state == "stopped" and disk_price_of is not None and end > start:
            quote = disk_price_of(_full_instance(session, row))
            if quote is not None:
                cost = round(quote.usd_per_hour * (end - start).total_seconds() / 3600 * MICROS)
                intervals.append(_interval(
                    row, dims_of(row), start, end, state="stopped",
                    rate=quote.usd_per_hour, source=quote.source, cost=cost, gpu_seconds=0,
                    idle=False, verdict=Verdict.NO_DATA))
                stats.intervals += 1
                stats.cost_micros += cost
    if intervals:
        _insert_intervals(session, intervals)
    if due:
        _move_watermarks(session, now)
        # InstanceRow objects a caller holds in this session are now stale
        for obj in list(session.identity_map.values()):
            if isinstance(obj, InstanceRow):
                session.expire(obj)
    return stats


def _insert_intervals(session: Session, rows: list[tuple[Any, ...]]) -> None:
    conn = session.connection()
    dialect = conn.dialect
    if dialect.name != "sqlite":  # insertmanyvalues batches these well already
        conn.execute(insert(_INTERVALS), [dict(zip(_INTERVAL_KEYS, r, strict=True))
                                          for r in rows])
        return
    # SQLAlchemy binds every parameter of every row (~60 us a row); a cycle's values repeat
    # (few distinct starts, ends, rates), so each distinct value is bound once here and
    # the driver gets ready tuples
    compiled = insert(_INTERVALS).compile(dialect=dialect, column_keys=list(_INTERVAL_KEYS))
    assert compiled.positiontup == list(_INTERVAL_KEYS)  # sqlite's paramstyle: positional
    binders = [(i, _memo(p)) for i, name in enumerate(_INTERVAL_KEYS)
               if (p := _bind_processor(name, dialect)) is not None]
    if binders:
        params: list[tuple[Any, ...]] = []
        for r in rows:
            row = list(r)
            for i, bind in binders:
                row[i] = bind(row[i])
            params.append(tuple(row))
        rows = params
    conn.exec_driver_sql(compiled.string, rows)


def _bind_processor(column: str, dialect: Dialect) -> Callable[[Any], Any] | None:
    # the dialect's own implementation (sqlite's DATETIME writes its own text format)
    return _INTERVALS.c[column].type.dialect_impl(dialect).bind_processor(dialect)


def _time_reader(dialect: Dialect) -> Callable[[Any], Any]:
    """The stored `accrued_until` (as the driver returns it) to an aware datetime."""
    read = _INSTANCES.c.accrued_until.type.dialect_impl(dialect).result_processor(dialect, None)
    assert read is not None  # UTCDateTime always post-processes
    return read


def _memo(bind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    done: dict[Any, Any] = {}

    def once(value: Any) -> Any:
        try:
            return done[value]
        except KeyError:
            out = done[value] = bind(value)
            return out
    return once


def _move_watermarks(session: Session, now: datetime) -> None:
    """Set every due instance's watermark as the loop charged it, in two set-based UPDATEs.

    The WHERE clauses select exactly the rows `accrue` found due (same transaction): live
    ones move to `now`, gone ones to when they went; both accrue in their current state.
    """
    t = _INSTANCES.c
    session.execute(update(_INSTANCES).where(t.accrued_until < now, t.gone.is_(False))
                    .values(accrued_until=now, accrue_state=t.state))
    session.execute(update(_INSTANCES).where(t.accrued_until < now, t.gone.is_(True),
                                             t.accrued_until < t.state_changed_at)
                    .values(accrued_until=t.state_changed_at, accrue_state=t.state))


def _full_instance(session: Session, row: Any) -> Instance:
    """The stored instance as the domain model, for price lookups (once per price key)."""
    full = session.get(InstanceRow, (row.provider, row.instance_id))
    assert full is not None
    return to_instance(full)


class _DimensionCache:
    """Attribution per distinct (account, name, tags text): what the attributor reads of an
    instance (its `launched_by` too, which the store does not keep: None, as in to_instance;
    key on it here once the instances table holds it)."""

    def __init__(self, attributor: Attributor) -> None:
        self.attributor = attributor
        self.cache: dict[tuple[str, str | None, str | None], dict[str, str | None]] = {}

    def __call__(self, row: Any) -> dict[str, str | None]:
        key = (row.account, row.name, row.tags_text)
        dims = self.cache.get(key)
        if dims is None:
            tags = json.loads(row.tags_text) if row.tags_text else {}
            shim = Instance(provider=row.provider, account=row.account, region=row.region,
                            instance_id=row.instance_id, name=row.name,
                            instance_type=row.instance_type, state=InstanceState(row.state),
                            lifecycle=Lifecycle(row.lifecycle), gpu_count=row.gpu_count,
                            launch_time=_EPOCH, observed_at=_EPOCH, tags=tags)
            dims = self.cache[key] = self.attributor.dimensions(shim)
        return dims


_INTERVAL_KEYS = (
    "provider", "instance_id", "account", "region", "instance_type", "lifecycle", "state",
    "start", "end", "usd_per_hour", "price_source", "cost_micros", "gpu_count", "gpu_seconds",
    "idle_gpu_seconds", "idle_cost_micros", "verdict", "team", "project", "env", "cost_center")


def _interval(row: Any, dims: Mapping[str, str | None], start: datetime, end: datetime, *,
              state: str, rate: float, source: str, cost: int, gpu_seconds: int, idle: bool,
              verdict: Verdict) -> tuple[Any, ...]:
    """One cost_intervals row, its values in `_INTERVAL_KEYS` order."""
    return (
        row.provider, row.instance_id, row.account, row.region, row.instance_type,
        row.lifecycle, state, start, end, rate, source[:128], cost, row.gpu_count,
        gpu_seconds, gpu_seconds if idle else 0, cost if idle else 0, str(verdict),
        dims.get("team"), dims.get("project"), dims.get("env"), dims.get("cost-center"),
    )
