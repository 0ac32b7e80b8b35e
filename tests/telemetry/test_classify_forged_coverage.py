"""Coverage cannot be forged: many summaries within one wall minute are one minute of data,
and GPU indexes the instance does not have fill no slot. Before, 45 idle summaries sent
within one real minute made an instance 'idle for 45 minutes'."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from costguard.model import GpuMinute, TelemetrySource, Verdict
from costguard.telemetry.classify import classify
from tests.reliability import figures

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=45)


def _idle(minute: datetime, gpu: int = 0) -> GpuMinute:
    return GpuMinute(provider="aws", instance_id="i-victim", gpu_index=gpu, minute=minute,
                     source=TelemetrySource.AGENT, util_mean=0.0, util_max=0.0, sm_mean=0.0,
                     sm_max=0.0, process_count=0)


def _verdict(minutes: list[GpuMinute], gpus: int = 1) -> tuple[Verdict, float]:
    c = classify(minutes, window_start=START, window_end=START + WINDOW, gpu_count=gpus)
    return c.verdict, c.coverage


def _forged(minutes: list[GpuMinute], gpus: int = 1) -> tuple[Verdict, float]:
    verdict, coverage = _verdict(minutes, gpus)
    figures.count("forged coverage attempts that did not make an instance idle",
                  verdict is not Verdict.IDLE)
    return verdict, coverage


def test_45_summaries_stamped_within_one_minute_are_one_minute_of_data() -> None:
    forged = [_idle(START + timedelta(minutes=30, seconds=s)) for s in range(45)]
    verdict, coverage = _forged(forged)
    assert verdict is Verdict.NO_DATA
    assert coverage == 1 / 45


def test_invented_gpu_indexes_fill_no_slot() -> None:
    one_real_minute = [_idle(START + timedelta(minutes=30), gpu=g) for g in range(45)]
    verdict, coverage = _forged(one_real_minute, gpus=1)
    assert verdict is Verdict.NO_DATA and coverage == 1 / 45
    # each of 8 real GPUs for 45 minutes, plus invented ones: exactly full, not more
    honest = [_idle(START + timedelta(minutes=m), gpu=g) for m in range(45) for g in range(10)]
    verdict, coverage = _verdict(honest, gpus=8)
    assert verdict is Verdict.IDLE and coverage == 1.0


def test_honest_whole_minutes_still_make_an_idle_verdict() -> None:
    minutes = [_idle(START + timedelta(minutes=m)) for m in range(45)]
    assert _verdict(minutes) == (Verdict.IDLE, 1.0)
