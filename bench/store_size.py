"""store-size: what the store keeps per GPU-minute of readings, with its indexes, in SQLite
and PostgreSQL, in both of its layouts, projected to 1,000 and 10,000 8-GPU hosts over the
default retention.

The readings are an agent's (most of the 28 columns set, as the agent sends them: GPU
utilization and SM activity with their spreads, memory, power, processes, the host's CPU
and memory), with values that vary minute to minute at random (seeded): white noise, a
worse case than a real fleet's series, which move slowly and repeat. They are written
through the store's own `write_minutes`, as ingest writes them, then measured twice:

* as rows (`gpu_readings`, one per GPU-minute): where the hours not yet settled stay;
* settled (`costguard.store.compact`, as the daemon's hourly prune does it): a compressed
  block per instance-hour (`reading_blocks`) and a row of history per instance-hour
  (`reading_hours`, a GPU-hour each), with `reading_series`.

SQLite counts the pages of the tables and their indexes (the `dbstat` table; the file's
growth where SQLite was built without it); PostgreSQL `pg_total_relation_size` (heap,
indexes and TOAST) after VACUUM. The projection holds a host's raw minutes for
`accounting.readings_raw` (7 days; as blocks, but for the two hours still settling, as
rows) and its history for `accounting.readings_history` (395 days). Targets (#63):
<= 40 bytes per raw GPU-minute, <= 200 bytes per GPU-hour of history.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from bench import benchmark
from costguard.model import GpuMinute, TelemetrySource
from costguard.store.compact import compact
from costguard.store.db import Database
from costguard.store.readings import write_minutes
from costguard.store.size import table_bytes

START = datetime(2026, 11, 23, tzinfo=UTC)
HOSTS, GPUS, HOURS = 4, 8, 24  # 46,080 GPU-minutes
RAW_DAYS, HISTORY_DAYS = 7, 395  # accounting.readings_raw and readings_history's defaults
SETTLING_HOURS = 2  # at most, the hours a host's readings stay rows before they settle
ROWS = ("gpu_readings",)
SETTLED = ("reading_blocks", "reading_series")
HISTORY = ("reading_hours",)
GIB = 2**30


def agent_minutes(hosts: int = HOSTS, gpus: int = GPUS, hours: int = HOURS,
                  seed: int = 7, first_hour: int = 0) -> Iterator[list[GpuMinute]]:
    """An agent's readings, one host-hour (gpus x 60 minutes) at a time."""
    rng = random.Random(seed + first_hour)
    for host in range(hosts):
        for hour in range(first_hour, first_hour + hours):
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
    """Write the readings into the store at `url` (created if new); the GPU-minutes
    written."""
    db = Database(url)
    written = 0
    try:
        for batch in agent_minutes(**shape):
            with db.session() as s:
                written += write_minutes(s, batch)
    finally:
        db.dispose()
    return written


def settle(url: str, hours: int = HOURS) -> int:
    """Settle every hour written up to `hours` after START (as the daemon's prune would, two
    hours after the last); the readings taken out of `gpu_readings`."""
    db = Database(url, create=False)
    try:
        now = START + timedelta(hours=hours + 1)
        return compact(db.session, now, raw_since=now - timedelta(days=RAW_DAYS)).readings
    finally:
        db.dispose()


def sqlite_bytes(path: Path, tables: tuple[str, ...] = ROWS) -> tuple[int, str]:
    """The tables' and their indexes' bytes (`costguard.store.size.table_bytes`, as `costguard
    db size` counts them), and how that was measured."""
    db = Database(f"sqlite:///{path}", create=False)
    try:
        with db.engine.connect() as con:
            con.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            sizes, _ = table_bytes(con, tables)
    finally:
        db.dispose()
    if sizes is None:  # built without dbstat
        return path.stat().st_size, "the file's size"
    return sum(sizes.values()), "dbstat pages of the tables and their indexes"


def postgres_bytes(url: str, tables: tuple[str, ...] = ROWS) -> int:
    db = Database(url, create=False)
    try:
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as con:
            for table in tables:
                con.execute(text(f"VACUUM ANALYZE {table}"))
            sizes, _ = table_bytes(con, tables)
            assert sizes is not None
            return sum(sizes.values())
    finally:
        db.dispose()


