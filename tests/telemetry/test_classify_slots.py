"""The classifier's slots, keyed by integer instants, are the slots `costguard.minutes.slots`
and a minute's wall minute give: the same readings counted, in the same order, with the same
peak and mean (`util_reading`: the max, else p95, else mean; the mean, else p95, else max),
for readings stamped at seconds, in other time zones (offsets with seconds too), re-sent,
spanning several minutes across the window's edges, with any of their figures missing, or
for GPUs the instance does not have."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.minutes import covering, slots
from costguard.model import GpuMinute, TelemetrySource
from costguard.telemetry.classify import _Reading, _readings, _signal, util_reading

START = datetime(2026, 11, 27, 12, 0, 30, tzinfo=UTC)


def _reference(minutes: list[GpuMinute], start: datetime, end: datetime,
               gpu_count: int) -> list[_Reading]:
    """The classifier's slots as they were computed with datetimes."""
    seen: dict[tuple[int, datetime], _Reading] = {}
    for m in minutes:
        if m.gpu_index >= gpu_count:
            continue
        value = util_reading(m)
        if value is None:
            continue
        reading: _Reading = (m.gpu_index, *value)
        if m.span_minutes == 1:
            seen[(m.gpu_index, m.minute.replace(second=0, microsecond=0))] = reading
        else:
            for minute in slots(m, start, end):
                seen[(m.gpu_index, minute)] = reading
    return list(seen.values())


zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                         timezone(timedelta(hours=-3)), timezone(timedelta(seconds=-37))])
# a minute's figures, each given or not: its peak and mean are the max, p95 or mean it has
figure = st.one_of(st.none(), st.floats(0, 100))
reading = st.builds(
    lambda gpu, offset_s, span, figures, zone: GpuMinute(
        provider="aws", instance_id="i-1", gpu_index=gpu, source=TelemetrySource.CLOUDWATCH,
        minute=(START + timedelta(seconds=offset_s)).astimezone(zone), span_minutes=span,
        util_mean=figures[0], util_p95=figures[1], util_max=figures[2]),
    st.integers(0, 4), st.one_of(st.integers(-600, 4000), st.floats(-600, 4000).map(
        lambda s: round(s, 6))), st.sampled_from([1, 1, 1, 5, 60]),
    st.tuples(figure, figure, figure), zones)


@settings(max_examples=300, deadline=None)
@given(st.lists(reading, max_size=40), st.integers(1, 70), st.integers(1, 4))
def test_integer_slots_equal_datetime_slots(minutes: list[GpuMinute], window_min: int,
                                            gpus: int) -> None:
    end = START + timedelta(minutes=window_min)
    inside = covering(minutes, START, end)
    assert _readings(_signal(inside, False), START, end, gpus) == _reference(
        inside, START, end, gpus)


def test_a_minute_is_the_wall_minute_of_its_own_zone() -> None:
    """Two stamps in one wall minute of a zone 37 s behind UTC fall in two UTC minutes: one
    slot, as `replace(second=0)` makes it (flooring the instant would make two)."""
    zone = timezone(timedelta(seconds=-37))
    base = datetime(2026, 11, 27, 12, 1, 0, tzinfo=zone)  # 12:01:37 UTC
    minutes = [GpuMinute(provider="aws", instance_id="i-1", minute=base + timedelta(seconds=s),
                         source=TelemetrySource.AGENT, util_mean=1.0, util_max=1.0)
               for s in (5, 40)]  # 12:01:42 and 12:02:17 UTC
    end = START + timedelta(minutes=10)
    got = _readings(_signal(minutes, False), START, end, 1)
    assert got == _reference(minutes, START, end, 1) and len(got) == 1
