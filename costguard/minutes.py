"""GPU-minutes as the classifier and the policies read them: what a reading must offer
(`Reading`: a `GpuMinute`, or the reading window's packed copy), readings held packed and read
where they lie (`ReadingsView`), and the minutes a reading covers (`covering`, `slots`,
`per_minute`, `aware`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, cast

from costguard.clock import utc
from costguard.model import MAX_SPAN_MINUTES, GpuMinute, TelemetrySource


class Reading(Protocol):
    """What the idle classifier reads of a GPU-minute, and who measured it: a `GpuMinute`,
    or the reading window's compact copy of one (store/packed_view.py `WindowReading`), which
    keeps these fields only."""

    @property
    def gpu_index(self) -> int: ...
    @property
    def minute(self) -> datetime: ...
    @property
    def span_minutes(self) -> int: ...
    @property
    def util_mean(self) -> float | None: ...
    @property
    def util_p95(self) -> float | None: ...
    @property
    def util_max(self) -> float | None: ...
    @property
    def sm_mean(self) -> float | None: ...
    @property
    def sm_p95(self) -> float | None: ...
    @property
    def sm_max(self) -> float | None: ...
    @property
    def mem_used_bytes(self) -> int | None: ...
    @property
    def process_count(self) -> int | None: ...
    @property
    def top_process_pid(self) -> int | None: ...
    @property
    def top_process_bytes(self) -> int | None: ...
    @property
    def source(self) -> TelemetrySource: ...


R = TypeVar("R", bound=Reading)


def aware(m: R) -> R:
    """`m` with its minute as timezone-aware UTC (a naive minute is read as UTC). Only a
    `GpuMinute` can be naive (built by hand, in tests): the window's readings never are."""
    if m.minute.tzinfo is not None:
        return m
    if isinstance(m, GpuMinute):
        return cast(R, m.model_copy(update={"minute": utc(m.minute)}))
    raise TypeError(f"a {type(m).__name__} with a naive minute: {m.minute!r}")


_MINUTE = timedelta(minutes=1)
_STEPS = [k * _MINUTE for k in range(MAX_SPAN_MINUTES)]


# one signal of a reading, as the classifier reads it: GPU, start (microseconds since the
# epoch; a one-minute reading's wall minute, its stamp less its seconds), span in minutes,
# and the signal's max, p95 and mean (None where not measured)
SignalRecord = tuple[int, int, int, float | None, float | None, float | None]


_R_co = TypeVar("_R_co", bound=Reading, covariant=True)


class ReadingsView(Sequence[_R_co]):
    """Readings held packed (store/packed_view.py `PackedReadings`: the reading window, accrual's
    reads of the store), which the idle verdict reads without an object per reading: the
    window narrowed to a span or a source, and one signal's figures, reading by reading.
    Indexing or iterating builds each reading (for any other consumer)."""

    __slots__ = ()

    @abstractmethod
    def covering(self, start: datetime, end: datetime) -> ReadingsView[_R_co]:
        """`covering(self, start, end)`."""

    @abstractmethod
    def only(self, source: TelemetrySource) -> ReadingsView[_R_co]:
        """The readings `source` measured."""

    @abstractmethod
    def has(self, source: TelemetrySource) -> bool:
        """Whether any reading was measured by `source`."""

    @abstractmethod
    def signal(self, sm: bool) -> Iterator[SignalRecord]:
        """SM activity's figures (`sm`) or utilization's, reading by reading, in order."""

    @abstractmethod
    def column(self, field: str) -> list[Any]:
        """One field of every reading, in order."""


def from_source(minutes: Sequence[R], source: TelemetrySource) -> Sequence[R]:
    """The readings `source` measured."""
    if isinstance(minutes, ReadingsView):
        return cast(Sequence[R], minutes.only(source))
    return [m for m in minutes if m.source is source]


def has_source(minutes: Sequence[Reading], source: TelemetrySource) -> bool:
    """Whether any of `minutes` was measured by `source`."""
    if isinstance(minutes, ReadingsView):
        return minutes.has(source)
    return any(m.source is source for m in minutes)


def covering(minutes: Iterable[R], start: datetime, end: datetime) -> Sequence[R]:
    """The readings that cover any minute of [start, end): a one-minute reading by its
    start, a longer one when its span overlaps."""
    if isinstance(minutes, ReadingsView):
        return cast(Sequence[R], minutes.covering(start, end))
    out = []
    for m in minutes:
        if m.span_minutes == 1:
            if start <= m.minute < end:
                out.append(m)
        elif m.minute < end and m.minute + m.span_minutes * _MINUTE > start:
            out.append(m)
    return out


def per_minute(m: GpuMinute) -> list[GpuMinute]:
    """`m` as one-minute readings (for code that steps minute by minute)."""
    if m.span_minutes == 1:
        return [m]
    return [m.model_copy(update={"minute": m.minute + k * _MINUTE, "span_minutes": 1})
            for k in range(m.span_minutes)]


def slots(m: Reading, start: datetime, end: datetime) -> list[datetime]:
    """The minutes of [start, end) that `m` stands for."""
    first = m.minute
    if m.span_minutes == 1:
        return [first] if start <= first < end else []
    steps = _STEPS[:m.span_minutes]
    if start <= first and first + steps[-1] < end:  # wholly inside
        return [first + step for step in steps]
    return [t for t in (first + step for step in steps) if start <= t < end]
