"""The reading window: recent GPU-minutes held packed in memory for accrual and the idle
policies (`ReadingWindow`), accrual's reader of a span older than the window (`SpanReader`)
and a backtest's sliding hold (`SlidingReadings`), all handing out readings still packed
(store/packed_view.py `PackedReadings`: the idle verdict reads them without an object per
reading; anything else gets `WindowReading`s)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from operator import attrgetter, itemgetter
from typing import Any

from sqlmodel import Session

from costguard.minute_rows import INSTANCE, MINUTE, PROVIDER, SOURCE, MinuteRows
from costguard.model import MAX_SPAN_MINUTES, GpuMinute, TelemetrySource
from costguard.store.packed import Rows, pack_minute, pack_values, row_packer
from costguard.store.packed_view import NONE_HELD, PACKED, PackedReadings, WindowReading
from costguard.store.readings import read_rows
from costguard.store.refs import InstanceRef

_LONGEST = timedelta(minutes=MAX_SPAN_MINUTES)  # the longest span a reading covers
# what `add` reads first of a reading: whose it is, who measured it, and its minute
_MINUTE_HEAD = attrgetter("provider", "instance_id", "source", "minute")
_ROW_HEAD = itemgetter(PROVIDER, INSTANCE, SOURCE, MINUTE)
_SLACK = 15 * 60  # seconds a reading may stay past the window before its row is dropped


def _read_as(minutes: Iterable[GpuMinute]) -> tuple[
        Iterable[Any], Callable[[Any], tuple[Any, ...]], Callable[[Any], tuple[int, ...]]]:
    """What `ReadingWindow.add` iterates for `minutes`, how it reads each one's provider,
    instance, source and minute, and how it packs one."""
    if isinstance(minutes, MinuteRows):  # a cloud's readings: packed from their rows
        return minutes.rows, _ROW_HEAD, row_packer(minutes.names)
    return minutes, _MINUTE_HEAD, pack_minute


class ReadingWindow:
    """A rolling in-memory view of recent readings, refreshed incrementally from the store.

    Each cycle needs the last hour or so of GPU-minutes twice (accrual and idle evaluation);
    re-reading the whole window every cycle dominated a cycle's cost. The store stays the
    source of truth: each refresh re-reads the newest `late` span, so agent minutes that
    arrive a little late are still seen. Readings are kept packed (`Rows`, 18-46 bytes each;
    as `GpuMinute`s an hour of 10,000 instances' GPUs took over a gigabyte), the quarter
    hours no cloud reads again compressed (`store/frozen.py`), and handed out one instance
    at a time, still packed (`PackedReadings`).
    """

    def __init__(self, late: timedelta = timedelta(minutes=5)) -> None:
        self.late = late
        self._until: datetime | None = None
        self._start: datetime | None = None
        self._by_ref: dict[InstanceRef, Rows] = {}
        # instances `add` filled since the last refresh: the (source, since) they were fed
        self._fed: dict[InstanceRef, tuple[str, datetime]] = {}
        self._expected: datetime | None = None  # `add` keeps readings that end after it
        self._expected_of: Mapping[InstanceRef, datetime] = {}  # ... or after its own
        # where each instance's span begins (epoch seconds), as the last `refresh` was told
        self._from: dict[InstanceRef, float] = {}

    def _rows(self, ref: InstanceRef) -> Rows:
        rows = self._by_ref.get(ref)
        if rows is None:
            rows = self._by_ref[ref] = Rows()
        return rows

    def add(self, minutes: Iterable[GpuMinute], *, since: datetime) -> None:
        """Write-through: readings this process just stored, fetched from their source for
        [since, now), need no read back."""
        items, head, pack = _read_as(minutes)
        fed = self._fed
        expected, expected_of = self._expected, self._expected_of
        floor = -math.inf
        early: datetime | None = None
        last: tuple[str, str, str] | None = None
        rows = Rows()  # replaced at the first reading
        for m in items:
            # a batch holds each instance's readings together: its rows are looked up once
            provider, instance_id, source, minute = head(m)
            key = (provider, instance_id, source)
            if key != last:
                last, ref = key, (provider, instance_id)
                fed[ref] = (str(source), since)
                rows = self._rows(ref)
                begins = expected_of.get(ref, expected)
                floor = -math.inf if begins is None else begins.timestamp()
                # a reading that begins this early ends before the floor whatever its span:
                # not even packed (after a downtime, most of what a cycle reads)
                early = None if begins is None else begins - _LONGEST
            if early is not None and minute <= early:
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
            read_rows(session, members, b, end, skip=skip, fields=PACKED)
            for (b, skip), members in whole.items()]
        reads += [read_rows(session, members, b, end, spanning=False, fields=PACKED)
                  for b, members in late.items()]
        for ref in list(self._by_ref):
            if ref not in begin:
                del self._by_ref[ref]
        touched: set[InstanceRef] = set()
        for read in reads:
            for ref, values in read:
                self._rows(ref).append(pack_values(values))
                touched.add(ref)
        self._from = {ref: b.timestamp() for ref, b in begin.items()}
        for ref, rows in self._by_ref.items():
            start_s = self._from[ref]
            # re-read rows repeat what was kept; old ones go a little after they leave; a
            # quarter hour no cloud reads again is frozen once it can be
            if (ref in touched or rows.oldest < start_s - _SLACK or rows.crowded()
                    or rows.ripe()):
                rows.compact(start_s, freeze=True)
        self._start = min([start, *begin.values()])
        self._until = end

    def minutes(self, ref: InstanceRef, start: datetime, end: datetime) -> PackedReadings:
        """`ref`'s readings that cover any minute of [start, end), still packed."""
        rows = self._by_ref.get(ref)
        if rows is None:
            return NONE_HELD
        return rows.view(start.timestamp(), end.timestamp())

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
        self._held: dict[InstanceRef, Rows] = {}

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

    def __call__(self, ref: InstanceRef, start: datetime, end: datetime) -> PackedReadings:
        if self._in_window(ref, start):
            assert self.window is not None
            got = self.window.minutes(ref, start, end)
        else:
            rows = self._held.get(ref)
            if rows is None:
                rows = self._load(ref, start)
            got = rows.view(start.timestamp(), end.timestamp())
        return got.only(TelemetrySource.AGENT) if self.agent_only else got

    def _load(self, ref: InstanceRef, start: datetime) -> Rows:
        """Read `ref`'s batch (it and the instances expected after it) from the store."""
        at = self._at.get(ref)
        batch = [ref] if at is None else self._order[at:at + self.batch]
        since = min([start, *(self._starts.get(r, start) for r in batch)])
        self._held = {r: Rows() for r in batch}
        for r, values in read_rows(self.session, batch, since, self.now, fields=PACKED):
            self._held[r].append(pack_values(values))
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
        self._rows: dict[InstanceRef, Rows] = {}
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
                                     fields=PACKED):
            rows = self._rows.get(ref)
            if rows is None:
                rows = self._rows[ref] = Rows()
            rows.append(pack_values(values))
        start_s = start.timestamp()
        for rows in self._rows.values():
            rows.compact(start_s)
        self._until = hi

    def minutes(self, ref: InstanceRef, start: datetime, end: datetime) -> PackedReadings:
        """The readings covering any minute of [start, end), within what `hold` holds."""
        rows = self._rows.get(ref)
        return NONE_HELD if rows is None else rows.view(start.timestamp(), end.timestamp())

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
            rows = Rows()
            for _, values in read_rows(self.session, [ref], lo, hi, spanning=lo == start,
                                       fields=PACKED):
                rows.append(pack_values(values))
            yield from sorted(rows.readings(lo.timestamp(), hi.timestamp()),
                              key=attrgetter("minute"))
            lo = hi
