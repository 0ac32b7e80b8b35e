"""The reading window: recent GPU-minutes held packed in memory for accrual and the idle
policies (`ReadingWindow`), and accrual's reader of a span older than the window
(`SpanReader`), both handing out `WindowReading`s."""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any, NamedTuple

from sqlmodel import Session

from costguard.clock import utc
from costguard.model import MAX_SPAN_MINUTES, PERCENT_GRID, GpuMinute, TelemetrySource
from costguard.store.blocks import quantize
from costguard.store.readings import read_rows
from costguard.store.refs import InstanceRef


class WindowReading(NamedTuple):
    """The window's copy of a stored GPU-minute: the fields the idle classifier reads
    (`costguard.model.Reading`) and who measured it, built when asked for. A `GpuMinute`
    costs ~2 KB of memory (a pydantic model's dict and fields-set); the window keeps 18
    bytes per reading of a cloud's metrics, 46 where the agent's percentiles, memory and
    process figures come too."""

    gpu_index: int
    minute: datetime
    span_minutes: int
    util_mean: float | None
    util_p95: float | None
    util_max: float | None
    sm_mean: float | None
    sm_p95: float | None
    sm_max: float | None
    mem_used_bytes: int | None
    process_count: int | None
    top_process_pid: int | None
    top_process_bytes: int | None
    source: TelemetrySource


# a packed reading: gpu, minute, span, source (its index in `_SOURCES`), the four percentages a
# cloud's metrics give (the mean and maximum of utilisation, CloudWatch's and Cloud
# Monitoring's, and of SM activity, Cloud Monitoring's), then what only the agent measures:
# two percentiles and four integers
_PACKED = ("gpu_index", "minute", "span_minutes", "source",
           "util_mean", "util_max", "sm_mean", "sm_max",
           "util_p95", "sm_p95",
           "mem_used_bytes", "process_count", "top_process_pid", "top_process_bytes")
_SOURCES = tuple(TelemetrySource)
# a source's code, by member or by the text the store returns (a StrEnum equals its value)
_SOURCE_CODE: dict[str, int] = {str(src): n for n, src in enumerate(_SOURCES)}
assert sorted(_PACKED) == sorted(WindowReading._fields)
_make = tuple.__new__  # WindowReading._make without its length check
_LONGEST = timedelta(minutes=MAX_SPAN_MINUTES)  # the longest span a reading covers
_SLACK = 15 * 60  # seconds a reading may stay past the window before its row is dropped
# a minute's datetime, shared by every instance's readings of that minute (building one per
# reading was a third of handing them out); cleared when it holds more than four days of
# minutes (a window is an hour or a few; what it keeps beyond that is never asked again)
_WHEN: dict[int, datetime] = {}
_WHEN_MAX = 4 * 24 * 60
_STAMPS: dict[datetime, int] = {}  # the other way: a minute's epoch seconds, as `_WHEN`

# A packed reading is one record of bytes (`struct`): GPU index (int32), minute (epoch
# seconds, uint32: to 2106), span and source code (a byte each), the percentages as
# hundredths of a point (uint16; `_NO_PCT` for none), then the agent's integers (int64
# bytes, int32 counts and pids; -1 for none). Narrow: a cloud's four percentages, 18 bytes;
# wide: all six and the integers, 46 bytes (as doubles they took 64 and 112).
_NARROW_ROW = struct.Struct("<iIBB4H")
_WIDE_ROW = struct.Struct("<iIBB6Hqiiq")
_NARROW = 8  # values of a narrow row: gpu, minute, span, source, a cloud's four percentages
_NO_PCT = 0xFFFF


def _pct(value: float | None) -> int:
    """A percentage (0-100) as the largest hundredth of a point at or below it: the grid
    the settled blocks keep (`store.blocks.quantize`), so a threshold on the grid (`below: 5`,
    `below: 0.5`) compares the same on the window's copy as on the reading, and the window
    hands out what the store will once the hour is settled."""
    if value is None:
        return _NO_PCT
    return max(0, min(_NO_PCT - 1, quantize(value, PERCENT_GRID)))


# percentages already put on the grid: a fleet's readings repeat a few thousand values (a
# cloud's are whole or few-digit numbers), and a lookup is a third of `_pct`'s cost
_ON_GRID: dict[float | None, int] = {None: _NO_PCT}
_ON_GRID_MAX = 1 << 16


