"""Standalone self-stop: warn when idle for the whole span, re-check, then stop."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import httpx

from costguard.clock import ManualClock
from costguard.telemetry.selfstop import SelfStop
from tests.fakes.loopback import free_port
from tests.telemetry.agent_helpers import START, RecordedSampler, make_agent


class Recorder:
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.stops: list[datetime] = []


def run(
    tmp_path: Path,
    pattern,  # type: ignore[no-untyped-def]
    minutes: int,
    gpus: int = 1,
) -> tuple[Recorder, ManualClock, SelfStop]:
    clock, seen = ManualClock(START), Recorder()
    self_stop = SelfStop(
        after=timedelta(minutes=30),
        grace=timedelta(minutes=5),
        gpu_count=gpus,
        warn=seen.warnings.append,
        stop=lambda: seen.stops.append(clock.now()),
    )
    sampler = RecordedSampler(clock, gpus, pattern)
    nowhere = f"http://127.0.0.1:{free_port()}"  # standalone: no daemon
    with httpx.Client(timeout=1) as client:
        agent = make_agent(
            tmp_path, nowhere, client, clock, sampler, self_stop=self_stop, retry_max_s=3600
        )
        agent.run(max_ticks=minutes * 60)
    return seen, clock, self_stop


def test_idle_for_the_span_warns_then_stops_after_the_grace(tmp_path: Path):
    seen, _, self_stop = run(tmp_path, lambda g, now: "held_memory_idle", minutes=60)
    assert len(seen.stops) == 1
    assert "idle for 30 min" in seen.warnings[0]
    assert "pid 456 holds 20.8 GB" in seen.warnings[0]
    # judged idle at 09:30 (minutes 09:00-09:29 complete), stopped 5 minutes later
    assert seen.stops[0] == START + timedelta(minutes=35)
    assert "stopping now" in seen.warnings[-1]
    assert self_stop.stopped


def test_tiny_kernels_are_stopped_but_bursty_work_is_not(tmp_path: Path):
    tiny, _, _ = run(tmp_path / "a", lambda g, now: "tiny_kernels", minutes=40)
    assert len(tiny.stops) == 1
    bursty, _, _ = run(tmp_path / "b", lambda g, now: "bursty", minutes=60)
    assert bursty.stops == [] and bursty.warnings == []


def test_use_during_the_grace_cancels_the_stop(tmp_path: Path):
    def pattern(gpu: int, now: datetime) -> str:
        return (
            "busy"
            if START + timedelta(minutes=33) <= now < START + timedelta(minutes=34)
            else ("no_process")
        )

    seen, _, _ = run(tmp_path, pattern, minutes=40)
    assert seen.stops == []
    assert any("cancelled" in w for w in seen.warnings)


def test_missing_telemetry_never_stops_the_instance(tmp_path: Path):
    # the GPU answers only every third minute: mostly no data, never idle
    seen, _, _ = run(tmp_path, lambda g, now: "no_process" if now.minute % 3 == 0 else None, 60)
    assert seen.stops == [] and seen.warnings == []


def test_one_idle_gpu_of_two_is_not_enough(tmp_path: Path):
    seen, _, _ = run(tmp_path, lambda g, now: "busy" if g == 1 else "no_process", 45, gpus=2)
    assert seen.stops == []
