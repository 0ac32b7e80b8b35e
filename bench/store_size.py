"""store-size: what the store keeps per GPU-minute of readings, with its indexes, in SQLite
and PostgreSQL, projected to 1,000 and 10,000 8-GPU hosts over the raw retention.

The readings are an agent's (most of the 28 columns set, as the agent sends them: GPU
utilization and SM activity with their spreads, memory, power, processes, the host's CPU
and memory), with values that vary minute to minute as real ones do (random, seeded: a
store cannot compress a flat series away where a real fleet would not give it one). They
are written through the store's own `write_minutes`, as ingest writes them. SQLite counts
the pages of the readings table and its indexes (the `dbstat` table; the file's growth
where SQLite was built without it); PostgreSQL `pg_total_relation_size` (heap, indexes and
TOAST) after VACUUM.

This measures today's layout (one row per GPU-minute). The telemetry redesign's target is
<= 40 bytes per raw GPU-minute and <= 200 bytes per GPU-hour of history; a row is set here
for each layout the store has.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from bench import benchmark
from costguard.model import GpuMinute, TelemetrySource
from costguard.store.db import Database
from costguard.store.readings import write_minutes

START = datetime(2026, 11, 23, tzinfo=UTC)
HOSTS, GPUS, HOURS = 4, 8, 24  # 46,080 GPU-minutes
RETENTION_DAYS = 35  # telemetry.raw_retention's default
GIB = 2**30


def agent_minutes(hosts: int = HOSTS, gpus: int = GPUS, hours: int = HOURS,
                  seed: int = 7) -> Iterator[list[GpuMinute]]:
    """An agent's readings, one host-hour (gpus x 60 minutes) at a time."""
    rng = random.Random(seed)
    for host in range(hosts):
        for hour in range(hours):
            batch = []
            for minute in range(60):
                at = START + timedelta(hours=hour, minutes=minute)
                cpu = rng.uniform(2, 90)
                for gpu in range(gpus):
                    util = rng.uniform(0, 100)
                    sm = util * rng.uniform(0.3, 0.9)
                    batch.append(GpuMinute(
                        provider="aws", instance_id=f"i-0bench{host:011d}", gpu_index=gpu,
                        minute=at, source=TelemetrySource.AGENT, samples=60,
                        util_mean=util, util_p95=min(100.0, util * 1.1), util_max=min(
                            100.0, util * 1.2), util_active_share=rng.random(),
                        sm_mean=sm, sm_p95=min(100.0, sm * 1.1), sm_max=min(100.0, sm * 1.2),
                        mem_used_bytes=rng.randrange(1, 80) * GIB, mem_total_bytes=80 * GIB,
                        power_w_mean=rng.uniform(60, 700), process_count=rng.randrange(0, 4),
                        top_process_pid=rng.randrange(1000, 99999),
                        top_process_bytes=rng.randrange(1, 80) * GIB,
                        tensor_mean=sm * rng.random(), dram_bw_mean=rng.uniform(0, 90),
                        host_cpu_pct=cpu, host_iowait_pct=rng.uniform(0, 5), host_cpus=96,
                        host_hot_cores=rng.randrange(0, 96),
                        host_mem_used_bytes=rng.randrange(10, 1000) * GIB,
                        host_mem_total_bytes=1152 * GIB, power_limit_w=700.0))
            yield batch


def fill(url: str, **shape: int) -> int:
    """Write the readings into a fresh store at `url`; the GPU-minutes written."""
    db = Database(url)
    written = 0
    try:
        for batch in agent_minutes(**shape):
            with db.session() as s:
                written += write_minutes(s, batch)
    finally:
        db.dispose()
    return written


def sqlite_bytes(path: Path) -> tuple[int, str]:
    """The readings' table and indexes, in bytes, and how that was measured."""
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        try:
            rows = con.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = 'gpu_readings' "
                               "OR name IN (SELECT name FROM sqlite_master WHERE "
                               "tbl_name = 'gpu_readings' AND type = 'index')").fetchone()
            return int(rows[0] or 0), "dbstat pages of the table and its indexes"
        except sqlite3.OperationalError:  # built without dbstat
            return path.stat().st_size, "the file's size"
    finally:
        con.close()


def postgres_bytes(url: str) -> int:
    db = Database(url, create=False)
    try:
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as con:
            con.execute(text("VACUUM ANALYZE gpu_readings"))
            return int(con.execute(text(
                "SELECT pg_total_relation_size('gpu_readings')")).scalar_one())
    finally:
        db.dispose()


def row(store: str, minutes: int, size: int, how: str) -> dict[str, object]:
    per = size / minutes
    fleet = per * 1440 * RETENTION_DAYS * GPUS  # one 8-GPU host over the retention
    return {"store": store, "layout": "a row per GPU-minute (today)",
            "gpu_minutes": minutes, "bytes": size, "bytes_per_gpu_minute": round(per, 1),
            "mb_per_gpu_day": round(per * 1440 / 1e6, 2),
            f"gb_1k_hosts_{RETENTION_DAYS}d": round(fleet * 1_000 / 1e9, 1),
            f"tb_10k_hosts_{RETENTION_DAYS}d": round(fleet * 10_000 / 1e12, 2),
            "history_bytes_per_gpu_hour": "none kept", "measured": how,
            "target": "<= 40 B per raw GPU-minute (the telemetry redesign's)"}


@benchmark("store-size",
           description="Bytes the store keeps per GPU-minute of agent readings, indexes "
                       "included, SQLite and PostgreSQL, and what 1,000 and 10,000 8-GPU "
                       "hosts keep over the 35-day raw retention (4 hosts x 8 GPUs x 24 h "
                       "written through write_minutes).")
def store_size() -> list[dict[str, object]]:
    from bench.agent import _postgres

    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="costguard-bench-") as tmp:
        path = Path(tmp) / "size.db"
        minutes = fill(f"sqlite:///{path}")
        size, how = sqlite_bytes(path)
        rows.append(row("sqlite", minutes, size, how))
    with _postgres() as pg:
        if isinstance(pg, str):
            rows.append({"store": "postgresql", "layout": f"skipped: {pg}"})
            return rows
        url = pg.database_url()
        minutes = fill(url)
        rows.append(row("postgresql", minutes, postgres_bytes(url),
                        "pg_total_relation_size after VACUUM"))
    return rows
