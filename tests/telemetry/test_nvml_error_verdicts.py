"""From a failing fake NVML to the verdict: the sampler, the per-minute summary and the
classifier together. A GPU that cannot be read (lost mid-run, or NOT_SUPPORTED for every
reading) is missing data, never evidence of idleness."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from itertools import count

import pynvml
import pytest

from costguard.model import GpuMinute, GpuSignal, Verdict
from costguard.telemetry.classify import classify
from costguard.telemetry.nvml import NvmlSampler
from costguard.telemetry.summary import summarize_windows
from tests.telemetry.fake_nvml import FakeGpu, FakeNvml

T0 = 1_800_000_000.0 - 1_800_000_000 % 60  # a minute boundary
START = datetime.fromtimestamp(T0, UTC)
EVERYTHING = ("utilization", "memory", "power", "processes", "temperature", "clock")


def minutes_from(gpus: list[FakeGpu], seconds: int, *, at: int = -1,
                 change: object = None) -> list[GpuMinute]:
    """Sample `gpus` once a second for `seconds`; at tick `at` call `change()`."""
    ticks = count()
    samples = []
    with NvmlSampler(FakeNvml(gpus), clock=lambda: T0 + next(ticks)) as sampler:  # type: ignore[arg-type]
        for tick in range(seconds):
            if tick == at and callable(change):
                change()
            samples.extend(sampler.sample())
    return summarize_windows(samples, provider="aws", instance_id="i-err")


def verdict(minutes: list[GpuMinute], gpus: int, span: int):  # type: ignore[no-untyped-def]
    return classify(minutes, window_start=START + timedelta(minutes=span - 1),
                    window_end=START + timedelta(minutes=span), gpu_count=gpus)


def test_a_gpu_lost_mid_run_leaves_minutes_without_readings_not_zeros() -> None:
    busy = FakeGpu(util=90, sm_util=80.0, processes=[(7, 10**10)])
    minutes = minutes_from([busy], 120, at=60, change=lambda: setattr(busy, "lost", True))
    before, after = minutes
    assert before.util_mean == 90 and before.sm_mean == pytest.approx(80.0)
    assert after.samples == 60
    assert (after.util_mean, after.sm_mean, after.mem_used_bytes, after.process_count) == (
        None, None, None, None)
    assert verdict(minutes, 1, 1).verdict is Verdict.ACTIVE
    lost = verdict(minutes, 1, 2)
    assert lost.verdict is Verdict.NO_DATA, lost.evidence


def test_a_lost_gpu_beside_an_idle_one_keeps_the_instance_from_reading_idle() -> None:
    lost, idle = FakeGpu(util=0, sm_util=0.0), FakeGpu(util=0, sm_util=0.0)
    minutes = minutes_from([lost, idle], 120, at=1, change=lambda: setattr(lost, "lost", True))
    assert verdict(minutes, 2, 2).verdict is Verdict.NO_DATA
    healthy = minutes_from([FakeGpu(), FakeGpu()], 120)  # the same GPUs, both answering
    assert verdict(healthy, 2, 2).verdict is Verdict.IDLE


def test_a_gpu_that_supports_no_reading_is_no_data_not_idle() -> None:
    mute = FakeGpu(gpm_supported=False, refuse=dict.fromkeys(EVERYTHING,
                                                             pynvml.NVMLError_NotSupported))
    minutes = minutes_from([mute], 60)
    (only,) = minutes
    assert only.samples == 60 and only.util_mean is None and only.sm_mean is None
    result = verdict(minutes, 1, 1)
    assert result.verdict is Verdict.NO_DATA, result.evidence
    assert "no data is not idle" in result.evidence


def test_without_gpm_but_with_utilization_the_fallback_is_named() -> None:
    old = FakeGpu(util=0, gpm_supported=False, processes=[(9, 2 * 10**9)])
    result = verdict(minutes_from([old], 60), 1, 1)
    assert result.verdict is Verdict.IDLE
    assert result.signal is GpuSignal.UTIL_GPU
    assert "fell back to util_gpu" in result.evidence


@pytest.mark.parametrize("figure", [math.nan, math.inf, -math.inf])
def test_a_gpm_figure_that_is_not_a_number_is_no_reading_not_zero(figure: float) -> None:
    # GPM's figures are doubles NVML computes; a NaN was clamped to 0 % SM activity, and a
    # GPU busy at 90 % read idle on the SM signal
    busy = FakeGpu(util=90, sm_util=figure, processes=[(7, 10**10)])
    (minute,) = minutes_from([busy], 60)
    assert (minute.sm_mean, minute.sm_p95, minute.sm_max) == (None, None, None)
    assert minute.util_mean == 90
    got = verdict([minute], 1, 1)
    assert got.verdict is Verdict.ACTIVE and got.signal is GpuSignal.UTIL_GPU, got.evidence


def test_the_real_h100_recording_with_nan_sm_activity_is_never_idle_while_busy() -> None:
    from costguard.telemetry.summary import summarize
    from costguard.telemetry.trace import packaged_trace

    busy = [s for s in packaged_trace().samples if s.phase == "busy_matmul"][:60]
    assert len(busy) == 60 and all(s.sm_active is not None for s in busy)
    forged = [dataclasses.replace(s, gpm={**(s.gpm or {}), "sm_util": math.nan})
              for s in busy]
    minute = summarize(forged, provider="aws", instance_id="i-h100", gpu_index=0,
                       minute=START)
    assert minute.sm_max is None and minute.util_max is not None and minute.util_max > 90
    got = classify([minute], window_start=START, window_end=START + timedelta(minutes=1),
                   gpu_count=1)
    assert got.verdict is Verdict.ACTIVE, got.evidence