def row(store: str, minutes: int, size: int, how: str, *, history: int | None = None,
        per_row_minute: float | None = None) -> dict[str, object]:
    """A layout's line: as rows (`history` None), or settled, with its history's bytes and
    the row layout's cost of a minute (the hours still settling stay rows)."""
    per = size / minutes
    gpu_hours = minutes / 60
    if history is None:
        layout = "a row per GPU-minute (gpu_readings)"
        host = per * 1440 * RAW_DAYS * GPUS
        per_hour: float | None = None
    else:
        layout = "settled: a block per instance-hour, history per GPU-hour"
        per_hour = history / gpu_hours
        settling = (per_row_minute or 0.0) * 60 * SETTLING_HOURS * GPUS
        host = (per * 1440 * RAW_DAYS * GPUS + settling
                + per_hour * 24 * HISTORY_DAYS * GPUS)
    met = per <= 40 and (per_hour is None or per_hour <= 200)
    return {"store": store, "layout": layout, "gpu_minutes": minutes, "bytes": size,
            "bytes_per_gpu_minute": round(per, 1),
            "history_bytes_per_gpu_hour": "none kept" if per_hour is None
            else round(per_hour, 1),
            "mb_per_gpu_day_raw": round(per * 1440 / 1e6, 3),
            "gb_1k_hosts": round(host * 1_000 / 1e9, 1),
            "tb_10k_hosts": round(host * 10_000 / 1e12, 2),
            "measured": how,
            "target": "<= 40 B per raw GPU-minute, <= 200 B per GPU-hour of history",
            "met": "yes" if met else "no"}


def _measure(store: str, url: str, size_of: Callable[[tuple[str, ...]], tuple[int, str]]
             ) -> list[dict[str, object]]:
    """Both layouts' lines. Settled, the bytes a second day of readings adds (a store's
    fixed cost, PostgreSQL's free-space maps and index roots among it, left out as it is
    at a fleet's scale)."""
    minutes = fill(url)
    rows_size, how = size_of(ROWS)
    assert settle(url) == minutes, "every hour settles"
    first = size_of(SETTLED)[0], size_of(HISTORY)[0]
    more = fill(url, first_hour=HOURS)
    cpu = time.process_time()
    assert settle(url, hours=2 * HOURS) == more
    settle_ms = (time.process_time() - cpu) * 1000 / (HOSTS * HOURS)
    blocks_size, how = size_of(SETTLED)
    history = size_of(HISTORY)[0]
    settled = row(store, more, blocks_size - first[0], how + "; what a second day adds",
                  history=history - first[1], per_row_minute=rows_size / minutes)
    # what the hourly prune spends settling an 8-GPU host's hour (this process's CPU: the
    # encoding, the history and the driver; PostgreSQL's own server work is not in it)
    settled["settle_cpu_ms_per_instance_hour"] = round(settle_ms, 1)
    return [row(store, minutes, rows_size, how), settled]


@benchmark("store-size",
           description="Bytes the store keeps per GPU-minute of agent readings (white noise, "
                       "4 hosts x 8 GPUs x 24 h written through write_minutes), indexes "
                       "included, SQLite and PostgreSQL: as rows, and settled into blocks "
                       "and hourly history; projected to 1,000 and 10,000 8-GPU hosts over "
                       "the default retention (7 days raw, 395 days of history). Targets "
                       "(#63): <= 40 B per raw GPU-minute, <= 200 B per GPU-hour of history.")
def store_size() -> list[dict[str, object]]:
    from bench.agent import _postgres

    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="costguard-bench-") as tmp:
        path = Path(tmp) / "size.db"
        rows += _measure("sqlite", f"sqlite:///{path}",
                         lambda tables: sqlite_bytes(path, tables))
    with _postgres() as pg:
        if isinstance(pg, str):
            rows.append({"store": "postgresql", "layout": f"skipped: {pg}"})
            return rows
        url = pg.database_url()
        rows += _measure("postgresql", url, lambda tables: (
            postgres_bytes(url, tables), "pg_total_relation_size after VACUUM"))
    return rows
