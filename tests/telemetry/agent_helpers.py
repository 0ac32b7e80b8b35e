"""A scripted sampler fed from the real H100 recording, on a manual clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from costguard.clock import ManualClock
from costguard.telemetry.agent import Agent, AgentSettings
from costguard.telemetry.host import CpuTimes, HostSample, HostSampler
from costguard.telemetry.identity import Identity
from costguard.telemetry.selfstop import SelfStop
from costguard.telemetry.summary import PATTERN_PHASE, phase_profiles
from costguard.telemetry.trace import NvmlSample

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


class RecordedSampler:
    """Each GPU replays a phase of the real recording; `pattern(gpu, now)` picks it."""

    def __init__(
        self, clock: ManualClock, gpus: int, pattern: Callable[[int, datetime], str | None]
    ) -> None:
        self.clock = clock
        self.gpus = gpus
        self.pattern = pattern
        self.ticks = 0

    @property
    def device_indexes(self) -> list[int]:
        return list(range(self.gpus))

    def sample(self) -> list[NvmlSample]:
        now = self.clock.now()
        out = []
        for gpu in range(self.gpus):
            name = self.pattern(gpu, now)
            if name is None:  # this GPU reports nothing this second
                continue
            profile = phase_profiles()[PATTERN_PHASE[name]]
            real = profile[(self.ticks * 2) % len(profile)]
            out.append(replace(real, t=now.timestamp(), gpu=gpu))
        self.ticks += 1
        return out


def make_agent(
    tmp_path: Path,
    url: str,
    client: httpx.Client,
    clock: ManualClock,
    sampler: RecordedSampler,
    *,
    buffer_name: str = "buffer.sqlite3",
    self_stop: SelfStop | None = None,
    **settings: object,
) -> Agent:
    config = AgentSettings(
        url=url,
        token="agent-token",
        buffer_path=tmp_path / buffer_name,
        **settings,  # type: ignore[arg-type]
    )
    return Agent(
        config,
        sampler,
        Identity(provider="aws", instance_id="i-0abc"),
        client=client,
        clock=clock,
        sleep=lambda s: clock.advance(timedelta(seconds=s)),
        self_stop=self_stop,
    )


class SimulatedHost(HostSampler):
    """A host whose cores are each `busy` of the time (and `iowait`) at every second; the
    counters advance 100 ticks a core per call, as /proc/stat's do per second at USER_HZ."""

    def __init__(self, cores: int = 8, busy: float = 0.5, iowait: float = 0.0,
                 mem_used: int = 40 * 2**30, mem_total: int = 128 * 2**30) -> None:
        super().__init__()
        self.cores, self.busy, self.iowait = cores, busy, iowait
        self.mem_used, self.mem_total = mem_used, mem_total
        self.calls = 0

    def sample(self) -> HostSample:
        self.calls += 1
        n = self.calls * 100
        core = CpuTimes(busy=round(n * self.busy), iowait=round(n * self.iowait), total=n)
        whole = CpuTimes(core.busy * self.cores, core.iowait * self.cores, n * self.cores)
        return HostSample(whole, (core,) * self.cores, self.mem_used, self.mem_total)
