"""Accrual: the cost of every instance's interval since the last poll, with idle dollars.

An interval is charged in the state the instance was in when it began (`accrue_state`): a
change noticed at a poll is charged from that poll on. Stopped instances accrue only their
attached disks, and only where `disk_price_of` knows them. Money is integer micro-dollars.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import Table, Text, cast, insert, select, type_coerce, update
from sqlalchemy.engine import Dialect
from sqlalchemy.types import NullType
from sqlmodel import Session

from costguard.costs.attribution import Attributor
from costguard.costs.price_book import record_sources
from costguard.costs.pricing import PRICE_KEY_FIELDS, PriceCatalog
from costguard.minutes import Reading
from costguard.model import Instance, InstanceState, PriceQuote, Verdict
from costguard.store.inventory import to_instance
from costguard.store.refs import InstanceRef
from costguard.store.tables import CostIntervalRow, InstanceRow
from costguard.store.upsert import driver_sql
from costguard.store.window import SpanReader
from costguard.telemetry.classify import SignalChoice, classify

PriceLookup = Callable[[Instance], PriceQuote | None]
MinutesLookup = Callable[[InstanceRef, datetime, datetime], Sequence[Reading]]


@runtime_checkable
class ExpectsSpans(Protocol):
    """A `MinutesLookup` told, before each chunk of instances, which it will be asked for
    and in what order (`store.window.SpanReader` reads the store a batch at a time)."""

    def expect(self, spans: Sequence[tuple[InstanceRef, datetime]]) -> None: ...

    def __call__(self, ref: InstanceRef, start: datetime, end: datetime
                 ) -> Sequence[Reading]: ...


MICROS = 1_000_000
_INSTANCES: Table = InstanceRow.__table__  # type: ignore[attr-defined]
_INTERVALS: Table = CostIntervalRow.__table__  # type: ignore[attr-defined]
# a row as accrual reads it: the price key first (so `row[:_KEY]` is it), then the rest
_KEY = len(PRICE_KEY_FIELDS)
_COLUMNS = (*PRICE_KEY_FIELDS, "instance_id", "name", "accrue_state", "gone")
_TIMES = ("state_changed_at", "accrued_until")
# places in a row as accrual reads it
_GPUS, _STATE, _GONE = (_COLUMNS.index(c) for c in ("gpu_count", "accrue_state", "gone"))
_CHANGED, _UNTIL = len(_COLUMNS), len(_COLUMNS) + 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PREBOUND = ("start", "end", "usd_per_hour")  # bound once per distinct value (SQLite)
_CHUNK = 2_000  # rows read, and intervals written, at a time


@dataclass
class AccrualStats:
    intervals: int = 0
    cost_micros: int = 0
    idle_cost_micros: int = 0
    unpriced: set[str] = field(default_factory=set)  # instance types without a price


# providers whose "instances" are shares of instances that accrue on their own: a
# Kubernetes workload's spend is part of its nodes' (the report splits it, k8s/allocate.py)
NOT_ACCRUED = ("k8s",)


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
    instances: Mapping[InstanceRef, Instance] | None = None,
) -> AccrualStats:
    """Charge every instance from its watermark to `now`; `minutes_of` gives readings
    (default: read them from the store); `disk_price_of` prices a stopped instance's disks;
    `instances` (provider, id) -> the instance as the store holds it now (the engine's
    inventory, read after collect), so a price is looked up without reading the row again.

    Rows are read and written with bulk Core statements (one SELECT, an executemany INSERT
    per `_CHUNK` rows and two set-based UPDATEs per cycle), in chunks so that neither the
    rows read nor the intervals built pile up (objects that survive into the collector's
    oldest generation make a full collection, ~0.1 s in a big process, likelier), and
    without a domain `Instance` per row: prices are looked up
    once per price key (`PRICE_KEY_FIELDS`, plus the instance id where an override names it
    or the lookup is not a `PriceCatalog`'s) and attribution once per distinct tags.
    """
    stats = AccrualStats()
    session.flush()  # pending ORM changes first: the statements below bypass the ORM
    dialect = session.get_bind().dialect
    # only the columns accrual reads; tags as JSON text (decoded once per distinct text) and
    # the timestamps as the driver returns them (converted once per distinct value)
    raw_times = [type_coerce(_INSTANCES.c[c], NullType()) for c in _TIMES]
    spans = _Spans(dialect, now)
    if minutes_of is None:
        minutes_of = SpanReader(session, now)
    expect = minutes_of.expect if isinstance(minutes_of, ExpectsSpans) else None
    result = session.execute(select(
        *(_INSTANCES.c[c] for c in _COLUMNS), *raw_times,
        cast(_INSTANCES.c.tags, Text), _INSTANCES.c.launched_by, cast(_INSTANCES.c.owner, Text),
    ).where(_INSTANCES.c.accrued_until < now, _INSTANCES.c.provider.not_in(NOT_ACCRUED)))
    write = _IntervalWriter(session, prebound=spans.binds)
    known = instances or {}
    quotes = {name: _Quotes(session, lookup, spans.bind_rate, known) for name, lookup in
              price_of.items()}
    disks = (_Quotes(session, disk_price_of, spans.bind_rate, known) if disk_price_of
             else None)
    dims_of = _DimensionCache(attributor, known)
    no_price: _Price = (0.0, spans.bind_rate(0.0), "no price known")
    intervals: list[tuple[Any, ...]] = []
    for row in _rows(result, spans, expect):
        if len(intervals) >= _CHUNK:
            write(intervals)
            stats.intervals += len(intervals)
            intervals = []
        (provider, account, region, _zone, itype, lifecycle, gpus, _model, _mib,
         iid, _name, accrue_state, gone, changed_raw, until_raw, _tags, _launcher,
         _owner) = row
        span = spans.gone(until_raw, changed_raw) if gone else spans.live(until_raw)
        if span is None:
            continue
        start, end, seconds, b_start, b_end = span
        if accrue_state == "running":
            lookup = quotes.get(provider)
            price = lookup(row) if lookup else None
            if price is None:
                stats.unpriced.add(f"{provider}:{itype}")
                price = no_price
            rate, b_rate, source = price
            cost = round(rate * seconds / 3600 * MICROS)
            gpu_seconds = round(gpus * seconds)
            verdict = Verdict.NO_DATA
            if gpus:
                window = minutes_of((provider, iid), start, end)
                # no readings at all is always "no data" (coverage 0); classify would say
                # the same after building a Classification, which costs ~20 us per instance
                if window:
                    verdict = classify(window, window_start=start, window_end=end,
                                       gpu_count=gpus, signal=idle_signal,
                                       below=idle_below).verdict
            idle = verdict is Verdict.IDLE
            intervals.append((
                provider, iid, account, region, itype, lifecycle, "running", b_start, b_end,
                b_rate, source, cost, gpus, gpu_seconds, gpu_seconds if idle else 0,
                cost if idle else 0, verdict.value, *dims_of(row)))
            stats.cost_micros += cost
            stats.idle_cost_micros += cost if idle else 0
        elif accrue_state == "stopped" and disks is not None:
            disk = disks(row)
            if disk is not None:
                rate, b_rate, source = disk
                cost = round(rate * seconds / 3600 * MICROS)
                intervals.append((
                    provider, iid, account, region, itype, lifecycle, "stopped", b_start,
                    b_end, b_rate, source, cost, gpus, 0, 0, 0, Verdict.NO_DATA.value,
                    *dims_of(row)))
                stats.cost_micros += cost
    if intervals:
        write(intervals)
        stats.intervals += len(intervals)
    record_sources(session, (q for table in (*quotes.values(), disks) if table is not None
                             for q in table.seen.values()))
    _move_watermarks(session, now)  # two UPDATEs that match nothing when nothing was due
    # InstanceRow objects a caller holds in this session are now stale
    for obj in list(session.identity_map.values()):
        if isinstance(obj, InstanceRow):
            session.expire(obj)
    return stats


_Price = tuple[float, Any, str]  # (usd per hour, as bound for the INSERT, source)
_Span = tuple[datetime, datetime, float, Any, Any]  # start, end, seconds, bound start/end


class _Spans:
    """The charged span of a row from its raw watermark (and, if gone, its raw change
    time), memoized: a cycle's watermarks repeat. On SQLite the span's ends and the rates
    are also bound for the INSERT once per distinct value (SQLAlchemy would bind every
    parameter of every row, ~60 us a row); elsewhere they stay as they are."""

    def __init__(self, dialect: Dialect, now: datetime) -> None:
        self.now = now
        self.read = _time_reader(dialect)
        self.binds = dialect.name == "sqlite"
        keep: Callable[[Any], Any] = _identity
        bind_start, bind_end, bind_rate = (
            _memo(_bind_processor(c, dialect) or keep) if self.binds else keep
            for c in _PREBOUND)
        self.bind_start, self.bind_end, self.bind_rate = bind_start, bind_end, bind_rate
        self.live_spans: dict[Any, _Span] = {}
        self.gone_spans: dict[tuple[Any, Any], _Span | None] = {}

    def live(self, until_raw: Any) -> _Span:
        span = self.live_spans.get(until_raw)
        if span is None:
            span = self.live_spans[until_raw] = self._span(self.read(until_raw), self.now)
        return span

    def gone(self, until_raw: Any, changed_raw: Any) -> _Span | None:
        key = (until_raw, changed_raw)
        if key not in self.gone_spans:
            start, end = self.read(until_raw), self.read(changed_raw)
            self.gone_spans[key] = self._span(start, end) if start < end else None
        return self.gone_spans[key]

    def _span(self, start: datetime, end: datetime) -> _Span:
        return (start, end, (end - start).total_seconds(), self.bind_start(start),
                self.bind_end(end))


def _identity(value: Any) -> Any:
    return value


class _Quotes:
    """One lookup's quotes, once per price key. A `PriceCatalog` quote depends only on the
    `PRICE_KEY_FIELDS` and the instance ids its rules name; any other lookup may read
    anything of the instance, so it is asked once per instance."""

    def __init__(self, session: Session, lookup: PriceLookup, bind_rate: Callable[[Any], Any],
                 instances: Mapping[InstanceRef, Instance]) -> None:
        self.session, self.lookup, self.bind_rate = session, lookup, bind_rate
        self.instances = instances
        owner = getattr(lookup, "__self__", None)
        self.named = owner.named_instance_ids if isinstance(owner, PriceCatalog) else None
        self.cache: dict[tuple[Any, ...], _Price | None] = {}
        self.seen: dict[str, PriceQuote] = {}  # each source charged, with its age and kind

    def __call__(self, row: Any) -> _Price | None:
        iid = row[_KEY]
        key = row[:_KEY] if self.named is not None and iid not in self.named else row[:_KEY + 1]
        try:
            return self.cache[key]
        except KeyError:
            pass
        inst = self.instances.get((row[0], iid))
        if inst is None:
            full = self.session.get(InstanceRow, (row[0], iid))
            assert full is not None
            inst = to_instance(full)
        quote = self.lookup(inst)
        price = None if quote is None else (
            quote.usd_per_hour, self.bind_rate(quote.usd_per_hour), quote.source[:128])
        if quote is not None:
            self.seen.setdefault(quote.source[:128], quote)
        self.cache[key] = price
        return price


def _rows(result: Any, spans: _Spans,
          expect: Callable[[list[tuple[InstanceRef, datetime]]], None] | None
          ) -> Iterator[Any]:
    """The rows due, `_CHUNK` at a time; before each chunk, `expect` is told the running GPU
    instances whose readings it will be asked for, in order, with their spans' starts."""
    for chunk in result.partitions(_CHUNK):
        if expect is not None:
            due = []
            for row in chunk:
                if row[_GPUS] and row[_STATE] == "running":
                    span = (spans.gone(row[_UNTIL], row[_CHANGED]) if row[_GONE]
                            else spans.live(row[_UNTIL]))
                    if span is not None:
                        due.append(((row[0], row[_KEY]), span[0]))
            expect(due)
        yield from chunk


class _IntervalWriter:
    """executemany INSERTs of interval tuples; on SQLite the tuples come with `_PREBOUND`
    already bound, and go to the driver as they are (SQLAlchemy would bind every parameter
    of every row again): the statement comes from `driver_sql`, as for the readings and
    inventory writes."""

    def __init__(self, session: Session, *, prebound: bool) -> None:
        self.conn = session.connection()
        self.prebound = prebound
        if not prebound:
            return
        # sqlite: positional, in `_INTERVAL_KEYS` order (driver_sql checks)
        self.sql, positional, procs = driver_sql(insert(_INTERVALS), _INTERVALS,
                                                 _INTERVAL_KEYS, self.conn.dialect)
        assert positional
        unbound = [name for name in _INTERVAL_KEYS if name not in _PREBOUND and name in procs]
        if unbound:  # a column type that gains a bind processor: bind it with `_PREBOUND`
            raise RuntimeError(f"cost_intervals columns {unbound} need binding before the "
                               "driver sees them")

    def __call__(self, rows: list[tuple[Any, ...]]) -> None:
        if self.prebound:
            self.conn.exec_driver_sql(self.sql, rows)
        else:  # insertmanyvalues batches these well already (PostgreSQL)
            self.conn.execute(insert(_INTERVALS), [dict(zip(_INTERVAL_KEYS, r, strict=True))
                                                   for r in rows])


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


_Dims = tuple[str | None, str | None, str | None, str | None]  # team, project, env, cost-center


class _DimensionCache:
    """Attribution per distinct (account, name, tags text, launched_by, owner text): what the
    attributor reads of an instance; of the inventory's copy (`instances`) where it holds
    the instance, else of one built from the row (an instance gone from the inventory)."""

    def __init__(self, attributor: Attributor,
                 instances: Mapping[InstanceRef, Instance]) -> None:
        self.attributor, self.instances = attributor, instances
        self.cache: dict[tuple[str, str | None, str | None, str | None, str | None],
                         _Dims] = {}

    def __call__(self, row: Any) -> _Dims:
        (provider, account, region, _zone, itype, _lifecycle, _gpus, _model, _mib,
         iid, name, _accrue, _gone, _changed, _until, tags_text, launcher, owner_text) = row
        key = (account, name, tags_text, launcher, owner_text)
        dims = self.cache.get(key)
        if dims is None:
            inst = self.instances.get((provider, iid))
            if inst is None:
                # what the attributor reads (name, account, tags, launcher, owner) and the
                # fields an Instance cannot do without; tags are never NULL, the owner is
                # NULL on rows older than migration 0007 and JSON null on the others (a pet)
                owner = json.loads(owner_text) if owner_text else None
                inst = Instance(provider=provider, account=account, region=region,
                                instance_id=iid, name=name, instance_type=itype,
                                state=InstanceState.RUNNING, launch_time=_EPOCH,
                                observed_at=_EPOCH, tags=json.loads(tags_text),
                                launched_by=launcher, owner=owner)
            got = self.attributor.dimensions(inst)
            dims = self.cache[key] = (got.get("team"), got.get("project"), got.get("env"),
                                      got.get("cost-center"))
        return dims


# the order of the tuples `accrue` builds, one per cost_intervals row
_INTERVAL_KEYS = (
    "provider", "instance_id", "account", "region", "instance_type", "lifecycle", "state",
    "start", "end", "usd_per_hour", "price_source", "cost_micros", "gpu_count", "gpu_seconds",
    "idle_gpu_seconds", "idle_cost_micros", "verdict", "team", "project", "env", "cost_center")
