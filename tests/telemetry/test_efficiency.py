"""The efficiency verdict on minutes resampled from the real H100 recording (phases of
`shared/fixtures/nvml`), with a simulated host beside them; expectations by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.model import GpuMinute, GpuSignal
from costguard.recommend.settings import RecommendSettings
from costguard.telemetry.efficiency import Bottleneck, judge
from costguard.telemetry.summary import sim_minute
from costguard.telemetry.trace import packaged_trace

START = datetime(2026, 11, 2, tzinfo=UTC)
HOURS = 2
SETTINGS = RecommendSettings(min_hours=1)  # two hours of readings judge in these tests


def phase_vram_peak(phase: str) -> int:
    """The largest memory in use the recording shows in `phase` (hand expectation)."""
    return max(s.mem_used for s in packaged_trace().samples if s.phase == phase and s.mem_used)


def fleet_minutes(patterns: list[str], *, cpu: float | None = None, iowait: float = 0.0,
                  hours: int = HOURS, gpm: bool = True) -> list[GpuMinute]:
    """`hours` of minutes, GPU i running `patterns[i]`, on a 96-vCPU host whose CPU is
    `cpu` percent busy (None: no host figures, as from cloud metrics)."""
    rng = Random(7)
    host = {} if cpu is None else {
        "host_cpu_pct": cpu, "host_iowait_pct": iowait, "host_cpus": 96,
        "host_hot_cores": round(96 * cpu / 100) if cpu >= 90 else 0,
        "host_mem_used_bytes": 300 * 2**30, "host_mem_total_bytes": 1152 * 2**30}
    out = []
    for k in range(hours * 60):
        minute = START + timedelta(minutes=k)
        for gpu, pattern in enumerate(patterns):
            m = sim_minute(pattern, "aws", "i-0abc", gpu, minute, rng, gpm=gpm)
            out.append(m.model_copy(update=host))
    return out


def verdict(minutes: list[GpuMinute], gpus: int, settings: RecommendSettings = SETTINGS):
    return judge(minutes, window_start=START, window_end=START + timedelta(hours=HOURS),
                 gpu_count=gpus, settings=settings)


def test_a_bursty_gpu_beside_pegged_cpus_waits_for_its_data_loader() -> None:
    e = verdict(fleet_minutes(["bursty"], cpu=97.0), 1)
    assert e.bottleneck is Bottleneck.DATA_LOADING and e.underused
    assert e.signal is GpuSignal.SM_ACTIVE and e.coverage == 1.0 and e.hours == 2.0
    assert e.gpus_used == 1 and e.used_gpus == (0,)
    assert e.gpu_mean is not None and 15 < e.gpu_mean < 22  # the phase's 18.4% SM mean
    assert e.host_cpu_p95 == 97.0 and e.host_hot_cores == 93
    assert e.vram_peak_bytes == phase_vram_peak("bursty_2s_of_10s")
    text = " | ".join(e.evidence)
    assert "host CPU p95 97.0% of 96 vCPUs" in text and "more CPU per GPU" in text


def test_the_same_gpu_beside_quiet_cpus_is_latency_bound() -> None:
    e = verdict(fleet_minutes(["bursty"], cpu=12.0), 1)
    assert e.bottleneck is Bottleneck.LATENCY_BOUND and e.underused
    assert "smaller GPU serves it" in e.evidence[-1]


def test_iowait_counts_as_a_busy_host() -> None:
    e = verdict(fleet_minutes(["bursty"], cpu=30.0, iowait=35.0), 1)
    assert e.bottleneck is Bottleneck.DATA_LOADING


def test_busy_matmuls_are_healthy_and_saturated_when_the_cpus_are_busy_too() -> None:
    healthy = verdict(fleet_minutes(["busy"] * 4, cpu=20.0), 4)
    assert healthy.bottleneck is Bottleneck.HEALTHY and not healthy.underused
    assert healthy.gpus_used == 4 and healthy.gpu_mean is not None and healthy.gpu_mean > 85
    assert healthy.vram_peak_bytes == phase_vram_peak("busy_matmul")
    saturated = verdict(fleet_minutes(["busy"] * 4, cpu=92.0), 4)
    assert saturated.bottleneck is Bottleneck.SATURATED and not saturated.underused


def test_one_busy_gpu_of_eight_is_unused_gpus_not_healthy() -> None:
    # it said "healthy" while 7 of 8 paid GPUs did nothing
    e = verdict(fleet_minutes(["busy"] + ["no_process"] * 7, cpu=15.0), 8)
    assert e.bottleneck is Bottleneck.UNUSED_GPUS and e.underused
    assert "some paid GPUs did no work" in e.advice
    every = verdict(fleet_minutes(["busy"] * 2, cpu=15.0), 2)
    assert every.bottleneck is Bottleneck.HEALTHY and not every.underused
    assert e.gpus_used == 1 and e.used_gpus == (0,)
    # the paid share: one GPU's ~92.5% SM mean over eight GPUs' minutes
    assert e.paid_active_share is not None and 0.10 < e.paid_active_share < 0.125
    assert e.evidence[0].startswith("1 of 8 GPUs used (GPU 0) over 2.0 h")


def test_held_memory_and_tiny_kernels_use_no_gpu() -> None:
    e = verdict(fleet_minutes(["held_memory_idle", "tiny_kernels"], cpu=10.0), 2)
    assert e.bottleneck is Bottleneck.IDLE and e.gpus_used == 0 and not e.underused


def test_without_sm_activity_util_gpu_is_the_signal() -> None:
    e = verdict(fleet_minutes(["bursty"], cpu=97.0, gpm=False), 1)
    assert e.signal is GpuSignal.UTIL_GPU and e.bottleneck is Bottleneck.DATA_LOADING


def test_no_host_figures_leave_the_cause_unknown_never_guessed() -> None:
    e = verdict(fleet_minutes(["bursty"]), 1)
    assert e.bottleneck is Bottleneck.CAUSE_UNKNOWN and e.underused
    assert "host CPU not measured" in e.evidence


@pytest.mark.parametrize("keep", [lambda m: m.gpu_index == 0,  # GPU 1 silent
                                  lambda m: m.minute.minute < 30])  # half of every hour
def test_short_coverage_is_insufficient_data(keep) -> None:  # type: ignore[no-untyped-def]
    minutes = [m for m in fleet_minutes(["busy", "busy"], cpu=20.0) if keep(m)]
    e = verdict(minutes, 2, RecommendSettings(min_hours=1.5))
    assert e.bottleneck is Bottleneck.INSUFFICIENT_DATA and not e.underused
    assert e.evidence[0].endswith("no data is not underused")


def test_the_default_needs_a_day_of_readings() -> None:
    e = verdict(fleet_minutes(["bursty"], cpu=97.0), 1, RecommendSettings())
    assert e.bottleneck is Bottleneck.INSUFFICIENT_DATA
    assert e.evidence[0].startswith("2.0 h of readings in the window (needs 24 h)")


def test_a_gpu_busy_in_under_one_percent_of_its_minutes_is_not_used() -> None:
    minutes = fleet_minutes(["no_process", "no_process"], cpu=10.0)
    rng = Random(1)
    # GPU 1 works in one minute of 120 (0.8%), GPU 0 in two (1.7%)
    busy = {(1, 5), (0, 7), (0, 90)}
    minutes = [sim_minute("busy", "aws", "i-0abc", m.gpu_index, m.minute, rng)
               .model_copy(update={"host_cpu_pct": 10.0})
               if (m.gpu_index, int((m.minute - START) / timedelta(minutes=1))) in busy else m
               for m in minutes]
    e = verdict(minutes, 2)
    assert e.used_gpus == (0,)


def test_a_five_minute_cloud_reading_fills_five_minutes() -> None:
    reading = GpuMinute(provider="aws", instance_id="i-0abc", gpu_index=0, minute=START,
                        source="cloudwatch", span_minutes=5, util_mean=60.0, util_max=80.0,
                        mem_used_bytes=9 * 10**9)
    minutes = [reading.model_copy(update={"minute": START + timedelta(minutes=5 * k)})
               for k in range(24)]
    e = verdict(minutes, 1)
    assert e.hours == 2.0 and e.coverage == 1.0 and e.signal is GpuSignal.UTIL_GPU
    assert e.bottleneck is Bottleneck.HEALTHY and e.vram_peak_bytes == 9 * 10**9


def test_a_tpu_node_s_verdict_speaks_of_chips_and_hbm() -> None:
    from costguard.recommend.words import TPU_WORDS

    e = judge(fleet_minutes(["busy"] * 2 + ["no_process"] * 6, cpu=15.0),
              window_start=START, window_end=START + timedelta(hours=HOURS), gpu_count=8,
              settings=SETTINGS, words=TPU_WORDS)
    assert e.bottleneck is Bottleneck.UNUSED_GPUS
    assert e.evidence[0].startswith("2 of 8 TPU chips used (TPU chip 0, 1) over 2.0 h")
    assert "of the paid TPU chip-hours" in e.evidence[0]
    assert e.evidence[1].startswith("HBM peak ") and " per TPU chip " in e.evidence[1]
    assert e.evidence[-1].startswith("TPU chip high") and "smaller slice" in e.evidence[-1]
    assert not any("GPU" in line for line in e.evidence)


def test_a_trainium_instance_s_verdict_speaks_of_devices() -> None:
    from costguard.model import Instance, InstanceState
    from costguard.recommend.words import words_for

    trn = Instance(provider="aws", account="1", region="us-east-1", instance_id="i-trn",
                   instance_type="trn1.32xlarge", state=InstanceState.RUNNING,
                   launch_time=START, observed_at=START, gpu_count=16,
                   gpu_model="AWS Trainium")
    e = judge(fleet_minutes(["busy"] + ["no_process"] * 15, cpu=15.0), window_start=START,
              window_end=START + timedelta(hours=HOURS), gpu_count=16, settings=SETTINGS,
              words=words_for(trn))
    assert e.evidence[0].startswith("1 of 16 Trainium devices used (Trainium device 0)")
    assert "a smaller Trainium size" in e.evidence[-1]
    assert words_for(trn.model_copy(update={"instance_type": "p5.48xlarge"})) is None


_PCT = st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 4.9, 5.0, 40.0, 100.0]))


@st.composite
def _readings(draw: st.DrawFn) -> tuple[list[GpuMinute], datetime, datetime]:
    """Readings of mixed spans (some reaching past the window's edges, some overlapping),
    and a window that need not begin on a whole minute."""
    start = START + timedelta(seconds=draw(st.sampled_from([0, 0, 17])),
                              microseconds=draw(st.sampled_from([0, 3])))
    end = start + timedelta(minutes=draw(st.integers(1, 240)),
                            seconds=draw(st.sampled_from([0, 30])))
    out = []
    for _ in range(draw(st.integers(0, 60))):
        host = draw(st.booleans())
        out.append(GpuMinute(
            provider="aws", instance_id="i-0abc", source="agent",
            gpu_index=draw(st.integers(0, 3)),
            minute=START + timedelta(minutes=draw(st.integers(-70, 250))),
            span_minutes=draw(st.sampled_from([1, 1, 5, 7, 60])),
            util_mean=draw(_PCT), util_max=draw(_PCT), sm_mean=draw(_PCT),
            mem_used_bytes=draw(st.one_of(st.none(), st.integers(0, 80 * 2**30))),
            host_cpu_pct=draw(_PCT) if host else None,
            host_iowait_pct=draw(_PCT) if host else None))
    return out, start, end


@given(_readings(), st.integers(0, 3), st.sampled_from([0.1, 0.5, 0.9]))
@settings(max_examples=300, deadline=None)
def test_a_reading_of_several_minutes_judges_as_those_minutes_one_by_one(
        drawn: tuple[list[GpuMinute], datetime, datetime], gpus: int, coverage: float
) -> None:
    """A reading stands for each minute of its span inside the window: the verdict, its
    figures and evidence, is that of the same readings cut into one-minute readings (a
    later reading of a minute replaces an earlier one either way)."""
    from costguard.minutes import per_minute

    readings, start, end = drawn
    cfg = RecommendSettings(min_hours=0, min_coverage=coverage)
    flat = [one for m in readings for one in per_minute(m)]
    assert (judge(readings, window_start=start, window_end=end, gpu_count=gpus,
                  settings=cfg)
            == judge(flat, window_start=start, window_end=end, gpu_count=gpus, settings=cfg))