def _pct_remembered(value: float | None) -> int:
    """`_pct`, remembered in `_ON_GRID` (emptied when it holds `_ON_GRID_MAX` values)."""
    if len(_ON_GRID) > _ON_GRID_MAX:
        _ON_GRID.clear()
        _ON_GRID[None] = _NO_PCT
    q = _ON_GRID[value] = _pct(value)
    return q


def _packer(get: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], tuple[int, ...]]:
    """A reading (a GpuMinute or a stored row's column -> value) as one packed record's
    values: the minute as epoch seconds, percentages on the grid (`_pct`), None as the
    record's mark for none."""
    stamps = _STAMPS
    code = _SOURCE_CODE
    grid, miss = _ON_GRID.get, _pct_remembered

    def pack(reading: Any) -> tuple[int, ...]:
        # unrolled, each minute converted once and each percentage looked up: a cold cycle
        # packs a fleet's hour of readings
        gpu, minute, span, src, a, b, c, e, f, g, h, k, m, n = get(reading)
        stamp = stamps.get(minute)
        if stamp is None:
            if len(stamps) > _WHEN_MAX:
                stamps.clear()
            stamp = stamps[minute] = int(utc(minute).timestamp())
        pa, pb, pc, pe, pf, pg = grid(a), grid(b), grid(c), grid(e), grid(f), grid(g)
        return (gpu, stamp, span, code[src],
                miss(a) if pa is None else pa, miss(b) if pb is None else pb,
                miss(c) if pc is None else pc, miss(e) if pe is None else pe,
                miss(f) if pf is None else pf, miss(g) if pg is None else pg,
                -1 if h is None else h, -1 if k is None else k, -1 if m is None else m,
                -1 if n is None else n)

    return pack


_pack_minute = _packer(attrgetter(*_PACKED))
_pack_values = _packer(tuple)  # a row read with `fields=_PACKED`


def _narrow(row: tuple[int, ...]) -> bool:
    """True when the packed reading has none of what only the agent measures: as a cloud's
    readings have none."""
    e, f, h, k, m, n = row[_NARROW:]
    return e == _NO_PCT and f == _NO_PCT and h == k == m == n == -1


class _Rows:
    """One instance's readings as packed records in one bytearray, in the order they
    arrived; a later copy of the same (GPU, minute) replaces an earlier one.

    Records are narrow (`_NARROW_ROW`: gpu, minute, span, source and the four percentages
    a cloud gives: utilisation's and SM activity's mean and maximum) until a reading carries
    more (an agent's percentiles, memory or processes): then every record is widened to
    `_WIDE_ROW`, the others none where the reading had none. An instance read from its
    cloud's metrics alone (most of a large fleet) is held in 18 bytes a reading, not 46."""

    __slots__ = ("data", "kept", "oldest", "row")

    def __init__(self) -> None:
        self.data = bytearray()
        self.oldest = math.inf  # the earliest reading's start, epoch seconds
        self.kept = 0  # len(data) after the last compact
        self.row = _NARROW_ROW

    def crowded(self) -> bool:
        """Twice what the last compact kept: a cloud's settling span read again each cycle
        (CloudWatch's last 10 minutes) repeats minutes that are already held."""
        return len(self.data) > 2 * max(self.kept, 64 * self.row.size)

    def append(self, row: tuple[int, ...]) -> None:
        """Add one packed reading (`_packer`'s values)."""
        if self.row is _WIDE_ROW:
            self.data += _WIDE_ROW.pack(*row)
        elif _narrow(row):
            self.data += _NARROW_ROW.pack(*row[:_NARROW])
        else:
            self._widen()
            self.data += _WIDE_ROW.pack(*row)
        if row[1] < self.oldest:
            self.oldest = row[1]

    def _widen(self) -> None:
        wide, more = _WIDE_ROW.pack, (_NO_PCT, _NO_PCT, -1, -1, -1, -1)
        self.data = bytearray(b"".join(wide(*values, *more)
                                       for values in _NARROW_ROW.iter_unpack(self.data)))
        self.kept = self.kept // _NARROW_ROW.size * _WIDE_ROW.size
        self.row = _WIDE_ROW

    def compact(self, start_s: float) -> None:
        """Drop the readings that end before `start_s` and all but the last copy of each
        (GPU, minute)."""
        d, size = bytes(self.data), self.row.size
        kept: dict[tuple[int, int], int] = {}  # (gpu, minute) -> the record's offset
        at = 0
        for gpu, t, span, *_ in self.row.iter_unpack(d):
            if t >= start_s or t + span * 60 > start_s:
                kept[(gpu, t)] = at
            at += size
        self.data = bytearray(b"".join(d[at:at + size] for at in kept.values()))
        self.oldest = min((t for _, t in kept), default=math.inf)
        self.kept = len(self.data)

    def __len__(self) -> int:
        """Readings held."""
        return len(self.data) // self.row.size

    def readings(self, start_s: float, end_s: float) -> list[WindowReading]:
        """The readings that cover any minute of [start_s, end_s), as `covering` picks."""
        out: dict[tuple[int, int], WindowReading] = {}
        when = _WHEN
        if len(when) > _WHEN_MAX:
            when.clear()
        no, grid = _NO_PCT, PERCENT_GRID
        e = f = no  # what a narrow record does not hold
        h = k = m = n = -1
        sources = _SOURCES
        wide = self.row is _WIDE_ROW
        for values in self.row.iter_unpack(self.data):
            gpu, t, span = values[0], values[1], values[2]
            if span == 1:
                if not start_s <= t < end_s:
                    continue
            elif not (t < end_s and t + span * 60 > start_s):
                continue
            minute = when.get(t)
            if minute is None:
                minute = when[t] = datetime.fromtimestamp(t, UTC)
            # unrolled: twice as fast as comprehensions (~1 us a reading)
            if wide:
                s, a, b, c, g, e, f, h, k, m, n = values[3:]
            else:
                s, a, b, c, g = values[3:]
            # packed util mean, max, SM mean, SM max, util p95, SM p95: WindowReading's order
            out[(gpu, t)] = _make(WindowReading, (
                gpu, minute, span,
                None if a == no else a / grid, None if e == no else e / grid,
                None if b == no else b / grid, None if c == no else c / grid,
                None if f == no else f / grid, None if g == no else g / grid,
                None if h < 0 else h, None if k < 0 else k,
                None if m < 0 else m, None if n < 0 else n, sources[s]))
        return list(out.values())


