"""The leader's refresh of its cost gauges after a cycle, through a day.

`metrics-refresh-day`: 10,000 running instances accrued every 5 minutes (a cost interval per
instance and cycle, written as the accrual writes them) on a store that holds the week before
as daily rollups, as a store does once the prune has rolled it up, and the raw intervals of
that week's first day (a store keeps 35 days of them: the budgets' 7-day run-rate window
reads its first, partial day raw; the days between from the rollups). At four hours of the day
the refresh after a cycle is timed two ways: as the daemon runs it (its gauges' hours kept
from the refresh before, costs/spend_sums.py) and read whole (a fresh set of gauges: what
every refresh read before the hours were kept). The intervals are written for the timed
hours' cycles only up to each checkpoint, so the day's rows grow as a day's do.
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert

from bench import benchmark
from bench.costs import TEAMS, TYPES
from costguard.costs.rollup import DAILY, RAW, ROLLED_UP_UNTIL, rebuild_summaries
from costguard.daemon.cost_metrics import CostMetrics
from costguard.policy.spend import Budget
from costguard.report.queries import spend
from costguard.store import control
from costguard.store.db import Database

DAY = datetime(2026, 11, 16, tzinfo=UTC)  # the month's history: from the 9th, rolled up
INSTANCES = 10_000
CYCLE = timedelta(minutes=5)
CHECKPOINTS = (1, 6, 12, 23)  # the hours whose last cycle is timed
BUDGETS = (Budget(name="research", dimension="team", value="research", monthly_usd=50_000),
           Budget(name="ml-platform", dimension="team", value="ml-platform",
                  monthly_usd=20_000),
           Budget(name="p4d", dimension="family", value="p4d", monthly_usd=90_000))


# an instance's columns, its price per hour and its GPUs
Member = tuple[dict[str, object], float, int]


def _fleet() -> list[Member]:
    out: list[Member] = []
    for i in range(INSTANCES):
        itype, gpus, usd = TYPES[i % len(TYPES)]
        out.append(({"provider": "aws", "instance_id": f"i-{i:08d}", "account": "111111111111",
                     "region": "us-east-1", "instance_type": itype,
                     "lifecycle": "spot" if i % 3 == 0 else "on-demand", "state": "running",
                     "gpu_count": gpus, "team": TEAMS[i % len(TEAMS)]}, usd, gpus))
    return out


def _week_rolled_up(db: Database, fleet: list[Member]) -> None:
    """The 7 days before DAY as daily rows, summarized as rollup leaves them."""
    names = list(DAILY.c.keys())[1:]
    with db.engine.begin() as conn:
        stmt = insert(DAILY).compile(dialect=conn.dialect, column_keys=names)
        bind = DAILY.c.day.type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
        assert bind is not None and stmt.positiontup == names
        rows = []
        for d in range(7, 0, -1):
            day = bind(DAY - timedelta(days=d))
            for f, usd, gpus in fleet:
                cost, gsec = round(usd * 24 * 1e6), gpus * 86_400
                row = {**f, "day": day, "instance_seconds": 86_400, "cost_micros": cost,
                       "idle_cost_micros": 0, "gpu_seconds": gsec, "idle_gpu_seconds": 0,
                       "project": None, "env": None, "cost_center": None}
                rows.append(tuple(row[n] for n in names))
        conn.exec_driver_sql(stmt.string, rows)
    with db.session() as s:
        control.put(s, ROLLED_UP_UNTIL, DAY.isoformat(), DAY)
        rebuild_summaries(s)


class _Accrual:
    """A cycle's cost intervals, one per instance from the last cycle to this one, written
    as tuples through the driver (as costs/accrual.py writes them)."""

    def __init__(self, db: Database, fleet: list[Member]) -> None:
        self.db = db
        names = [c.key for c in RAW.c if c.key != "id"]
        with db.engine.connect() as conn:
            self.stmt = insert(RAW).compile(dialect=conn.dialect, column_keys=names)
            self.bind = RAW.c.start.type.dialect_impl(conn.dialect).bind_processor(
                conn.dialect)
        assert self.bind is not None and self.stmt.positiontup == names
        self.at = names.index("start"), names.index("end")
        hours = CYCLE.total_seconds() / 3600
        self.rows_of: list[list[object]] = []  # each instance's row, its times to fill in
        for i, (f, usd, gpus) in enumerate(fleet):
            cost, gsec = round(usd * hours * 1e6), gpus * int(CYCLE.total_seconds())
            idle = i % 5 == 0
            row = {**f, "start": None, "end": None, "usd_per_hour": usd,
                   "price_source": "bench", "cost_micros": cost, "gpu_seconds": gsec,
                   "idle_gpu_seconds": gsec if idle else 0,
                   "idle_cost_micros": cost if idle else 0,
                   "verdict": "idle" if idle else "active", "project": None, "env": None,
                   "cost_center": None}
            self.rows_of.append([row[n] for n in names])
        self.rows = 0

    def cycle(self, start: datetime) -> None:
        assert self.bind is not None
        a, z = self.bind(start), self.bind(start + CYCLE)
        i, j = self.at
        batch = []
        for row in self.rows_of:
            row[i], row[j] = a, z
            batch.append(tuple(row))
        with self.db.engine.begin() as conn:
            conn.exec_driver_sql(self.stmt.string, batch)
        self.rows += len(batch)


def _samples(metrics: CostMetrics) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value)
            for family in text_string_to_metric_families(metrics.text.decode())
            for s in family.samples}


def _refresh(db: Database, metrics: CostMetrics, now: datetime) -> float:
    """CPU seconds of one refresh of the cost gauges, as the daemon runs it after a cycle."""
    t0 = time.process_time()
    with db.session() as s:
        hour = spend(s, ["instance"], now - timedelta(hours=1), now)
        metrics.refresh(s, now, hour, budgets=BUDGETS)
    return time.process_time() - t0


@benchmark("metrics-refresh-day", description=(
    "The leader's refresh of its cost gauges (spend today and this month by team, three "
    "budgets' spend and forecast, each running instance's price, the last hour's idle "
    "spend) after a cycle, at 01:55, 06:55, 12:55 and 23:55 of a day of 5-minute cycles "
    "over 10,000 running instances (SQLite; the week before rolled up into days): as the "
    "daemon runs it, the day's whole hours kept between refreshes, and read whole as "
    "every refresh was before; and, hours kept, the next hour's first refresh (which adds "
    "the hour that ended, and takes off the hour each budget's run-rate window left). CPU "
    "seconds of the process."))
def metrics_refresh_day() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        fleet = _fleet()
        _week_rolled_up(db, fleet)
        accrual = _Accrual(db, fleet)
        # the raw intervals of the run-rate window's first day, kept as a store keeps 35
        # days of them (the days between are read from their rollups)
        for k in range(int(timedelta(days=1) / CYCLE)):
            accrual.cycle(DAY - timedelta(days=7) + k * CYCLE)
        accrual.rows = 0
        kept = CostMetrics()
        at = DAY
        for hour in CHECKPOINTS:
            last = DAY + timedelta(hours=hour, minutes=55)
            while at < last - CYCLE:
                accrual.cycle(at)
                at += CYCLE
            _refresh(db, kept, at)  # the refresh after the cycle before: hours kept up to it
            accrual.cycle(at)
            at += CYCLE
            kept_s = _refresh(db, kept, at)
            whole = CostMetrics()
            whole_s = _refresh(db, whole, at)
            if _samples(whole) != _samples(kept):
                raise AssertionError(f"the kept gauges differ from those read whole at {at}")
            intervals = accrual.rows
            accrual.cycle(at)  # and the next hour's first refresh: the ended hour is added,
            at += CYCLE  # the hour each budget's run-rate window left taken off
            first_s = _refresh(db, kept, at)
            rows.append({"time": f"{at - CYCLE:%H:%M}", "instances": INSTANCES,
                         "intervals_today": intervals,
                         "refresh_cpu_s_hours_kept": round(kept_s, 2),
                         "refresh_cpu_s_read_whole": round(whole_s, 2),
                         "same_gauges": "yes",
                         "hours_kept_next_hour_s_first_refresh": round(first_s, 2)})
        db.dispose()
    return rows
