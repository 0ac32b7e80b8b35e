"""The agent benchmarks' helpers: /proc readings, request bodies, and short real runs."""

from __future__ import annotations

import json
import mmap
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.agent import (
    GPUS,
    INGEST_AGENTS,
    BatchMaker,
    IngestRun,
    _row,
    cpu_seconds,
    measure_agents,
    measure_ingest,
    memory_mb,
)
from costguard.telemetry.ingest import minute_key, parse_batch


def test_cpu_seconds_grow_with_work_done_by_the_process() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.1


def test_memory_reads_current_and_peak_resident_size() -> None:
    before = memory_mb(os.getpid())
    # fresh anonymous pages (a bytearray may reuse memory the allocator already holds
    # resident from earlier tests in the same worker, and then RSS does not grow)
    block = mmap.mmap(-1, 40 * 2**20)
    for offset in range(0, len(block), 4096):  # touch every page so it is resident
        block[offset] = 1
    after = memory_mb(os.getpid())
    assert after["VmRSS"] - before["VmRSS"] >= 30
    assert after["VmHWM"] >= after["VmRSS"]
    block.close()


def test_batch_bodies_are_valid_summaries_that_never_repeat_a_key() -> None:
    maker = BatchMaker(480, run="t")
    keys = set()
    for thread in (0, 1):
        for request in (0, 1):
            minutes = parse_batch(json.loads(maker.body(thread, request)), datetime.now(UTC))
            assert len(minutes) == 480
            assert {m.gpu_index for m in minutes} == set(range(GPUS))
            keys.update(minute_key(m) for m in minutes)
    assert len(keys) == 4 * 480
    with pytest.raises(ValueError, match="whole number"):
        BatchMaker(7, run="t")


def test_ingest_run_stores_every_summary_it_counts(tmp_path: Path) -> None:
    run = measure_ingest(f"sqlite:///{tmp_path / 'ingest.db'}", 8, seconds=0.5, threads=2)
    assert run.requests > 0
    assert len(run.latencies_s) == run.requests
    assert run.summaries == 8 * run.requests
    assert run.stored == run.summaries + 2 * 3 * 8  # plus each thread's warm-up requests
    assert run.server_cpu_s > 0


def test_a_row_names_its_setup_and_refuses_a_run_that_lost_writes() -> None:
    sent = 10 * 8
    run = IngestRun(seconds=2.0, requests=10, summaries=sent, latencies_s=[0.01] * 10,
                    server_cpu_s=0.5, client_cpu_s=0.1, stored=sent + INGEST_AGENTS * 3 * 8,
                    load_before=1.0)
    row = _row("sqlite", 8, run, 2)
    assert (row["store"], row["batch"], row["agents"], row["run"]) == ("sqlite", 8, 4, 2)
    assert row["summaries_per_s"] == 40 and row["summaries_per_server_cpu_s"] == 160
    assert row["cores"] == os.cpu_count() and row["load_1m_before"] == 1.0
    lost = IngestRun(**{**run.__dict__, "stored": run.stored - 1})
    with pytest.raises(RuntimeError, match="rows stored"):
        _row("sqlite", 8, lost, 1)


def test_agent_run_measures_the_real_command_and_counts_its_pushes() -> None:
    results = measure_agents(window_s=1.0, gpus=2, settle_s=0.5)
    assert [r.entry for r in results] == ["cli", "agent-app"]
    for r in results:
        assert r.exit_code == 0, r
        # SIGTERM keeps the partial minute: one summary per GPU (two if a minute turned)
        assert r.minutes_total in (2, 4), r
        assert r.samples_total >= 2 * 2, r
        assert 0 < r.rss_mb <= r.peak_rss_mb, r
        assert r.startup_cpu_s > 0, r