class ReadingWindow:
    """A rolling in-memory view of recent readings, refreshed incrementally from the store.

    Each cycle needs the last hour or so of GPU-minutes twice (accrual and idle evaluation);
    re-reading the whole window every cycle dominated a cycle's cost. The store stays the
    source of truth: each refresh re-reads the newest `late` span, so agent minutes that
    arrive a little late are still seen. Readings are kept packed (`_Rows`, 18-46 bytes each;
    as `GpuMinute`s an hour of 10,000 instances' GPUs took over a gigabyte) and handed out as
    `WindowReading`s, one instance at a time.
    """

    def __init__(self, late: timedelta = timedelta(minutes=5)) -> None:
        self.late = late
        self._until: datetime | None = None
        self._start: datetime | None = None
        self._by_ref: dict[InstanceRef, _Rows] = {}
        # instances `add` filled since the last refresh: the (source, since) they were fed
        self._fed: dict[InstanceRef, tuple[str, datetime]] = {}
        self._expected: datetime | None = None  # `add` keeps readings that end after it
        self._expected_of: Mapping[InstanceRef, datetime] = {}  # ... or after its own
        # where each instance's span begins (epoch seconds), as the last `refresh` was told
        self._from: dict[InstanceRef, float] = {}

    def _rows(self, ref: InstanceRef) -> _Rows:
        rows = self._by_ref.get(ref)
        if rows is None:
            rows = self._by_ref[ref] = _Rows()
        return rows

    def add(self, minutes: Iterable[GpuMinute], *, since: datetime) -> None:
        """Write-through: readings this process just stored, fetched from their source for
        [since, now), need no read back."""
        fed, pack = self._fed, _pack_minute
        expected, expected_of = self._expected, self._expected_of
        floor = -math.inf
        early: datetime | None = None
        last: tuple[str, str, str] | None = None
        rows = _Rows()  # replaced at the first reading
        for m in minutes:
            # a batch holds each instance's readings together: its rows are looked up once
            key = (m.provider, m.instance_id, m.source)
            if key != last:
                last, ref = key, (m.provider, m.instance_id)
                fed[ref] = (str(m.source), since)
                rows = self._rows(ref)
                begins = expected_of.get(ref, expected)
                floor = -math.inf if begins is None else begins.timestamp()
                # a reading that begins this early ends before the floor whatever its span:
                # not even packed (after a downtime, most of what a cycle reads)
                early = None if begins is None else begins - _LONGEST
            if early is not None and m.minute <= early:
                continue
            row = pack(m)
            if row[1] + row[2] * 60 > floor:  # ends inside the next refresh's span
                rows.append(row)

    def expect(self, start: datetime,
               starts: Mapping[InstanceRef, datetime] | None = None) -> None:
        """The next `refresh` begins at `start` (an instance in `starts` at its own):
        readings `add` is given that end before it are stored but not held. After a downtime
        a cycle reads hours of metrics; the window holding them all took gigabytes at 10,000
        instances (accrual reads a span older than the window from the store,
        `SpanReader`)."""
        self._expected = start
        self._expected_of = starts or {}

    @property
    def start(self) -> datetime | None:
        """Where the window's span begins (None before the first `refresh`): the earliest
        any instance is held from."""
        return self._start

    def holds(self, ref: InstanceRef, start: datetime) -> bool:
        """Whether a span of `ref`'s that begins at `start` lies inside what the window
        holds of it (where its own span begins, `refresh`'s `starts`)."""
        if self._start is None:
            return False
        begins = self._from.get(ref)
        return start >= self._start if begins is None else start.timestamp() >= begins

    def refresh(self, session: Session, refs: Iterable[InstanceRef], start: datetime,
                end: datetime, starts: Mapping[InstanceRef, datetime] | None = None) -> None:
        """Bring the window to [start, end) (an instance in `starts` to [its own start,
        end): each kind of resource is held as far back as its own policies look), reading
        from the store only what `add` did not bring: an instance held from further back
        than before (at first use, or when its window grows longer), its whole span less
        what was fed; the others, the newest `late` span of the instances that were not
        fed."""
        own = starts or {}
        begin = {ref: own.get(ref, start) for ref in refs}
        fed, self._fed = self._fed, {}
        before = math.inf if self._start is None else self._start.timestamp()
        # whole spans to read, by where they begin and the fed span they leave out
        whole: dict[tuple[datetime, tuple[str, datetime] | None], list[InstanceRef]] = (
            defaultdict(list))
        late: dict[datetime, list[InstanceRef]] = defaultdict(list)
        for ref, b in begin.items():
            if self._until is None or b.timestamp() < self._from.get(ref, before):
                if ref not in fed:
                    self._by_ref.pop(ref, None)  # what is held of it is read again
                whole[(b, fed.get(ref))].append(ref)
            elif ref not in fed:
                # what others stored since: the agent's minutes (one minute each; a cloud's
                # readings of several minutes come through `add`, from this process's
                # calls). Rows that began earlier and span into the late span were read when
                # they were new: asking for them again re-read an hour of every stopped
                # GPU's readings.
                late[max(b, self._until - self.late)].append(ref)
        reads: list[Iterator[tuple[InstanceRef, Sequence[Any]]]] = [
            read_rows(session, members, b, end, skip=skip, fields=_PACKED)
            for (b, skip), members in whole.items()]
        reads += [read_rows(session, members, b, end, spanning=False, fields=_PACKED)
                  for b, members in late.items()]
        for ref in list(self._by_ref):
            if ref not in begin:
                del self._by_ref[ref]
        touched: set[InstanceRef] = set()
        for read in reads:
            for ref, values in read:
                self._rows(ref).append(_pack_values(values))
                touched.add(ref)
        self._from = {ref: b.timestamp() for ref, b in begin.items()}
        for ref, rows in self._by_ref.items():
            start_s = self._from[ref]
            # re-read rows repeat what was kept; old ones go a little after they leave
            if ref in touched or rows.oldest < start_s - _SLACK or rows.crowded():
                rows.compact(start_s)
        self._start = min([start, *begin.values()])
        self._until = end

    def minutes(self, ref: InstanceRef, start: datetime, end: datetime) -> list[WindowReading]:
        rows = self._by_ref.get(ref)
        if rows is None:
            return []
        return rows.readings(start.timestamp(), end.timestamp())

    def readings(self) -> int:
        """Readings held (copies of a re-read minute counted until compacted)."""
        return sum(len(rows) for rows in self._by_ref.values())


