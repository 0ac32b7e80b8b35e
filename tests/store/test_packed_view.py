"""Readings held packed (`PackedReadings`) narrowed to a span or a source, and read a field
at a time, are the same readings built one object per record (the idle verdict on them:
tests/telemetry/test_classify_packed.py)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.minutes import covering, has_source
from costguard.model import GpuMinute, TelemetrySource
from costguard.store.packed_view import PACKED
from tests.packed_readings import NOW, SOURCES, packed, readings


@settings(max_examples=200, deadline=None)
@given(st.lists(readings(), max_size=40), st.integers(0, 150), st.integers(1, 150))
def test_the_views_narrowing_and_columns_are_the_readings(
        minutes: list[GpuMinute], start_ago: int, length: int) -> None:
    held = packed(minutes, NOW - timedelta(hours=4), NOW + timedelta(hours=1))
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
    view = packed([first, other, again], NOW - timedelta(hours=1), NOW)
    assert [(m.minute, m.util_mean) for m in view] == [
        (first.minute, 2.0), (other.minute, 1.0)]
