"""Readings held packed are judged where they lie (`PackedReadings`): the idle verdict read
from the packed records equals the verdict read from the same readings one object at a time,
and the view's narrowing (a span, a source) and columns equal the same done on the objects.
Any cloud's or agent's readings, narrow and wide records, spans across the window's edges,
re-sent minutes, GPUs the instance does not have, every signal choice and threshold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.model import (
    GpuMinute,
    ReadingsView,
    TelemetrySource,
    covering,
    from_source,
    has_source,
)
from costguard.store.packed import PACKED, Rows, pack_minute
from costguard.telemetry.classify import classify

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SOURCES = list(TelemetrySource)

pct = st.one_of(st.none(), st.floats(0, 100), st.sampled_from([0.0, 4.99, 5.0, 9.99, 10.0]))
count = st.one_of(st.none(), st.integers(0, 2**31 - 1))
size = st.one_of(st.none(), st.integers(0, 2**63 - 1))


@st.composite
def readings(draw: st.DrawFn) -> GpuMinute:
    agent = draw(st.booleans())
    fields = {
        "provider": "aws", "instance_id": "i-1", "gpu_index": draw(st.integers(0, 3)),
        "minute": NOW - timedelta(minutes=draw(st.integers(0, 150)),
                                  seconds=draw(st.sampled_from([0, 0, 17]))),
        "source": draw(st.sampled_from(SOURCES)),
        "span_minutes": draw(st.sampled_from([1, 1, 1, 5, 60])),
        "util_mean": draw(pct), "util_max": draw(pct), "sm_mean": draw(pct),
        "sm_max": draw(pct),
    }
    if agent:  # what only the agent measures widens the record
        fields.update(util_p95=draw(pct), sm_p95=draw(pct), mem_used_bytes=draw(size),
                      process_count=draw(count), top_process_pid=draw(count),
                      top_process_bytes=draw(size))
    return GpuMinute(**fields)


def _view(minutes: list[GpuMinute], start: datetime, end: datetime) -> ReadingsView:
    rows = Rows()
    for m in minutes:
        rows.append(pack_minute(m))
    return rows.view(start.timestamp(), end.timestamp())


@settings(max_examples=400, deadline=None)
@given(st.lists(readings(), max_size=60), st.integers(1, 120), st.integers(0, 30),
       st.integers(0, 4), st.sampled_from(["auto", "sm_active", "util_gpu"]),
       st.sampled_from([0.5, 5.0, 10.0, 50.0]), st.sampled_from([0.0, 0.5, 0.8, 1.0]))
def test_the_verdict_read_packed_is_the_verdict_read_one_reading_at_a_time(
        minutes: list[GpuMinute], window_min: int, end_ago: int, gpus: int, signal: str,
        below: float, min_coverage: float) -> None:
    end = NOW - timedelta(minutes=end_ago, seconds=30 * (end_ago % 2))
    start = end - timedelta(minutes=window_min)
    held = _view(minutes, end - timedelta(hours=3), end + timedelta(hours=1))
    objects = list(held)  # the same readings, one WindowReading each
    for source in (None, TelemetrySource.AGENT):
        view = held if source is None else from_source(held, source)
        each = objects if source is None else from_source(objects, source)
        assert list(view) == list(each)
        packed = classify(covering(view, start, end), window_start=start, window_end=end,
                          gpu_count=gpus, signal=signal,  # type: ignore[arg-type]
                          below=below, min_coverage=min_coverage)
        one_by_one = classify(covering(each, start, end), window_start=start,
                              window_end=end, gpu_count=gpus,
                              signal=signal,  # type: ignore[arg-type]
                              below=below, min_coverage=min_coverage)
        assert packed == one_by_one


@settings(max_examples=200, deadline=None)
@given(st.lists(readings(), max_size=40), st.integers(0, 150), st.integers(1, 150))
def test_the_views_narrowing_and_columns_are_the_readings(
        minutes: list[GpuMinute], start_ago: int, length: int) -> None:
    held = _view(minutes, NOW - timedelta(hours=4), NOW + timedelta(hours=1))
    objects = list(held)
    start = NOW - timedelta(minutes=start_ago, seconds=20)
    end = start + timedelta(minutes=length)
    assert list(covering(held, start, end)) == covering(objects, start, end)
    for source in SOURCES:
        assert list(held.only(source)) == [m for m in objects if m.source is source]
        assert has_source(held, source) == any(m.source is source for m in objects)
    for field in PACKED:
        assert held.column(field) == [getattr(m, field) for m in objects]
    assert held == objects and held[1:3] == objects[1:3]
    if objects:
        assert held[-1] == objects[-1]


def test_a_view_is_the_window_held_last_copy_first_place() -> None:
    """A re-sent minute is held once, its last copy, where its first copy stood: the order
    the one-by-one readings had (the classifier's slots and sums follow it)."""
    first = GpuMinute(provider="aws", instance_id="i-1", minute=NOW - timedelta(minutes=3),
                      source=TelemetrySource.AGENT, util_mean=1.0)
    other = first.model_copy(update={"minute": NOW - timedelta(minutes=2)})
    again = first.model_copy(update={"util_mean": 2.0})
    view = _view([first, other, again], NOW - timedelta(hours=1), NOW)
    assert [(m.minute, m.util_mean) for m in view] == [
        (first.minute, 2.0), (other.minute, 1.0)]