class SpanReader:
    """Accrual's readings (`costs.accrual.MinutesLookup`; with `agent_only`, the agent's
    alone: `accounting.idle_evidence: agent`): a span inside `window` from the window; a
    span that begins before it (the interval since a downtime, or any span when there is no
    window) from the store, `batch` instances at a time, in the order accrual said it would
    ask for them (`expect`). Only one batch's readings are held: the store's hours for a
    whole fleet at once were the largest thing a catch-up cycle held."""

    def __init__(self, session: Session, now: datetime, window: ReadingWindow | None = None,
                 *, batch: int = 250, agent_only: bool = False) -> None:
        self.session, self.now, self.window, self.batch = session, now, window, batch
        self.agent_only = agent_only  # hand out the agent's readings alone
        self._order: list[InstanceRef] = []
        self._at: dict[InstanceRef, int] = {}
        self._starts: dict[InstanceRef, datetime] = {}
        self._held: dict[InstanceRef, _Rows] = {}

    def _in_window(self, ref: InstanceRef, start: datetime) -> bool:
        return self.window is not None and self.window.holds(ref, start)

    def expect(self, spans: Sequence[tuple[InstanceRef, datetime]]) -> None:
        """The instances accrual asks for next, in that order, each with its span's start;
        what was held for the previous ones is let go."""
        self._starts = {ref: start for ref, start in spans
                        if not self._in_window(ref, start)}
        self._order = list(self._starts)
        self._at = {ref: i for i, ref in enumerate(self._order)}
        self._held = {}

    def __call__(self, ref: InstanceRef, start: datetime, end: datetime
                 ) -> list[WindowReading]:
        if self._in_window(ref, start):
            assert self.window is not None
            got = self.window.minutes(ref, start, end)
        else:
            rows = self._held.get(ref)
            if rows is None:
                rows = self._load(ref, start)
            got = rows.readings(start.timestamp(), end.timestamp())
        if self.agent_only:
            return [r for r in got if r.source is TelemetrySource.AGENT]
        return got

    def _load(self, ref: InstanceRef, start: datetime) -> _Rows:
        """Read `ref`'s batch (it and the instances expected after it) from the store."""
        at = self._at.get(ref)
        batch = [ref] if at is None else self._order[at:at + self.batch]
        since = min([start, *(self._starts.get(r, start) for r in batch)])
        self._held = {r: _Rows() for r in batch}
        for r, values in read_rows(self.session, batch, since, self.now, fields=_PACKED):
            self._held[r].append(_pack_values(values))
        return self._held[ref]


