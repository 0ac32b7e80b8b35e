"""The agent pushes per-minute summaries to a real ingest server on 127.0.0.1, buffering
on disk while the daemon is away and replaying in order once it is back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from costguard.clock import ManualClock
from costguard.model import GpuMinute
from costguard.telemetry.buffer import DiskBuffer
from costguard.telemetry.ingest import MemorySink, telemetry_app
from tests.fakes.loopback import free_port, serve
from tests.telemetry.agent_helpers import START, RecordedSampler, make_agent
from tests.telemetry.servers import counting

DAEMON_NOW = START + timedelta(days=1)  # the daemon's clock: after every minute the agent sends


class Daemon:
    def __init__(self, max_body_bytes: int = 2**20) -> None:
        self.sink = MemorySink()
        self.requests = 0
        self.received: list[GpuMinute] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.max_body_bytes = max_body_bytes

        def record(batch: list[GpuMinute]) -> int:
            self.received.extend(batch)
            return self.sink(batch)

        app = telemetry_app(token="agent-token", sink=record, max_body_bytes=max_body_bytes,
                            clock=lambda: DAEMON_NOW)
        self.app = counting(app, self._count)

    def _count(self) -> None:
        self.requests += 1

    def up(self):  # type: ignore[no-untyped-def]
        return serve(self.app, self.port)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def minutes_of(daemon: Daemon) -> list[tuple[int, object]]:
    return [(k[2], k[3]) for k in daemon.sink.order]


def test_minutes_reach_the_daemon_once_each_in_order(tmp_path: Path, client: httpx.Client):
    daemon, clock = Daemon(), ManualClock(START)
    sampler = RecordedSampler(clock, 2, lambda g, now: "busy" if g == 0 else "no_process")
    agent = make_agent(tmp_path, daemon.url, client, clock, sampler)
    with daemon.up():
        agent.run(max_ticks=180)  # three minutes at 1 Hz
    assert len(daemon.received) == 6 and len(daemon.sink.rows) == 6
    assert minutes_of(daemon) == [
        (g, START + timedelta(minutes=k)) for k in range(3) for g in range(2)
    ]
    busy = daemon.sink.rows[("aws", "i-0abc", 0, START)]
    assert busy.samples == 60
    assert busy.sm_mean is not None and busy.sm_mean > 80
    assert len(agent.buffer) == 0


def test_daemon_down_buffers_then_replays_everything_in_order_exactly_once(
    tmp_path: Path, client: httpx.Client
):
    daemon, clock = Daemon(), ManualClock(START)
    sampler = RecordedSampler(clock, 1, lambda g, now: "bursty")
    agent = make_agent(tmp_path, daemon.url, client, clock, sampler, retry_max_s=30)
    for _ in range(10 * 60):  # ten minutes with nobody listening
        agent.tick()
        clock.advance(timedelta(seconds=1))
    assert len(agent.buffer) == 9  # minute 9 is still open
    assert not agent.last_flush.reachable
    with daemon.up():
        for _ in range(2 * 60):
            agent.tick()
            clock.advance(timedelta(seconds=1))
    assert minutes_of(daemon) == [(0, START + timedelta(minutes=k)) for k in range(11)]
    assert len(daemon.received) == 11  # nothing was sent twice
    assert len(agent.buffer) == 0 and agent.buffer.dropped == 0


def test_a_full_buffer_drops_the_oldest_and_counts_them(tmp_path: Path, client: httpx.Client):
    daemon, clock = Daemon(), ManualClock(START)
    sampler = RecordedSampler(clock, 1, lambda g, now: "no_process")
    agent = make_agent(
        tmp_path, daemon.url, client, clock, sampler, buffer_max_records=5, retry_max_s=5
    )
    for _ in range(9 * 60 + 1):
        agent.tick()
        clock.advance(timedelta(seconds=1))
    assert len(agent.buffer) == 5
    assert agent.buffer.dropped == 4
    assert agent.status()["dropped"] == 4
    with daemon.up():
        agent.shutdown()
    # closing the partial minute 9 on shutdown pushes out one more; the newest five survive
    assert agent.buffer.dropped == 5
    assert minutes_of(daemon) == [(0, START + timedelta(minutes=k)) for k in range(5, 10)]


def test_buffer_bounded_by_bytes_drops_oldest(tmp_path: Path):
    buffer = DiskBuffer(tmp_path / "b.sqlite3", max_records=1000, max_bytes=100)
    assert buffer.append(["a" * 40, "b" * 40]) == 0
    assert buffer.append(["c" * 40]) == 1
    assert [p.body[0] for p in buffer.peek(10)] == ["b", "c"]
    assert buffer.size_bytes == 80 and buffer.dropped == 1


def test_an_agent_restart_keeps_the_buffer_and_the_daemon_gets_it_all(
    tmp_path: Path, client: httpx.Client
):
    daemon, clock = Daemon(), ManualClock(START)
    sampler = RecordedSampler(clock, 1, lambda g, now: "held_memory_idle")
    first = make_agent(tmp_path, daemon.url, client, clock, sampler)
    first.run(max_ticks=5 * 60)  # daemon down all along; run() ends with a final flush try
    assert len(first.buffer) == 5
    first.buffer.close()  # the process is gone

    second = make_agent(tmp_path, daemon.url, client, clock, sampler)
    assert len(second.buffer) == 5
    with daemon.up():
        second.run(max_ticks=60)
    assert minutes_of(daemon) == [(0, START + timedelta(minutes=k)) for k in range(6)]
    assert len(daemon.received) == 6


def test_a_daemon_restart_loses_nothing(tmp_path: Path, client: httpx.Client):
    daemon, clock = Daemon(), ManualClock(START)
    sampler = RecordedSampler(clock, 1, lambda g, now: "tiny_kernels")
    agent = make_agent(tmp_path, daemon.url, client, clock, sampler, retry_max_s=4)

    def run_for(seconds: int) -> None:
        for _ in range(seconds):
            agent.tick()
            clock.advance(timedelta(seconds=1))

    with daemon.up():
        run_for(2 * 60)
    assert len(daemon.sink.rows) == 1
    run_for(3 * 60)  # the daemon is restarting
    assert len(agent.buffer) == 3
    with daemon.up():
        run_for(60)
    assert minutes_of(daemon) == [(0, START + timedelta(minutes=k)) for k in range(5)]
    assert len(daemon.received) == 5


def test_store_errors_503_keep_the_batch_for_the_next_try(tmp_path: Path, client: httpx.Client):
    clock = ManualClock(START)
    sink = MemorySink()
    outage = {"on": True}

    def store(batch: list[GpuMinute]) -> int:
        if outage["on"]:
            raise RuntimeError("store busy")
        return sink(batch)

    app = telemetry_app(token="agent-token", sink=store, clock=lambda: DAEMON_NOW)
    sampler = RecordedSampler(clock, 1, lambda g, now: "tiny_kernels")
    with serve(app) as url:
        agent = make_agent(tmp_path, url, client, clock, sampler, retry_max_s=30)
        for _ in range(3 * 60):
            agent.tick()
            clock.advance(timedelta(seconds=1))
        assert len(agent.buffer) == 2 and sink.rows == {}
        assert "503" in (agent.last_flush.error or "")
        outage["on"] = False
        for _ in range(40):
            agent.tick()
            clock.advance(timedelta(seconds=1))
    assert [k[3] for k in sink.order] == [START + timedelta(minutes=k) for k in range(3)]
    assert len(agent.buffer) == 0


def test_an_invalid_summary_is_discarded_alone_and_the_rest_delivered(
    tmp_path: Path, client: httpx.Client
):
    daemon, clock = Daemon(), ManualClock(START)
    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    sampler = RecordedSampler(clock, 1, lambda g, now: "busy")
    agent = make_agent(tmp_path, daemon.url, client, clock, sampler, buffer_name="b.sqlite3")
    for _ in range(2 * 60):
        agent.tick()
        clock.advance(timedelta(seconds=1))
    buffer.append(['{"provider": "azure", "instance_id": "x"}'])  # e.g. an older agent's bug
    for _ in range(60):
        agent.tick()
        clock.advance(timedelta(seconds=1))
    with daemon.up():
        agent.shutdown()
    assert len(daemon.sink.rows) == 3
    assert agent.buffer.dropped == 1 and len(agent.buffer) == 0


def test_batches_over_the_daemon_limit_are_split(tmp_path: Path, client: httpx.Client):
    daemon, clock = Daemon(max_body_bytes=4096), ManualClock(START)
    sampler = RecordedSampler(clock, 4, lambda g, now: "bursty")
    agent = make_agent(tmp_path, daemon.url, client, clock, sampler)
    for _ in range(5 * 60):
        agent.tick()
        clock.advance(timedelta(seconds=1))
    with daemon.up():
        agent.shutdown()
    assert daemon.requests > 2  # 20 summaries do not fit in 4 KiB: the agent split them
    assert len(daemon.sink.rows) == 4 * 5
    assert agent.buffer.dropped == 0
