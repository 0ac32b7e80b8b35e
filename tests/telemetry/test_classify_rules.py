"""The idle classifier's rules, one behaviour per test, each at the edge where a small slip in
the code would flip the verdict (found by mutation testing: see MUTATION.md).

Synthetic minutes keep each rule visible; the recorded H100 phases are in test_classify_h100.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costguard.model import GpuMinute, GpuSignal, TelemetrySource, Verdict
from costguard.telemetry.classify import classify, expected_slots, peaks

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def minute(at: int | datetime, gpu: int = 0, **values: Any) -> GpuMinute:
    when = START + timedelta(minutes=at) if isinstance(at, int) else at
    return GpuMinute(provider="aws", instance_id="i-1", gpu_index=gpu, minute=when,
                     source=TelemetrySource.AGENT, **values)


def sm(value: float) -> dict[str, float]:
    return {"sm_mean": value, "sm_p95": value, "sm_max": value}


def hour_of(gpus: int = 1, **values: Any) -> list[GpuMinute]:
    return [minute(m, g, **values) for m in range(60) for g in range(gpus)]


def judge(minutes: list[GpuMinute], gpus: int = 1, *, window: timedelta = HOUR,
          start: datetime = START, **kw: Any):  # type: ignore[no-untyped-def]
    return classify(minutes, window_start=start, window_end=start + window, gpu_count=gpus, **kw)


# -- the peak: one busy stretch is enough to mean someone used the GPU -------------------------

def test_a_gpu_busy_for_10_of_30_minutes_is_not_idle() -> None:
    minutes = [minute(m, **sm(60.0 if 10 <= m < 20 else 0.0)) for m in range(30)]
    c = judge(minutes, window=timedelta(minutes=30))
    assert c.verdict is Verdict.UNDERUSED or c.verdict is Verdict.ACTIVE
    assert c.verdict is not Verdict.IDLE


def test_one_gpu_busy_while_the_other_sleeps_keeps_the_instance_from_idle() -> None:
    busy_late = [minute(m, 1, **sm(80.0 if m == 59 else 0.0)) for m in range(60)]
    c = judge(hour_of(**sm(0.0)) + busy_late, gpus=2)
    assert c.verdict is Verdict.UNDERUSED
    assert c.evidence == ("SM activity 0.67% mean (peak 80.0%) over 60 min on 2 GPUs; "
                          "1 of 2 GPUs idle")


def test_a_peak_exactly_at_the_threshold_is_not_idle() -> None:
    assert judge(hour_of(**sm(5.0)), below=5.0).verdict is not Verdict.IDLE
    assert judge(hour_of(**sm(4.99)), below=5.0).verdict is Verdict.IDLE


def test_the_minute_peak_is_the_max_before_the_p95_before_the_mean() -> None:
    # a 2 s burst shows in the max only: the p95 and mean would hide it
    burst = judge(hour_of(sm_mean=0.5, sm_p95=1.0, sm_max=40.0))
    assert burst.verdict is not Verdict.IDLE
    # without a max, the p95 is the peak, not the mean (bursts hidden by the mean)
    no_max = judge(hour_of(sm_mean=1.0, sm_p95=30.0))
    assert no_max.verdict is not Verdict.IDLE
    # the same for util_gpu
    assert judge(hour_of(util_mean=1.0, util_p95=30.0), signal="util_gpu").verdict is not (
        Verdict.IDLE)
    # only a mean: the mean is all there is
    assert judge(hour_of(sm_mean=30.0)).verdict is Verdict.ACTIVE
    assert judge(hour_of(sm_mean=1.0)).verdict is Verdict.IDLE


def test_the_minute_mean_is_the_mean_before_the_p95_before_the_max() -> None:
    assert judge(hour_of(sm_mean=12.0, sm_p95=40.0, sm_max=90.0)).value == 12.0
    assert judge(hour_of(sm_p95=40.0, sm_max=90.0)).value == 40.0
    assert judge(hour_of(sm_max=90.0)).value == 90.0


def test_a_minute_with_only_a_max_still_counts_as_data() -> None:
    c = judge(hour_of(sm_max=0.0))
    assert (c.verdict, c.signal, c.coverage) == (Verdict.IDLE, GpuSignal.SM_ACTIVE, 1.0)


# -- coverage: no data is not idle --------------------------------------------------------------

def test_coverage_below_the_minimum_is_no_data_and_says_by_how_much() -> None:
    c = judge([minute(m, **sm(0.0)) for m in range(30)], signal="sm_active")
    assert (c.verdict, c.signal, c.coverage) == (Verdict.NO_DATA, GpuSignal.SM_ACTIVE, 0.5)
    assert c.evidence == ("SM activity covers 50% of 60 expected GPU-minutes over 60 min "
                          "(needs 80%): no data is not idle")


def test_coverage_exactly_at_the_minimum_is_enough() -> None:
    c = judge([minute(m, **sm(0.0)) for m in range(48)])  # 48 of 60 = 80%
    assert c.verdict is Verdict.IDLE and c.coverage == 0.8 and c.signal is GpuSignal.SM_ACTIVE


def test_a_gpu_silent_all_window_is_no_data_even_with_coverage_enough() -> None:
    c = judge(hour_of(**sm(0.0)), gpus=2, min_coverage=0.5)
    assert (c.verdict, c.signal) == (Verdict.NO_DATA, GpuSignal.SM_ACTIVE)
    assert c.evidence == "1 of 2 GPUs reported no SM activity over 60 min: no data is not idle"


def test_readings_for_a_gpu_index_the_instance_lacks_fill_no_slot() -> None:
    # GPU 1 on a 1-GPU instance is invented: its 60 minutes must not top up GPU 0's 30
    invented = [minute(m, 1, **sm(0.0)) for m in range(60)]
    real = [minute(m, 0, **sm(0.0)) for m in range(30)]
    for minutes in (real + invented, invented + real):  # and they stop nothing after them
        c = judge(minutes, signal="sm_active")
        assert c.verdict is Verdict.NO_DATA and c.coverage == 0.5


def test_a_minute_without_the_signal_is_skipped_not_the_end() -> None:
    minutes = [minute(0, util_mean=3.0), *hour_of(**sm(0.0))]
    assert judge(minutes, signal="sm_active").coverage == 1.0


def test_a_window_not_starting_on_a_minute_is_still_covered() -> None:
    start = START + timedelta(seconds=30)
    c = judge([*hour_of(**sm(0.0)), minute(60, **sm(0.0))], start=start)
    assert (c.verdict, c.coverage) == (Verdict.IDLE, 1.0)
    assert expected_slots(start, start + HOUR, 2) == 120


def test_a_window_shorter_than_a_minute_is_one_slot() -> None:
    c = judge([minute(0, **sm(0.0))], window=timedelta(seconds=30))
    assert (c.verdict, c.coverage) == (Verdict.IDLE, 1.0)
    assert c.evidence.endswith("over 30 s on 1 GPU")


def test_summaries_stamped_at_seconds_or_microseconds_fill_their_own_minute_once() -> None:
    stamps = [START + timedelta(minutes=m, seconds=17, microseconds=5) for m in range(60)]
    c = judge([minute(t, **sm(0.0)) for t in stamps])
    assert (c.verdict, c.coverage) == (Verdict.IDLE, 1.0)
    four_a_minute = [minute(START + timedelta(minutes=m // 4, seconds=m % 4 * 15), **sm(0.0))
                     for m in range(120)]
    assert judge(four_a_minute, signal="sm_active").coverage == 0.5
    same_second = [minute(START + timedelta(minutes=m // 2, seconds=17, microseconds=m % 2),
                          **sm(0.0)) for m in range(60)]
    assert judge(same_second, signal="sm_active").coverage == 0.5


def test_a_minute_and_a_longer_reading_over_it_fill_the_slot_once() -> None:
    minutes = [minute(m, **sm(0.0)) for m in range(30)] + [minute(0, span_minutes=5, **sm(0.0))]
    assert judge(minutes, signal="sm_active").coverage == 0.5


def test_a_resent_minute_replaces_the_earlier_copy() -> None:
    minutes = hour_of(**sm(70.0)) + hour_of(**sm(0.0))
    c = judge(minutes)
    assert (c.verdict, c.coverage) == (Verdict.IDLE, 1.0)


def test_a_cloud_reading_spanning_five_minutes_fills_each_of_them() -> None:
    five = [minute(m, span_minutes=5, **sm(0.0)) for m in range(0, 60, 5)]
    assert judge(five).coverage == 1.0
    # clipped at the window's edge: a reading that starts before the window counts inside only
    early = [minute(-5 + m, span_minutes=5, **sm(0.0)) for m in range(0, 60, 5)]
    assert judge(early).coverage == 55 / 60


def test_cloud_util_readings_spanning_minutes_are_clipped_to_the_window() -> None:
    # CloudWatch / Cloud Monitoring: util_gpu only, one point per period
    late = [minute(m, span_minutes=5, util_mean=0.0, util_max=0.0) for m in range(5, 65, 5)]
    c = judge(late)
    assert (c.signal, c.coverage, c.verdict) == (GpuSignal.UTIL_GPU, 55 / 60, Verdict.IDLE)


def test_naive_timestamps_are_read_as_utc() -> None:
    naive = [minute(START.replace(tzinfo=None) + timedelta(minutes=m), **sm(0.0))
             for m in range(60)]
    c = judge(naive, start=START.replace(tzinfo=None))
    assert (c.verdict, c.coverage) == (Verdict.IDLE, 1.0)
    assert c.window_start == START and c.window_start.tzinfo is not None


def test_minutes_outside_the_window_do_not_count() -> None:
    around = [minute(m, **sm(0.0)) for m in range(-30, 0)] + [
        minute(m, **sm(0.0)) for m in range(60, 90)]
    assert judge(around).verdict is Verdict.NO_DATA


# -- the signal: SM activity when it covers, else util_gpu -------------------------------------

def test_auto_takes_sm_activity_when_it_alone_covers_the_window() -> None:
    c = judge(hour_of(util_mean=12.0, util_max=30.0, **sm(0.0)))
    assert c.signal is GpuSignal.SM_ACTIVE and c.verdict is Verdict.IDLE
    assert "util_gpu 12.0% but SM activity 0.0%: tiny kernels, no real work" in c.evidence


def test_auto_falls_back_to_util_gpu_when_sm_activity_covers_too_little() -> None:
    minutes = [minute(m, util_mean=0.0, util_max=0.0, **(sm(0.0) if m < 40 else {}))
               for m in range(60)]
    c = judge(minutes)
    assert c.signal is GpuSignal.UTIL_GPU and c.verdict is Verdict.IDLE
    assert c.evidence.endswith(
        "no SM activity metric: fell back to util_gpu, which counts any kernel")


def test_asking_for_util_gpu_ignores_sm_activity() -> None:
    c = judge(hour_of(util_mean=50.0, util_max=60.0, **sm(0.0)), signal="util_gpu")
    assert (c.signal, c.verdict) == (GpuSignal.UTIL_GPU, Verdict.ACTIVE)


def test_asking_for_sm_activity_never_falls_back() -> None:
    minutes = [minute(m, util_mean=0.0, **(sm(0.0) if m < 40 else {})) for m in range(60)]
    c = judge(minutes, signal="sm_active")
    assert (c.signal, c.verdict) == (GpuSignal.SM_ACTIVE, Verdict.NO_DATA)


def test_the_tiny_kernel_caveat_needs_util_at_or_above_the_threshold() -> None:
    at = judge(hour_of(util_mean=5.0, **sm(0.0)))
    assert "tiny kernels" in at.evidence
    under = judge(hour_of(util_mean=4.9, **sm(0.0)))
    assert "tiny kernels" not in under.evidence
    busy = judge(hour_of(util_mean=50.0, **sm(30.0)))
    assert "tiny kernels" not in busy.evidence
    at_threshold = judge(hour_of(util_mean=50.0, **sm(5.0)))
    assert "tiny kernels" not in at_threshold.evidence


# -- underused and active -----------------------------------------------------------------------

def test_a_low_mean_with_bursts_is_underused_and_says_so() -> None:
    minutes = [minute(m, sm_mean=3.0, sm_max=60.0) for m in range(60)]
    c = judge(minutes)
    assert c.verdict is Verdict.UNDERUSED and c.value == 3.0
    assert c.evidence == ("SM activity 3.0% mean (peak 60.0%) over 60 min on 1 GPU; "
                          "below 10.0% mean: short bursts, mostly waiting")


def test_a_mean_at_twice_the_threshold_is_active() -> None:
    c = judge(hour_of(sm_mean=10.0, sm_max=60.0))
    assert c.verdict is Verdict.ACTIVE
    assert c.evidence == "SM activity 10.0% mean (peak 60.0%) over 60 min on 1 GPU"
    assert judge(hour_of(sm_mean=9.99, sm_max=60.0)).verdict is Verdict.UNDERUSED


def test_more_than_half_the_gpus_idle_is_underused_half_is_not() -> None:
    def fleet(idle: int, gpus: int = 4) -> list[GpuMinute]:
        return [minute(m, g, **sm(0.0 if g < idle else 90.0)) for m in range(60)
                for g in range(gpus)]

    three = judge(fleet(3), gpus=4)
    assert three.verdict is Verdict.UNDERUSED and "3 of 4 GPUs idle" in three.evidence
    assert judge(fleet(2), gpus=4).verdict is Verdict.ACTIVE  # mean 45%, half idle


def test_the_mean_is_over_every_gpu_minute() -> None:
    minutes = [minute(m, g, sm_mean=float(10 * g), sm_max=90.0) for m in range(60)
               for g in range(3)]
    c = judge(minutes, gpus=3)
    assert c.value == 10.0 and c.verdict is Verdict.ACTIVE
    assert "on 3 GPUs" in c.evidence


def test_an_idle_verdict_reports_the_peak_over_every_gpu() -> None:
    minutes = [minute(m, g, sm_mean=0.1, sm_max=0.5 + g) for m in range(60) for g in range(2)]
    c = judge(minutes, gpus=2)
    assert c.verdict is Verdict.IDLE and c.value == 1.5
    assert c.evidence == "SM activity peaked at 1.5% over 60 min on 2 GPUs"


def test_the_value_is_rounded_to_three_places() -> None:
    assert judge(hour_of(sm_mean=12.34567, sm_max=50.0)).value == 12.346


# -- who holds the memory ------------------------------------------------------------------------

def test_evidence_names_the_process_holding_the_most_memory() -> None:
    minutes = [minute(m, **sm(0.0), top_process_pid=100 + m % 3,
                      top_process_bytes=(m % 3 + 1) * 10**9, mem_used_bytes=2 * 10**9 + m)
               for m in range(60)]
    c = judge(minutes)
    assert c.evidence.startswith("pid 102 holds 3.0 GB (2.0 GB used on the GPU); ")


def test_a_process_without_bytes_is_not_named() -> None:
    for size in (0, None):
        minutes = hour_of(**sm(0.0), top_process_pid=7, top_process_bytes=size,
                          mem_used_bytes=5 * 10**8, process_count=1)
        assert judge(minutes).evidence.startswith("500 MB memory held; ")


def test_a_process_is_named_even_where_the_gpus_memory_was_not_read() -> None:
    minutes = hour_of(**sm(0.0), top_process_pid=7, top_process_bytes=3 * 10**9)
    assert judge(minutes).evidence.startswith("pid 7 holds 3.0 GB; SM activity")


def test_no_process_on_the_gpu_is_said_with_the_drivers_share() -> None:
    held = judge(hour_of(**sm(0.0), process_count=0, mem_used_bytes=600 * 10**6))
    assert held.evidence.startswith("no process on the GPU (600 MB used by the driver); ")
    bare = judge(hour_of(**sm(0.0), process_count=0))
    assert bare.evidence.startswith("no process on the GPU; ")


def test_memory_alone_is_said_as_held_and_nothing_at_all_says_nothing() -> None:
    busy = [minute(m, **sm(0.0), process_count=1 if m == 5 else 0,
                   mem_used_bytes=3 * 10**9) for m in range(60)]
    assert judge(busy).evidence.startswith("3.0 GB memory held; ")
    assert judge(hour_of(**sm(0.0))).evidence == "SM activity peaked at 0.0% over 60 min on 1 GPU"


# -- how numbers and spans read ------------------------------------------------------------------

@pytest.mark.parametrize(("window", "text"), [
    (timedelta(seconds=119), "119 s"), (timedelta(minutes=2), "2 min"),
    (timedelta(minutes=119), "119 min"), (timedelta(hours=2), "2.0 h"),
    (timedelta(hours=7, minutes=30), "7.5 h"), (timedelta(hours=2, minutes=21), "2.4 h"),
])
def test_the_window_reads_in_seconds_minutes_or_hours(window: timedelta, text: str) -> None:
    minutes = [minute(m, **sm(0.0)) for m in range(int(window.total_seconds() // 60) + 1)]
    assert judge(minutes, window=window).evidence.endswith(f"over {text} on 1 GPU")


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0.0%"), (0.25, "0.25%"), (0.999, "1.00%"), (1.0, "1.0%"), (3.14159, "3.1%")])
def test_percentages_keep_two_places_below_one(value: float, text: str) -> None:
    assert judge(hour_of(**sm(value))).evidence == (
        f"SM activity peaked at {text} over 60 min on 1 GPU")


def test_memory_reads_in_megabytes_below_a_gigabyte() -> None:
    under = judge(hour_of(**sm(0.0), mem_used_bytes=999_999_999))
    assert under.evidence.startswith("1000 MB memory held")
    at = judge(hour_of(**sm(0.0), mem_used_bytes=10**9))
    assert at.evidence.startswith("1.0 GB memory held")
    # rounded to the nearest tenth of a GB, the nearest MB
    tenth = judge(hour_of(**sm(0.0), mem_used_bytes=1_350_000_001))
    assert tenth.evidence.startswith("1.4 GB memory held")
    mb = judge(hour_of(**sm(0.0), mem_used_bytes=1_500_001))
    assert mb.evidence.startswith("2 MB memory held")


# -- refusals -----------------------------------------------------------------------------------

def test_a_negative_gpu_count_or_unknown_signal_is_refused() -> None:
    with pytest.raises(ValueError, match="gpu_count must be >= 0, got -1"):
        judge([], gpus=-1)
    with pytest.raises(ValueError, match="signal must be auto, sm_active or util_gpu, got 'x'"):
        judge([], signal="x")


def test_an_instance_without_gpus_is_no_data() -> None:
    c = judge(hour_of(**sm(0.0)), gpus=0)
    assert (c.verdict, c.signal, c.coverage) == (Verdict.NO_DATA, None, 0.0)
    assert c.evidence == "instance has no GPUs to classify"


def test_peaks_lists_each_minutes_peak_of_each_signal_where_it_has_one() -> None:
    minutes = [minute(0, util_max=30.0, util_mean=1.0, sm_p95=4.0, sm_mean=2.0),
               minute(1, util_mean=7.0), minute(2, sm_mean=3.0), minute(3)]
    assert peaks(minutes) == ([30.0, 7.0], [4.0, 3.0])