class SlidingReadings:
    """Stored readings of a set of instances over a long span (the days or weeks a backtest
    replays), held packed for a sliding part of it: `hold(start, end)` reads what is newer
    than what is held, a `chunk` at a time, and lets go of what ends before `start`. As
    `GpuMinute`s a week of a demo's 69 instances took 0.7 GB; a month of a real fleet's
    would not fit. `scan` reads forward from the store, a day at a time, without holding."""

    def __init__(self, session: Session, refs: Iterable[InstanceRef], *,
                 chunk: timedelta = timedelta(hours=1)) -> None:
        self.session, self.chunk = session, chunk
        self._refs = list(dict.fromkeys(refs))
        self._rows: dict[InstanceRef, _Rows] = {}
        self._until: datetime | None = None

    def hold(self, start: datetime, end: datetime) -> None:
        """Hold the readings that cover any minute of [start, end); `start` moves forward
        only (an earlier one gets what is still held)."""
        if self._until is not None and end <= self._until:
            return
        # the next chunk: only the readings that begin in it (one that began earlier is
        # held), unless `start` leaps past what is held (a step of hours): then from there
        afresh = self._until is None or start > self._until
        lo = start if afresh or self._until is None else self._until
        hi = max(end, lo + self.chunk)
        for ref, values in read_rows(self.session, self._refs, lo, hi, spanning=afresh,
                                     fields=_PACKED):
            rows = self._rows.get(ref)
            if rows is None:
                rows = self._rows[ref] = _Rows()
            rows.append(_pack_values(values))
        start_s = start.timestamp()
        for rows in self._rows.values():
            rows.compact(start_s)
        self._until = hi

    def minutes(self, ref: InstanceRef, start: datetime, end: datetime) -> list[WindowReading]:
        """The readings covering any minute of [start, end), within what `hold` holds."""
        rows = self._rows.get(ref)
        return [] if rows is None else rows.readings(start.timestamp(), end.timestamp())

    def readings(self) -> int:
        """Readings held."""
        return sum(len(rows) for rows in self._rows.values())

    def scan(self, ref: InstanceRef, start: datetime, end: datetime,
             day: timedelta = timedelta(days=1)) -> Iterator[WindowReading]:
        """`ref`'s readings covering [start, end), read from the store a `day` at a time, in
        the order of their minutes."""
        lo = start
        while lo < end:
            hi = min(end, lo + day)
            rows = _Rows()
            for _, values in read_rows(self.session, [ref], lo, hi, spanning=lo == start,
                                       fields=_PACKED):
                rows.append(_pack_values(values))
            yield from sorted(rows.readings(lo.timestamp(), hi.timestamp()),
                              key=attrgetter("minute"))
            lo = hi
