"""The console under a year of data: page and API latency, and what a /metrics scrape costs.

`console` loads a year of daily rollups for 5,000 instances (the same store as
report-year-rollups) plus the current 10 minutes of raw intervals for all of them, serves
the daemon's app (health, metrics, console, API) on loopback with auth off, and times, from
a client in the same process:
- the overview page and the spend API (`by=team,instance_type`) over 30 and 365 days:
  p50/p99 of 40 requests each after one warm-up; target p99 < 200 ms on 2 cores;
- the cost metrics' refresh after a cycle (once), and one `/metrics` scrape: the CPU of the
  whole process (server and client) per scrape over 200 scrapes, beside what rendering the
  same cost series live on every scrape would cost (the daemon serves a snapshot instead).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import httpx
from prometheus_client import generate_latest

from bench import benchmark
from bench.costs import START, TEAMS, TYPES, year_of_rollups
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.console.app import console_server
from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import PriceCatalog
from costguard.daemon.metrics import DaemonMetrics
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.policy.schema import PolicySet
from costguard.store.db import Database
from costguard.store.inventory import record_inventory

INSTANCES, DAYS = 5_000, 365
REQUESTS = 40
SCRAPES = 200


def current_intervals(db: Database, at: timedelta) -> None:
    """Every instance running now: inventory at the year's end, accrued 10 minutes on."""
    seen_at = START + at
    seen = []
    for i in range(INSTANCES):
        itype, gpus, _ = TYPES[i % len(TYPES)]
        seen.append(Instance(
            provider="aws", account="111111111111", region="us-east-1",
            instance_id=f"i-{i:08d}", instance_type=itype, state=InstanceState.RUNNING,
            gpu_count=gpus, lifecycle=Lifecycle.SPOT if i % 3 == 0 else Lifecycle.ON_DEMAND,
            launch_time=seen_at, observed_at=seen_at,
            tags={"team": str(TEAMS[i % len(TEAMS)])}))
    with db.session() as s:
        record_inventory(s, "aws", seen, seen_at, complete=True)
    with db.session() as s:
        accrue(s, seen_at + timedelta(minutes=10), PriceCatalog().price_of(), Attributor(),
               minutes_of=lambda ref, a, b: [])


def _percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


@benchmark("console",
           description="Console pages and the spend API over a year of rollups for 5,000 "
                       "instances (p99 target < 200 ms on 2 cores), and the CPU of one "
                       "/metrics scrape.")
def console() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        db = Database(url)
        year_of_rollups(db, INSTANCES, DAYS)
        current_intervals(db, timedelta(days=DAYS))
        clock = ManualClock(START + timedelta(days=DAYS, minutes=10))
        settings = Settings(database_url=url)
        metrics = DaemonMetrics()
        t0 = time.perf_counter()
        with db.session() as s:
            metrics.refresh_from_store(s, clock.now(), settings.recommend,
                                       poll_interval=timedelta(minutes=10))
        refresh = time.perf_counter() - t0
        server = console_server(settings, db, clock, PolicySet, metrics=metrics, port=0)
        base = f"http://127.0.0.1:{server.port}"
        try:
            with httpx.Client(base_url=base, timeout=60) as client:
                for window in ("30d", "365d"):
                    for what, path in (
                            ("overview page", f"/console/?window={window}"),
                            ("spend API by team,instance_type",
                             f"/api/v1/spend?window={window}&by=team,instance_type")):
                        assert client.get(path).status_code == 200  # warm-up
                        took = []
                        for _ in range(REQUESTS):
                            started = time.perf_counter()
                            r = client.get(path)
                            took.append(time.perf_counter() - started)
                            assert r.status_code == 200, r.text[:200]
                        p50, p99 = _percentiles(took)
                        rows.append({"what": what, "window": window, "requests": REQUESTS,
                                     "p50_ms": round(p50, 1), "p99_ms": round(p99, 1),
                                     "bytes": len(r.content)})
                cpu0 = time.process_time()
                for _ in range(SCRAPES):
                    body = client.get("/metrics").content
                scrape_cpu = (time.process_time() - cpu0) / SCRAPES
            cpu0 = time.process_time()
            for _ in range(20):
                generate_latest(metrics.cost.registry)
            live_cpu = (time.process_time() - cpu0) / 20
        finally:
            server.stop()
            db.dispose()
        series = body.count(b"\ncostguard_instance_hourly_cost_usd{")
        rows.append({"what": "/metrics scrape (snapshot), CPU per scrape", "window": "-",
                     "requests": SCRAPES, "p50_ms": round(scrape_cpu * 1000, 2),
                     "p99_ms": "-", "bytes": len(body)})
        rows.append({"what": f"rendering the {series:,} instances' cost series live, CPU",
                     "window": "-", "requests": 20, "p50_ms": round(live_cpu * 1000, 1),
                     "p99_ms": "-", "bytes": "-"})
        rows.append({"what": "cost metrics refresh after a cycle (once)", "window": "-",
                     "requests": 1, "p50_ms": round(refresh * 1000), "p99_ms": "-",
                     "bytes": "-"})
    return rows
