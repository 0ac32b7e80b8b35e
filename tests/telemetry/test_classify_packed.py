"""The idle verdict on readings held packed (`PackedReadings`: the window's, accrual's, a
backtest's) is read from the records where they lie, and equals the verdict read from the
same readings one object at a time: any cloud's or agent's readings, narrow and wide
records, spans across the window's edges, re-sent minutes, GPUs the instance does not have,
every signal choice, threshold and coverage, the agent's readings alone or all."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.minutes import covering, from_source
from costguard.model import GpuMinute, TelemetrySource, Verdict
from costguard.telemetry.classify import classify, sm_reading, util_reading
from tests.packed_readings import NOW, packed, readings


@settings(max_examples=400, deadline=None)
@given(st.lists(readings(), max_size=60), st.integers(1, 120), st.integers(0, 30),
       st.integers(0, 4), st.sampled_from(["auto", "sm_active", "util_gpu"]),
       st.sampled_from([0.5, 5.0, 10.0, 50.0]), st.sampled_from([0.0, 0.5, 0.8, 1.0]))
def test_the_verdict_read_packed_is_the_verdict_read_one_reading_at_a_time(
        minutes: list[GpuMinute], window_min: int, end_ago: int, gpus: int, signal: str,
        below: float, min_coverage: float) -> None:
    end = NOW - timedelta(minutes=end_ago, seconds=30 * (end_ago % 2))
    start = end - timedelta(minutes=window_min)
    held = packed(minutes, end - timedelta(hours=3), end + timedelta(hours=1))
    objects = list(held)  # the same readings, one WindowReading each
    for source in (None, TelemetrySource.AGENT):
        view = held if source is None else from_source(held, source)
        each = objects if source is None else from_source(objects, source)
        assert list(view) == list(each)
        from_records = classify(covering(view, start, end), window_start=start,
                                window_end=end, gpu_count=gpus,
                                signal=signal,  # type: ignore[arg-type]
                                below=below, min_coverage=min_coverage)
        one_by_one = classify(covering(each, start, end), window_start=start,
                              window_end=end, gpu_count=gpus,
                              signal=signal,  # type: ignore[arg-type]
                              below=below, min_coverage=min_coverage)
        assert from_records == one_by_one


def test_no_slot_at_all_is_no_data_even_with_no_coverage_asked() -> None:
    """`min_coverage: 0` lets an empty window past the coverage rule: every GPU is still
    silent, and a silent GPU is no data, packed or not."""
    start = NOW - timedelta(hours=1)
    nothing = packed([], start, NOW)
    for minutes in (nothing, []):
        got = classify(minutes, window_start=start, window_end=NOW, gpu_count=2,
                       min_coverage=0.0)
        assert got.verdict is Verdict.NO_DATA
        assert got.evidence.startswith("2 of 2 GPUs reported no")


def test_a_minutes_peak_is_its_max_else_its_p95_else_its_mean() -> None:
    m = GpuMinute(provider="aws", instance_id="i-1", minute=NOW, source=TelemetrySource.AGENT,
                  util_max=9.0, util_p95=6.0, util_mean=1.0, sm_max=8.0, sm_p95=5.0,
                  sm_mean=2.0)
    assert util_reading(m) == (9.0, 1.0) and sm_reading(m) == (8.0, 2.0)
    no_max = m.model_copy(update={"util_max": None, "sm_max": None})
    assert util_reading(no_max) == (6.0, 1.0) and sm_reading(no_max) == (5.0, 2.0)
    only_p95 = no_max.model_copy(update={"util_mean": None, "sm_mean": None})
    assert util_reading(only_p95) == (6.0, 6.0) and sm_reading(only_p95) == (5.0, 5.0)
