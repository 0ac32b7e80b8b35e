"""Signals checked before they are believed (telemetry/trust.py): each contradiction the
issue names is marked untrusted with its reason, and no minute of the real H100 recording
is, whatever phase it was in."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from costguard.model import GpuMinute, TelemetrySource, Verdict
from costguard.telemetry.classify import classify
from costguard.telemetry.summary import phase_profiles, summarize
from costguard.telemetry.trust import describe, untrusted

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
H100_LIMIT_MW = 700_000  # the recorded H100 80GB HBM3 (SXM) ships with a 700 W limit


def minute(at: int = 0, gpu: int = 0, **fields: object) -> GpuMinute:
    base: dict[str, object] = {"provider": "aws", "instance_id": "i-1", "gpu_index": gpu,
                               "minute": START + timedelta(minutes=at),
                               "source": TelemetrySource.AGENT, "samples": 60,
                               "power_limit_w": 700.0}
    return GpuMinute.model_validate(base | fields)


def test_sm_activity_zero_under_full_load_is_untrusted() -> None:
    # NVIDIA/dcgm-exporter#662: SM activity reads 0 while the GPU trains flat out
    m = minute(sm_mean=0.0, sm_max=0.0, util_mean=98.0, util_max=100.0, power_w_mean=612.0,
               process_count=1)
    found = untrusted([m])
    assert list(found) == [(0, m.minute)]
    assert "SM activity 0% while util_gpu 98% and power 612 W of 700 W" in found[(0, m.minute)]


def test_a_spin_wait_kernel_at_idle_power_is_believed() -> None:
    # util_gpu high, no SM working, power near idle: an NCCL kernel waiting on a peer, say
    m = minute(sm_mean=0.4, sm_max=0.6, util_mean=100.0, power_w_mean=95.0, process_count=1)
    assert untrusted([m]) == {}


def test_full_utilization_with_no_process_at_idle_power_is_untrusted() -> None:
    m = minute(util_mean=100.0, util_max=100.0, power_w_mean=71.0, process_count=0)
    found = untrusted([m])
    assert "util_gpu 100% with no process on the GPU and power 71 W of 700 W" in found[
        (0, m.minute)]


def test_a_counter_frozen_while_power_moves_is_untrusted_and_a_flat_idle_zero_is_not() -> None:
    moving = [minute(at=i, sm_mean=37.5, sm_max=37.5, util_mean=60.0 + i,
                     power_w_mean=200.0 + 40 * i) for i in range(12)]
    found = untrusted(moving)
    assert len(found) == 12
    assert "SM activity stuck at exactly 37.5% for 12 minutes while power moved 440 W" in (
        found[(0, moving[0].minute)])
    # a truly idle GPU reads exactly 0 every minute too, but its power stays flat
    flat = [minute(at=i, sm_mean=0.0, sm_max=0.0, util_mean=0.0, power_w_mean=71.0 + i % 3,
                   process_count=0) for i in range(60)]
    assert untrusted(flat) == {}
    # nine frozen minutes are not yet a frozen counter
    assert untrusted(moving[:9]) == {}


def test_a_gap_breaks_a_frozen_run() -> None:
    run = [minute(at=i if i < 6 else i + 1, sm_mean=37.5, power_w_mean=200.0 + 40 * i)
           for i in range(12)]
    assert untrusted(run) == {}


def test_nothing_is_untrusted_without_power_or_a_limit() -> None:
    # a cloud's metrics carry no power: a minute is untrusted on evidence, never without
    m = minute(sm_mean=0.0, sm_max=0.0, util_mean=98.0, power_w_mean=None)
    assert untrusted([m]) == {}
    m = minute(sm_mean=0.0, sm_max=0.0, util_mean=98.0, power_w_mean=612.0, power_limit_w=None)
    assert untrusted([m]) == {}


@pytest.mark.parametrize("phase", sorted(phase_profiles()))
def test_no_minute_of_the_real_h100_recording_is_untrusted(phase: str) -> None:
    samples = [replace(s, power_limit_mw=H100_LIMIT_MW) for s in phase_profiles()[phase]]
    # the phase as minutes of 20 samples each (the recording is 0.5 s apart), and as one
    chunks = [samples[i:i + 20] for i in range(0, len(samples), 20)] + [samples]
    minutes = [summarize(c, provider="aws", instance_id="i-h100", gpu_index=0,
                         minute=START + timedelta(minutes=n)) for n, c in enumerate(chunks)]
    assert untrusted(minutes) == {}


def test_untrusted_minutes_are_no_data_and_described() -> None:
    window = [minute(at=i, sm_mean=0.0, sm_max=0.0, util_mean=97.0, power_w_mean=640.0,
                     process_count=1) for i in range(45)]
    # on SM activity alone the window reads idle: the bug this check exists for
    gpu_only = classify(window, window_start=START, window_end=START + timedelta(minutes=45),
                        gpu_count=1)
    assert gpu_only.verdict is Verdict.IDLE
    found = untrusted(window)
    kept = [m for m in window if (m.gpu_index, m.minute) not in found]
    checked = classify(kept, window_start=START, window_end=START + timedelta(minutes=45),
                       gpu_count=1)
    assert checked.verdict is Verdict.NO_DATA
    text = describe(found)
    assert text.startswith("45 GPU-minutes untrusted, counted as no data: SM activity 0%")
    assert "(GPU 0 from 09:00 UTC, 45 GPU-minutes)" in text
