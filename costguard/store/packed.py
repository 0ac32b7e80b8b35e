"""Readings packed for memory: a GPU-minute as one `struct` record of 18 bytes (a cloud's)
or 46 (an agent's), percentages on the settled blocks' grid (`Rows`, `pack_minute`,
`pack_values`), handed out as `WindowReading`s (the reading window, accrual's reads of the
store, backtests: store/window.py) through `PackedReadings` (store/packed_view.py)."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Any

from costguard.clock import utc
from costguard.model import PERCENT_GRID
from costguard.store import frozen
from costguard.store.blocks import quantize
from costguard.store.packed_view import (
    NARROW,
    NO_PCT,
    PACKED,
    SOURCE_CODE,
    WHEN_MAX,
    PackedReadings,
    WindowReading,
    make_tuple,
)

_STAMPS: dict[datetime, int] = {}  # a minute's epoch seconds (packed_view's `_WHEN` reversed)

# A packed reading is one record of bytes (`struct`): GPU index (int32), minute (epoch
# seconds, uint32: to 2106), span and source code (a byte each), the percentages as
# hundredths of a point (uint16; `NO_PCT` for none), then the agent's integers (int64
# bytes, int32 counts and pids; -1 for none). Narrow: a cloud's four percentages, 18 bytes;
# wide: all six and the integers, 46 bytes (as doubles they took 64 and 112); the fields'
# order is `PACKED`'s (store/packed_view.py).
_NARROW_ROW = struct.Struct("<iIBB4H")
_WIDE_ROW = struct.Struct("<iIBB6Hqiiq")
assert len(_NARROW_ROW.unpack(bytes(_NARROW_ROW.size))) == NARROW
_SPAN_AT = 8  # the span's byte in a record of either width (after the gpu and the minute)
assert struct.calcsize("<iI") == _SPAN_AT
# `Rows.compact(freeze=True)`: the quarter hours that end this much before an instance's
# newest reading are frozen, a chunk each (no cloud reads them again: CloudWatch's settling
# span is 10 minutes, the agent's late span 5), once they fill this many bytes (a chunk's
# own cost is ~60 bytes)
FREEZE_AFTER = 15 * 60
FREEZE_BYTES = 512


def _cut(newest: float) -> float:
    """Where `Rows.compact(freeze=True)` cuts: the start of the quarter hour in which
    `FREEZE_AFTER` before `newest` falls (the quarter hours before it are frozen)."""
    at = newest - FREEZE_AFTER
    return at - at % FREEZE_AFTER if math.isfinite(at) else at


def _pct(value: float | None) -> int:
    """A percentage (0-100) as the largest hundredth of a point at or below it: the grid
    the settled blocks keep (`store.blocks.quantize`), so a threshold on the grid (`below: 5`,
    `below: 0.5`) compares the same on the window's copy as on the reading, and the window
    hands out what the store will once the hour is settled."""
    if value is None:
        return NO_PCT
    return max(0, min(NO_PCT - 1, quantize(value, PERCENT_GRID)))


# percentages already put on the grid: a fleet's readings repeat a few thousand values (a
# cloud's are whole or few-digit numbers), and a lookup is a third of `_pct`'s cost
_ON_GRID: dict[float | None, int] = {None: NO_PCT}
_ON_GRID_MAX = 1 << 16


def _pct_remembered(value: float | None) -> int:
    """`_pct`, remembered in `_ON_GRID` (emptied when it holds `_ON_GRID_MAX` values)."""
    if len(_ON_GRID) > _ON_GRID_MAX:
        _ON_GRID.clear()
        _ON_GRID[None] = NO_PCT
    q = _ON_GRID[value] = _pct(value)
    return q


def _packer(get: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], tuple[int, ...]]:
    """A reading (a GpuMinute or a stored row's column -> value) as one packed record's
    values: the minute as epoch seconds, percentages on the grid (`_pct`), None as the
    record's mark for none."""
    stamps = _STAMPS
    code = SOURCE_CODE
    grid, miss = _ON_GRID.get, _pct_remembered

    def pack(reading: Any) -> tuple[int, ...]:
        # unrolled, each minute converted once and each percentage looked up: a cold cycle
        # packs a fleet's hour of readings
        gpu, minute, span, src, a, b, c, e, f, g, h, k, m, n = get(reading)
        stamp = stamps.get(minute)
        if stamp is None:
            if len(stamps) > WHEN_MAX:
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


pack_minute = _packer(attrgetter(*PACKED))
pack_values = _packer(tuple)  # a row read with `fields=PACKED`


_PAST_END = (None,)


def _row_picker(names: tuple[str, ...], fields: Sequence[str]
                ) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """`fields`' values of a reading's row of `names` (`costguard.minute_rows`), in that
    order: a field the rows do not have is none."""
    at = [names.index(n) if n in names else len(names) for n in fields]
    pick = itemgetter(*at)
    if len(names) not in at:
        return pick
    # a field the rows lack reads the None past their end (concatenating a one-tuple is half
    # the cost of unpacking the row into a new one: a cold cycle picks millions)
    return lambda row: pick(row + _PAST_END)


@lru_cache(maxsize=16)
def row_reading(names: tuple[str, ...]) -> Callable[[tuple[Any, ...]], WindowReading]:
    """A reading's row of `names` as the window's copy of it: what the classifier reads,
    without a model."""
    pick = _row_picker(names, WindowReading._fields)
    return lambda row: make_tuple(WindowReading, pick(row))


@lru_cache(maxsize=16)
def row_packer(names: tuple[str, ...]) -> Callable[[tuple[Any, ...]], tuple[int, ...]]:
    """`pack_minute` of a reading's row of `names`."""
    return _packer(_row_picker(names, PACKED))


def _narrow(row: tuple[int, ...]) -> bool:
    """True when the packed reading has none of what only the agent measures: as a cloud's
    readings have none."""
    e, f, h, k, m, n = row[NARROW:]
    return e == NO_PCT and f == NO_PCT and h == k == m == n == -1


class Rows:
    """One instance's readings as packed records in one bytearray, in the order they
    arrived; a later copy of the same (GPU, minute) replaces an earlier one.

    Records are narrow (`_NARROW_ROW`: gpu, minute, span, source and the four percentages
    a cloud gives: utilisation's and SM activity's mean and maximum) until a reading carries
    more (an agent's percentiles, memory or processes): then every record is widened to
    `_WIDE_ROW`, the others none where the reading had none. An instance read from its
    cloud's metrics alone (most of a large fleet) is held in 18 bytes a reading, not 46.

    `compact(..., freeze=True)` (the reading window's) moves the readings of each quarter
    hour that ended `FREEZE_AFTER` before the newest into a compressed chunk of its own
    (`store/frozen.py`), once they fill `FREEZE_BYTES`: they come before the bytearray's,
    in the order readings are taken in. `ripe` says when a compact would freeze a quarter
    hour it has not looked at yet."""

    __slots__ = ("chunks", "cut", "data", "kept", "newest", "oldest", "row")

    def __init__(self) -> None:
        self.data = bytearray()
        self.chunks: tuple[bytes, ...] = ()  # frozen runs of records, oldest first
        self.oldest = math.inf  # the earliest reading's start, epoch seconds
        self.kept = 0  # len(data) after the last compact
        self.row = _NARROW_ROW
        self.newest = -math.inf  # the latest reading's minute, epoch seconds
        self.cut = -math.inf  # the last freezing compact's cut: older quarters were looked at

    def crowded(self) -> bool:
        """Twice what the last compact kept: a cloud's settling span read again each cycle
        (CloudWatch's last 10 minutes) repeats minutes that are already held."""
        return len(self.data) > 2 * max(self.kept, 64 * self.row.size)

    def ripe(self) -> bool:
        """A quarter hour has ended `FREEZE_AFTER` before the newest reading since the last
        freezing compact: compacting now would freeze it. An instance whose readings come
        only through the window's write-through was compacted when `crowded` alone, and held
        ~32 minutes of readings unfrozen (at 10,000 simulated instances 25 MB of the
        window's 33), where 15-30 are never read again."""
        return _cut(self.newest) > self.cut

    def append(self, row: tuple[int, ...]) -> None:
        """Add one packed reading (`_packer`'s values)."""
        if self.row is _WIDE_ROW:
            self.data += _WIDE_ROW.pack(*row)
        elif _narrow(row):
            self.data += _NARROW_ROW.pack(*row[:NARROW])
        else:
            self._widen()
            self.data += _WIDE_ROW.pack(*row)
        if row[1] < self.oldest:
            self.oldest = row[1]
        if row[1] > self.newest:
            self.newest = row[1]

    def _widen(self) -> None:
        def widened(records: bytes | bytearray) -> bytes:
            wide, more = _WIDE_ROW.pack, (NO_PCT, NO_PCT, -1, -1, -1, -1)
            return b"".join(wide(*values, *more) for values in _NARROW_ROW.iter_unpack(records))

        self.data = bytearray(widened(self.data))
        self.chunks = tuple(frozen.freeze(widened(frozen.thaw(c)), frozen.head_of(c))
                            for c in self.chunks)
        self.kept = self.kept // _NARROW_ROW.size * _WIDE_ROW.size
        self.row = _WIDE_ROW

    def compact(self, start_s: float, *, freeze: bool = False) -> None:
        """Drop the readings that end before `start_s` and all but the last copy of each
        (GPU, minute); with `freeze`, freeze the old ones (the class's doc). A frozen chunk
        (a quarter hour's) is dropped once all its readings end before `start_s`: until
        then those that do are held (and counted), as the window holds what has left it a
        little while, never handed out."""
        size = self.row.size
        heads = [(c, h) for c in self.chunks if (h := frozen.head_of(c)).end > start_s]
        d = bytes(self.data)
        kept = self._kept(d, start_s)
        if heads and kept and min(t for _, t in kept) <= max(h.last for _, h in heads):
            # a reading that may repeat a frozen one (read again, or late): all compacted
            d = b"".join([*(frozen.thaw(c) for c, _ in heads), d])
            heads, kept = [], self._kept(d, start_s)
        chunks = tuple(c for c, _ in heads)
        if freeze and kept:
            # whole quarter hours that end a quarter hour before the newest reading
            cut = self.cut = _cut(max(t for _, t in kept))
            old = [(t, at) for (_, t), at in kept.items() if t < cut]
            if len(old) * size >= FREEZE_BYTES:
                quarters: dict[int, list[tuple[int, int]]] = {}
                for t, at in old:
                    quarters.setdefault(t // FREEZE_AFTER, []).append((t, at))
                chunks += tuple(self._frozen(d, quarters[q]) for q in sorted(quarters))
                kept = {k: at for k, at in kept.items() if k[1] >= cut}
        elif freeze:  # nothing left to freeze: not ripe again until a reading comes
            self.cut = _cut(self.newest)
        self.chunks = chunks
        self.data = bytearray(b"".join(d[at:at + size] for at in kept.values()))
        # a chunk goes when all of it has ended (above); the window compacts when its first
        # reading has left a while (`store.window._SLACK`), as it would an unfrozen one
        self.oldest = min([t for _, t in kept] + [frozen.head_of(c).first for c in chunks],
                          default=math.inf)
        self.kept = len(self.data)

    def _kept(self, d: bytes, start_s: float) -> dict[tuple[int, int], int]:
        """(gpu, minute) -> the offset of its last copy in `d`, of the records that end
        after `start_s`, in the order each (gpu, minute) first came."""
        size = self.row.size
        kept: dict[tuple[int, int], int] = {}
        at = 0
        for gpu, t, span, *_ in self.row.iter_unpack(d):
            if t >= start_s or t + span * 60 > start_s:
                kept[(gpu, t)] = at
            at += size
        return kept

    def _frozen(self, d: bytes, old: list[tuple[int, int]]) -> bytes:
        """A chunk of the records of `d` at `old`'s offsets ((minute, offset) each)."""
        size = self.row.size
        records = b"".join(d[at:at + size] for _, at in old)
        end = max(t + d[at + _SPAN_AT] * 60 for t, at in old)
        return frozen.freeze(records, frozen.Head(len(old), min(t for t, _ in old),
                                                  max(t for t, _ in old), end))

    def __len__(self) -> int:
        """Readings held."""
        return (len(self.data) // self.row.size
                + sum(frozen.head_of(c).records for c in self.chunks))

    def view(self, start_s: float, end_s: float) -> PackedReadings:
        """The readings that cover any minute of [start_s, end_s), as `covering` picks, the
        last copy of each (GPU, minute), still packed."""
        out: dict[tuple[int, int], tuple[int, ...]] = {}
        for chunk in self.chunks:
            head = frozen.head_of(chunk)
            if head.end > start_s and head.first < end_s:  # else none of it is in the span
                self._pick(out, frozen.thaw(chunk), start_s, end_s)
        self._pick(out, self.data, start_s, end_s)
        return PackedReadings(list(out.values()), self.row is _WIDE_ROW)

    def _pick(self, out: dict[tuple[int, int], tuple[int, ...]], records: bytes | bytearray,
              start_s: float, end_s: float) -> None:
        for values in self.row.iter_unpack(records):
            t, span = values[1], values[2]
            if span == 1:
                if start_s <= t < end_s:
                    out[(values[0], t)] = values
            elif t < end_s and t + span * 60 > start_s:
                out[(values[0], t)] = values

    def readings(self, start_s: float, end_s: float) -> list[WindowReading]:
        """`view` as a list of readings."""
        return list(self.view(start_s, end_s))


