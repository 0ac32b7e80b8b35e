"""The reading window's packed records read back: `PackedReadings`, one instance's records
as a sequence of `WindowReading`s (the idle verdict reads the records as they are), and the
record layout both sides share: which field sits where (`PACKED`), the source codes, the
mark for a missing percentage. Packing, and one instance's records held: store/packed.py."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, overload

from costguard.minutes import ReadingsView, SignalRecord
from costguard.model import PERCENT_GRID, TelemetrySource


class WindowReading(NamedTuple):
    """The window's copy of a stored GPU-minute: the fields the idle classifier reads
    (`costguard.minutes.Reading`) and who measured it, built when asked for. A `GpuMinute`
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


# a packed reading: gpu, minute, span, source (its index in `SOURCES`), the four percentages a
# cloud's metrics give (the mean and maximum of utilisation, CloudWatch's and Cloud
# Monitoring's, and of SM activity, Cloud Monitoring's), then what only the agent measures:
# two percentiles and four integers
PACKED = ("gpu_index", "minute", "span_minutes", "source",
           "util_mean", "util_max", "sm_mean", "sm_max",
           "util_p95", "sm_p95",
           "mem_used_bytes", "process_count", "top_process_pid", "top_process_bytes")
SOURCES = tuple(TelemetrySource)
# a source's code, by member or by the text the store returns (a StrEnum equals its value)
SOURCE_CODE: dict[str, int] = {str(src): n for n, src in enumerate(SOURCES)}
assert sorted(PACKED) == sorted(WindowReading._fields)
make_tuple = tuple.__new__  # WindowReading._make without its length check
# a minute's datetime, shared by every instance's readings of that minute (building one per
# reading was a third of handing them out); cleared when it holds more than four days of
# minutes (a window is an hour or a few; what it keeps beyond that is never asked again)
_WHEN: dict[int, datetime] = {}
WHEN_MAX = 4 * 24 * 60
NO_PCT = 0xFFFF  # a percentage's mark for none (percentages are hundredths of a point)
NARROW = 8  # values of a narrow record: gpu, minute, span, source, a cloud's four percentages

# where each field sits in a packed record (narrow records end after the first 8)
_AT = {name: n for n, name in enumerate(PACKED)}
_PERCENT = frozenset(PACKED[4:10])
# a signal's max, p95 and mean in a packed record
_SM_AT = (_AT["sm_max"], _AT["sm_p95"], _AT["sm_mean"])
_UTIL_AT = (_AT["util_max"], _AT["util_p95"], _AT["util_mean"])


def _when(t: int) -> datetime:
    """Epoch seconds as an aware datetime, shared by every reading of that minute."""
    minute = _WHEN.get(t)
    if minute is None:
        if len(_WHEN) > WHEN_MAX:
            _WHEN.clear()
        minute = _WHEN[t] = datetime.fromtimestamp(t, UTC)
    return minute


class PackedReadings(ReadingsView[WindowReading]):
    """Packed records of one instance (`Rows.view`) as readings: the idle verdict reads
    them as they are (`ReadingsView`), anything else gets a `WindowReading` per record."""

    __slots__ = ("_records", "_wide")

    def __init__(self, records: list[tuple[int, ...]], wide: bool) -> None:
        self._records = records
        self._wide = wide

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> WindowReading: ...
    @overload
    def __getitem__(self, index: slice) -> list[WindowReading]: ...

    def __getitem__(self, index: int | slice) -> WindowReading | list[WindowReading]:
        if isinstance(index, slice):
            return [self._reading(r) for r in self._records[index]]
        return self._reading(self._records[index])

    def __iter__(self) -> Iterator[WindowReading]:
        return map(self._reading, self._records)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same readings in the same order (a list, say)."""
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # a sequence of readings, not a value

    def __repr__(self) -> str:
        return f"PackedReadings({list(self)!r})"

    def _reading(self, values: tuple[int, ...]) -> WindowReading:
        no, grid = NO_PCT, PERCENT_GRID
        if self._wide:
            gpu, t, span, s, a, b, c, g, e, f, h, k, m, n = values
        else:
            gpu, t, span, s, a, b, c, g = values
            e = f = no
            h = k = m = n = -1
        # packed util mean, max, SM mean, SM max, util p95, SM p95: WindowReading's order
        return make_tuple(WindowReading, (
            gpu, _when(t), span,
            None if a == no else a / grid, None if e == no else e / grid,
            None if b == no else b / grid, None if c == no else c / grid,
            None if f == no else f / grid, None if g == no else g / grid,
            None if h < 0 else h, None if k < 0 else k,
            None if m < 0 else m, None if n < 0 else n, SOURCES[s]))

    def covering(self, start: datetime, end: datetime) -> PackedReadings:
        start_s, end_s = start.timestamp(), end.timestamp()
        return PackedReadings(
            [r for r in self._records
             if (start_s <= r[1] < end_s if r[2] == 1
                 else r[1] < end_s and r[1] + r[2] * 60 > start_s)],
            self._wide)

    def only(self, source: TelemetrySource) -> PackedReadings:
        code = SOURCE_CODE[source]
        return PackedReadings([r for r in self._records if r[3] == code], self._wide)

    def has(self, source: TelemetrySource) -> bool:
        code = SOURCE_CODE[source]
        return any(r[3] == code for r in self._records)

    def signal(self, sm: bool) -> Iterator[SignalRecord]:
        top, p95, mean = _SM_AT if sm else _UTIL_AT
        no, grid = NO_PCT, PERCENT_GRID
        wide = self._wide
        for r in self._records:
            a, c = r[top], r[mean]
            b = r[p95] if wide else no
            if a == b == c == no:  # no figure of this signal: it fills no slot
                continue
            t, span = r[1], r[2]
            # a one-minute reading from its wall minute (UTC: the window keeps no zone)
            yield (r[0], (t - t % 60 if span == 1 else t) * 1_000_000, span,
                   None if a == no else a / grid, None if b == no else b / grid,
                   None if c == no else c / grid)

    def column(self, field: str) -> list[Any]:
        at = _AT[field]
        if not self._wide and at >= NARROW:
            return [None] * len(self._records)
        if field in _PERCENT:
            no, grid = NO_PCT, PERCENT_GRID
            return [None if r[at] == no else r[at] / grid for r in self._records]
        if at >= NARROW:  # the agent's integers: -1 for none
            return [None if r[at] < 0 else r[at] for r in self._records]
        if field == "minute":
            return [_when(r[at]) for r in self._records]
        if field == "source":
            return [SOURCES[r[at]] for r in self._records]
        return [r[at] for r in self._records]


NONE_HELD = PackedReadings([], False)  # an instance of which nothing is held
