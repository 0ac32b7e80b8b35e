"""The idle classifier on the real H100 recording: each phase gets the verdict a person
would give, with SM activity where GPM exists and util_gpu (honestly reported) where not."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from random import Random

import pytest

from costguard.model import GpuMinute, GpuSignal, TelemetrySource, Verdict
from costguard.telemetry.classify import classify
from costguard.telemetry.summary import phase_profiles, sim_minute, summarize
from costguard.telemetry.trace import NvmlSample

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def phase_minute(samples: list[NvmlSample], *, gpm: bool = True, at: datetime = START) -> GpuMinute:
    if not gpm:
        samples = [replace(s, gpm=None) for s in samples]
    return summarize(samples, provider="aws", instance_id="i-h100", gpu_index=0, minute=at)


def verdict_of(phase: str, *, gpm: bool = True, signal: str = "auto"):  # type: ignore[no-untyped-def]
    minute = phase_minute(phase_profiles()[phase], gpm=gpm)
    return classify(
        [minute],
        window_start=START,
        window_end=START + timedelta(minutes=1),
        gpu_count=1,
        signal=signal,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("no_process", Verdict.IDLE),
        ("busy_matmul", Verdict.ACTIVE),
        ("held_memory_idle", Verdict.IDLE),
        ("bursty_2s_of_10s", Verdict.ACTIVE),
        ("tiny_kernels", Verdict.IDLE),
        ("after_exit", Verdict.IDLE),
    ],
)
def test_each_recorded_phase_gets_the_verdict_a_person_would_give(phase: str, expected: Verdict):
    result = verdict_of(phase)
    assert result.verdict is expected, result.evidence
    assert result.signal is GpuSignal.SM_ACTIVE
    assert result.coverage == 1.0


def test_held_memory_idle_names_the_process_and_the_memory_it_holds():
    result = verdict_of("held_memory_idle")
    assert result.verdict is Verdict.IDLE
    # the recorded worker was pid 456 holding 20.8 GB of the 21.3 GB in use
    assert "pid 456 holds 20.8 GB" in result.evidence
    assert "21.3 GB" in result.evidence
    assert "SM activity" in result.evidence


def test_tiny_kernels_are_idle_by_sm_activity_although_util_gpu_reads_twelve_percent():
    result = verdict_of("tiny_kernels")
    assert result.verdict is Verdict.IDLE
    assert result.value is not None and result.value < 1.0
    assert "util_gpu 12.2% but SM activity" in result.evidence
    assert "tiny kernels" in result.evidence


def test_a_single_burst_prevents_idle_even_when_the_mean_is_low():
    # 2 s of matmul in a minute that is otherwise the held-memory idle
    quiet = phase_profiles()["held_memory_idle"][:116]
    burst = [s for s in phase_profiles()["busy_matmul"] if s.util_gpu == 100][:4]
    result = classify(
        [phase_minute(quiet + burst)],
        window_start=START,
        window_end=START + timedelta(minutes=1),
        gpu_count=1,
    )
    assert result.verdict is not Verdict.IDLE, result.evidence


def test_without_gpm_the_util_gpu_fallback_is_used_and_said_so():
    for phase in ("no_process", "busy_matmul", "held_memory_idle", "bursty_2s_of_10s"):
        result = verdict_of(phase, gpm=False)
        assert result.signal is GpuSignal.UTIL_GPU
        assert "fell back to util_gpu" in result.evidence
    assert verdict_of("busy_matmul", gpm=False).verdict is Verdict.ACTIVE
    assert verdict_of("bursty_2s_of_10s", gpm=False).verdict is Verdict.ACTIVE
    assert verdict_of("held_memory_idle", gpm=False).verdict is Verdict.IDLE
    assert verdict_of("no_process", gpm=False).verdict is Verdict.IDLE


def test_without_gpm_tiny_kernels_read_as_active_which_is_why_sm_activity_is_preferred():
    result = verdict_of("tiny_kernels", gpm=False)
    assert result.signal is GpuSignal.UTIL_GPU
    assert result.verdict is Verdict.ACTIVE  # util_gpu ~12%: the signal cannot tell
    assert result.value == pytest.approx(12.18, abs=0.05)


def test_asking_for_sm_activity_where_there_is_none_is_no_data_not_idle():
    result = verdict_of("no_process", gpm=False, signal="sm_active")
    assert result.verdict is Verdict.NO_DATA
    assert result.signal is GpuSignal.SM_ACTIVE


def test_low_coverage_is_no_data():
    minutes = [
        phase_minute(phase_profiles()["no_process"], at=START + timedelta(minutes=k))
        for k in range(30)
    ]
    window = {"window_start": START, "window_end": START + timedelta(minutes=45), "gpu_count": 1}
    result = classify(minutes, **window)  # type: ignore[arg-type]
    assert result.verdict is Verdict.NO_DATA
    assert result.coverage == pytest.approx(30 / 45)
    assert "no data is not idle" in result.evidence
    assert classify(minutes + minutes[:6], **window).verdict is Verdict.NO_DATA  # type: ignore[arg-type]
    more = [
        phase_minute(phase_profiles()["no_process"], at=START + timedelta(minutes=k))
        for k in range(30, 36)
    ]
    assert classify(minutes + more, **window).verdict is Verdict.IDLE  # type: ignore[arg-type]


def test_a_silent_gpu_blocks_idle_even_with_enough_coverage():
    idle = phase_profiles()["no_process"]
    minutes = [
        phase_minute(idle, at=START + timedelta(minutes=k)).model_copy(update={"gpu_index": g})
        for k in range(10)
        for g in range(7)
    ]
    result = classify(
        minutes, window_start=START, window_end=START + timedelta(minutes=10), gpu_count=8
    )
    assert result.coverage == pytest.approx(7 / 8)
    assert result.verdict is Verdict.NO_DATA
    assert "1 of 8 GPUs reported no" in result.evidence


def test_one_busy_gpu_of_eight_is_underused_not_idle():
    rng = Random(7)
    minutes = [
        sim_minute(
            "busy" if g == 0 else "no_process", "aws", "i-8", g, START + timedelta(minutes=k), rng
        )
        for k in range(10)
        for g in range(8)
    ]
    result = classify(
        minutes, window_start=START, window_end=START + timedelta(minutes=10), gpu_count=8
    )
    assert result.verdict is Verdict.UNDERUSED
    assert "7 of 8 GPUs idle" in result.evidence


def test_minutes_outside_the_window_and_repeats_do_not_count():
    idle = phase_profiles()["no_process"]
    inside = phase_minute(idle, at=START)
    before = phase_minute(idle, at=START - timedelta(minutes=1))
    result = classify(
        [inside, inside, before],
        window_start=START,
        window_end=START + timedelta(minutes=2),
        gpu_count=1,
    )
    assert result.coverage == 0.5
    assert result.verdict is Verdict.NO_DATA


@pytest.mark.parametrize(
    "pattern", ["busy", "bursty", "held_memory_idle", "tiny_kernels", "no_process"]
)
def test_simulated_minutes_resampled_from_the_recording_classify_like_the_real_phase(pattern: str):
    expected = {"busy": Verdict.ACTIVE, "bursty": Verdict.ACTIVE}.get(pattern, Verdict.IDLE)
    rng = Random(pattern)
    minutes = [
        sim_minute(pattern, "sim", "sim-1", g, START + timedelta(minutes=k), rng)
        for k in range(45)
        for g in range(2)
    ]
    assert all(m.source is TelemetrySource.SIM and m.samples == 60 for m in minutes)
    result = classify(
        minutes, window_start=START, window_end=START + timedelta(minutes=45), gpu_count=2
    )
    assert result.verdict is expected, result.evidence


def test_bad_windows_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="must be after"):
        classify([], window_start=START, window_end=START, gpu_count=1)
    assert (
        classify([], window_start=START, window_end=START + timedelta(hours=1), gpu_count=0).verdict
        is Verdict.NO_DATA
    )
