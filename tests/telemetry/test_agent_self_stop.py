"""Standalone self-stop: warn when idle for the whole span, re-check, then stop."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import httpx

from costguard.clock import ManualClock
from costguard.telemetry.activity import ActivityReader, ActivitySample, ProcTimes, read_recording
from costguard.telemetry.agent import Agent, AgentSettings
from costguard.telemetry.identity import Identity
from costguard.telemetry.selfstop import LocalHook, SelfStop
from tests.fakes.loopback import free_port
from tests.telemetry.agent_helpers import START, RecordedSampler, make_agent

HOST = Path(__file__).resolve().parents[1] / "fixtures" / "host"


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


# -- the same checks as a daemon's stop: host activity and the pre-stop hook ---------------

class ReplayedActivity(ActivityReader):
    """A host-activity recording (tests/fixtures/host) played back on the agent's clock,
    looping: what the agent's reader would have read on that host."""

    def __init__(self, name: str) -> None:
        super().__init__()
        lines = (HOST / f"{name}.jsonl").read_text().splitlines()
        self.samples = [s for s, _ in read_recording(lines)]
        self.first = self.samples[0].t
        self.span = self.samples[-1].t - self.first + 1
        self.n = 0

    def sample(self, t: float, gpu_pids: Iterable[int], *, minute_end: bool = False
               ) -> ActivitySample:
        real = self.samples[self.n % len(self.samples)]
        loops = self.n // len(self.samples)
        self.n += 1
        first, last = self.samples[0], self.samples[-1]
        shift = t - real.t  # recorded times onto the agent's clock

        def grown(now: int | None, a: int | None, b: int | None) -> int | None:
            # a counter keeps growing across loops, as a host's does
            return None if now is None else now + loops * ((b or 0) - (a or 0))

        recorded = next(iter(real.procs.values()), None)
        procs = {} if recorded is None else {
            pid: ProcTimes(recorded.cpu_s, recorded.started + shift)
            for pid in gpu_pids}  # the agent's GPU process, as the recorded one behaved
        # what the recording read at its latest minute's end, as of this sample
        ended = next((s for s in reversed(self.samples[:self.samples.index(real) + 1])
                      if s.sessions is not None), None) if minute_end else None
        return replace(
            real, t=t, procs=procs,
            disk_bytes=grown(real.disk_bytes, first.disk_bytes, last.disk_bytes),
            net_bytes=grown(real.net_bytes, first.net_bytes, last.net_bytes),
            sessions=ended.sessions if ended else None,
            input_idle_s=ended.input_idle_s if ended else None,
            kernels=None if ended is None or ended.kernels is None else tuple(
                (state, at + shift) for state, at in ended.kernels))


def run_host(tmp_path: Path, host: str, minutes: int, **self_stop: object
             ) -> tuple[Recorder, SelfStop]:
    clock, seen = ManualClock(START), Recorder()
    stopper = SelfStop(after=timedelta(minutes=30), grace=timedelta(minutes=5), gpu_count=1,
                       warn=seen.warnings.append, stop=lambda: seen.stops.append(clock.now()),
                       **self_stop)  # type: ignore[arg-type]
    sampler = RecordedSampler(clock, 1, lambda g, now: "held_memory_idle")
    with httpx.Client(timeout=1) as client:
        agent = Agent(AgentSettings(url=f"http://127.0.0.1:{free_port()}", token="t",
                                    buffer_path=tmp_path / "buffer.db",
                                    pre_stop_command=f"echo ckpt >> {tmp_path / 'ckpt'}"),
                      sampler, Identity(provider="aws", instance_id="i-0abc"), client=client,
                      clock=clock, sleep=lambda s: clock.advance(timedelta(seconds=s)),
                      self_stop=stopper, activity=ReplayedActivity(host))
        for _ in range(minutes * 60):
            agent.tick()
            clock.advance(timedelta(seconds=1))
            agent.hooks.join(30)
            if stopper.stopped:
                break
    return seen, stopper


def test_a_dataset_copy_holds_the_self_stop_back(tmp_path: Path) -> None:
    seen, stopper = run_host(tmp_path, "dataset_copy", 60)
    assert seen.stops == [] and seen.warnings == []
    assert stopper.last_evidence.startswith("idle-but-busy: ")
    assert "host busy (last 10 min): " in stopper.last_evidence and "disk up to" in (
        stopper.last_evidence)


def test_an_idle_host_is_self_stopped_after_its_hook_ran(tmp_path: Path) -> None:
    seen, _ = run_host(tmp_path, "idle", 60, pre_stop=LocalHook(kind="command"))
    assert len(seen.stops) == 1
    assert (tmp_path / "ckpt").read_text() == "ckpt\n"  # the hook ran once, before the stop
    assert "host quiet (last 10 min)" in seen.warnings[0]
    assert "pre-stop hook succeeded (exit 0 after 0 s); stopping now" in seen.warnings[-1]


def test_a_failed_hook_cancels_the_self_stop(tmp_path: Path) -> None:
    seen, _ = run_host(tmp_path, "idle", 40, pre_stop=LocalHook(kind="signal",
                                                                signal="SIGUSR1"))
    # the recorded GPU process (pid 456 in the H100 recording) is not on this machine
    assert seen.stops == []
    assert any("pre-stop hook failed (SIGUSR1 reached no process holding a GPU" in w and
               "the stop is cancelled" in w for w in seen.warnings), seen.warnings
