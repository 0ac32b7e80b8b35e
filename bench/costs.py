"""Cost benchmarks: report latency over a year of daily rollups, and one accrual cycle.

- report-year-rollups: 5,000 instances x 365 days = 1.8 M daily rows (bulk-inserted into a
  temporary SQLite file, then summarized per day as rollup does), `spend(by=team)` over
  the year; target < 1 s.
- accrual-cycle: 10,000 running instances, one `accrue` call (10 minutes since the last),
  three times on fresh stores (the spread shows the machine's noise); target < 0.5 s. The
  setup's garbage is collected before the clock starts (timeit goes further and turns the
  collector off): otherwise the 10,000 domain objects the setup made can set off a full
  collection (~0.1 s here) inside the timed call, a debt of the setup, not of accrual.
"""

from __future__ import annotations

import gc
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from bench import benchmark
from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import PriceCatalog
from costguard.costs.rollup import DAILY, ROLLED_UP_UNTIL, rebuild_summaries
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.report.queries import catalog_spot_price, spend
from costguard.store import control
from costguard.store.db import Database
from costguard.store.inventory import record_inventory

START = datetime(2025, 1, 1, tzinfo=UTC)
TEAMS = ["research", "ml-platform", "vision", "nlp", "recsys", "ads", "search", None]
TYPES = [("p4d.24xlarge", 8, 32.77), ("g5.xlarge", 1, 1.006), ("g5.12xlarge", 4, 5.672),
         ("m5.large", 0, 0.096)]


@benchmark("report-year-rollups",
           description="costguard report --by team over one year of daily rollups "
                       "(5,000 instances, 1.8 M rows, SQLite); target < 1 s.")
def report_year_rollups() -> list[dict[str, object]]:
    instances, days = 5_000, 365
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        load, summarize = year_of_rollups(db, instances, days)
        spot = catalog_spot_price(PriceCatalog())
        rows: list[dict[str, object]] = []
        for run in range(3):
            started = time.perf_counter()
            with db.session() as s:
                report = spend(s, ["team"], START, START + timedelta(days=days),
                               spot_price=spot)
            seconds = time.perf_counter() - started
            rows.append({"run": run + 1, "daily_rows": instances * days,
                         "groups": len(report.rows), "seconds": round(seconds, 3),
                         "load_seconds": round(load, 1),
                         "summarize_seconds": round(summarize, 1)})
        db.dispose()
    return rows


def year_of_rollups(db: Database, instances: int, days: int) -> tuple[float, float]:
    """`days` of daily rows for `instances` from START (one in five instance-days idle),
    summarized as rollup does; returns the seconds to load and to summarize."""
    t0 = time.perf_counter()
    with db.engine.begin() as conn:
        # the driver gets ready tuples (the day bound once per day): binding 1.8 M
        # dicts through SQLAlchemy took most of a minute
        names = list(DAILY.c.keys())[1:]  # all but the autoincrement id
        stmt = insert(DAILY).compile(dialect=conn.dialect, column_keys=names)
        assert stmt.positiontup == names and names[0] == "day"
        bind_day = DAILY.c.day.type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
        assert bind_day is not None
        fleet = []  # per instance: its row with and without a day's idle spend
        for i in range(instances):
            itype, gpus, usd = TYPES[i % len(TYPES)]
            cost = round(usd * 24 * 1e6)
            row = {
                "day": None, "provider": "aws", "instance_id": f"i-{i:08d}",
                "account": "111111111111", "region": "us-east-1",
                "instance_type": itype, "lifecycle": "spot" if i % 3 == 0 else
                "on-demand", "state": "running", "gpu_count": gpus,
                "instance_seconds": 86_400, "cost_micros": cost,
                "idle_cost_micros": 0, "gpu_seconds": gpus * 86_400,
                "idle_gpu_seconds": 0, "team": TEAMS[i % len(TEAMS)], "project": None,
                "env": None, "cost_center": None}
            busy = tuple(row[n] for n in names[1:])
            row.update(idle_cost_micros=cost, idle_gpu_seconds=gpus * 86_400)
            fleet.append((busy, tuple(row[n] for n in names[1:])))
        batch: list[tuple[object, ...]] = []
        for d in range(days):
            day = bind_day(START + timedelta(days=d))
            batch.extend((day, *fleet[i][(i + d) % 5 == 0]) for i in range(instances))
            if len(batch) >= 50_000:
                conn.exec_driver_sql(stmt.string, batch)
                batch = []
        if batch:
            conn.exec_driver_sql(stmt.string, batch)
    with db.session() as s:
        end = START + timedelta(days=days)
        control.put(s, ROLLED_UP_UNTIL, end.isoformat(), end)
    load = time.perf_counter() - t0
    # the daily rows were written directly, not by rollup(): derive the summary and
    # run tables the way an upgraded store does at its next rollup
    t0 = time.perf_counter()
    with db.session() as s:
        rebuild_summaries(s)
    return load, time.perf_counter() - t0


@benchmark("accrual-cycle",
           description="One accrue() over 10,000 running instances (SQLite); target < 0.5 s.")
def accrual_cycle() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for fleet, run in [(n, r) for n in (1_000, 10_000) for r in (1, 2, 3)]:
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
            at = START
            seen = []
            for i in range(fleet):
                itype, gpus, _ = TYPES[i % len(TYPES)]
                seen.append(Instance(
                    provider="sim", account="111111111111", region="us-east-1",
                    instance_id=f"i-{i:08d}", instance_type=itype,
                    state=InstanceState.RUNNING, gpu_count=gpus,
                    lifecycle=Lifecycle.SPOT if i % 3 == 0 else Lifecycle.ON_DEMAND,
                    launch_time=at, observed_at=at, tags={"team": str(TEAMS[i % 7])}))
            with db.session() as s:
                record_inventory(s, "sim", seen, at, complete=True)
            catalog = PriceCatalog()
            now = at + timedelta(minutes=10)
            del seen
            gc.collect()
            started = time.perf_counter()
            with db.session() as s:
                stats = accrue(s, now, catalog.price_of(), Attributor(),
                               minutes_of=lambda ref, a, b: [])
            seconds = time.perf_counter() - started
            rows.append({"instances": fleet, "run": run, "intervals": stats.intervals,
                         "seconds": round(seconds, 3),
                         "per_second": round(fleet / seconds)})
            db.dispose()
    return rows
