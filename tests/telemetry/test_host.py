"""Host CPU and memory beside the GPUs: /proc parsing, per-minute figures, the agent."""

from __future__ import annotations

import logging
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from costguard.clock import ManualClock
from costguard.model import GpuMinute
from costguard.telemetry.agent import Agent, AgentSettings
from costguard.telemetry.host import (
    CpuTimes,
    HostSample,
    HostSampler,
    host_fields,
    parse_meminfo,
    parse_stat,
)
from costguard.telemetry.identity import Identity
from tests.telemetry.agent_helpers import START, RecordedSampler, SimulatedHost

# the layout of a real /proc/stat (this one from a 2-vCPU VM), proc(5)
STAT = """cpu  2698989 0 657967 3023658 31541 0 14936 1668 0 0
cpu0 1084165 0 309535 1800420 11128 0 5529 798 0 0
cpu1 1614824 0 348432 1223238 20412 0 9406 870 0 0
intr 123 0 0
ctxt 987654
btime 1764000000
processes 4242
procs_running 3
"""
MEMINFO = """MemTotal:       24684096 kB
MemFree:         1000000 kB
MemAvailable:   24231524 kB
Buffers:           12345 kB
"""


def test_parse_stat_reads_busy_iowait_and_total_per_line() -> None:
    whole, cores = parse_stat(STAT)
    # user+nice+system+idle+iowait+irq+softirq+steal; guest columns are inside user already
    assert whole.total == 2698989 + 657967 + 3023658 + 31541 + 14936 + 1668
    assert whole.iowait == 31541
    assert whole.busy == whole.total - 3023658 - 31541
    assert len(cores) == 2 and cores[1].iowait == 20412


def test_parse_stat_refuses_a_file_without_the_aggregate_line() -> None:
    with pytest.raises(ValueError, match="aggregate"):
        parse_stat("cpu0 1 2 3 4 5 6 7 8\n")


def test_parse_meminfo_in_use_is_total_minus_available() -> None:
    used, total = parse_meminfo(MEMINFO)
    assert total == 24684096 * 1024
    assert used == (24684096 - 24231524) * 1024
    assert parse_meminfo("MemFree: 1 kB\n") == (None, None)


def _times(busy: int, iowait: int, total: int) -> CpuTimes:
    return CpuTimes(busy=busy, iowait=iowait, total=total)


def test_a_minute_is_the_difference_from_the_last_reading_before_it() -> None:
    base = HostSample(_times(100, 10, 400), (_times(50, 5, 200), _times(50, 5, 200)), 1, 10)
    # over the minute: core 0 busy 5,700 of 6,000 ticks (95%: pegged), core 1 300 of 6,000
    last = HostSample(_times(6100, 610, 12400),
                      (_times(5750, 5, 6200), _times(350, 605, 6200)), 7, 10)
    middle = HostSample(_times(3000, 300, 6400), base.cores, 9, 10)
    got = host_fields(base, [middle, last])
    assert got == {"host_cpu_pct": 50.0, "host_iowait_pct": 5.0, "host_cpus": 2,
                   "host_hot_cores": 1, "host_mem_used_bytes": 9, "host_mem_total_bytes": 10}


def test_a_first_minute_counts_from_its_own_first_reading() -> None:
    one = HostSample(_times(0, 0, 100), (), None, None)
    assert host_fields(None, [one]) == {}  # one reading, no interval: nothing measured
    two = HostSample(_times(25, 0, 200), (), None, None)
    assert host_fields(None, [one, two]) == {"host_cpu_pct": 25.0, "host_iowait_pct": 0.0}


def test_the_sampler_reads_a_proc_directory_and_warns_once_when_it_cannot(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "stat").write_text(STAT)
    (tmp_path / "meminfo").write_text(MEMINFO)
    sample = HostSampler(tmp_path).sample()
    assert sample is not None and len(sample.cores) == 2
    broken = HostSampler(tmp_path / "missing")
    with caplog.at_level(logging.WARNING):
        assert broken.sample() is None and broken.sample() is None
    assert len([r for r in caplog.records if "cannot read host" in r.message]) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_the_real_proc_of_this_machine_parses() -> None:
    sample = HostSampler().sample()
    assert sample is not None and sample.cores and sample.all_cpus.total > 0
    assert sample.mem_total is not None and sample.mem_used is not None
    assert 0 <= sample.mem_used <= sample.mem_total


def test_every_gpu_summary_of_a_minute_carries_the_hosts_figures(tmp_path: Path) -> None:
    clock = ManualClock(START)
    sampler = RecordedSampler(clock, 2, lambda gpu, now: "bursty")
    host = SimulatedHost(cores=16, busy=0.97, iowait=0.01)
    agent = Agent(AgentSettings(url="http://127.0.0.1:9", token="t",
                                buffer_path=tmp_path / "b.sqlite3"),
                  sampler, Identity(provider="aws", instance_id="i-0abc"),
                  client=httpx.Client(), clock=clock,
                  sleep=lambda s: clock.advance(timedelta(seconds=s)), host=host)
    for _ in range(121):
        agent.tick()
        clock.advance(timedelta(seconds=1))
        if len(agent.buffer) >= 4:
            break
    minutes = [GpuMinute.model_validate_json(p.body) for p in agent.buffer.peek(10)]
    assert len(minutes) == 4  # two minutes x two GPUs
    for m in minutes:
        assert m.host_cpu_pct == 97.0 and m.host_iowait_pct == 1.0
        assert m.host_cpus == 16 and m.host_hot_cores == 16
        assert m.host_mem_used_bytes == 40 * 2**30 and m.host_mem_total_bytes == 128 * 2**30
        # the bursty phase of the real recording carries GPM tensor and DRAM activity
        assert m.tensor_mean is not None and m.dram_bw_mean is not None
