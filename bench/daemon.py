"""The daemon over a simulated day: memory stays flat, and an idle daemon costs ~no CPU.

`daemon-soak` drives the real `Daemon.cycle_job` (leader check, cycle lock, engine cycle,
metrics refresh, stage logs) over 24 simulated hours of the seeded sim fleet on a
ManualClock, a cycle every 5 simulated minutes (the default poll interval) and the prune
job as the daemon schedules it (`Prunes`), against a SQLite file, and samples the
process's resident memory. Growth is measured from the end of the first simulated hours
(caches and the reading window fill up there) to the end of the day.

`daemon-idle` starts the whole service (scheduler, HTTP server on loopback) and measures
the CPU it uses between cycles.
"""

from __future__ import annotations

import gc
import logging
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench import benchmark
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.daemon.scheduler import Daemon
from costguard.daemon.settings import DaemonSettings
from costguard.demo.sim import SimProvider
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.store.db import Database

START = datetime(2026, 11, 16, 0, 0, tzinfo=UTC)  # a Monday: office hours and a night
POLICIES = Path(__file__).resolve().parent.parent / "policies"
SOAK_HOURS = 24
CYCLE = timedelta(minutes=5)  # the default poll_interval
WARMUP = timedelta(hours=3)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Prunes:
    """The daemon's prune job on a simulated clock, as `Daemon.start` schedules it: a minute
    after the start (or its interval, if shorter), then every `prune_interval`."""

    def __init__(self, daemon: Daemon, start: datetime) -> None:
        self.daemon = daemon
        self.due = start + min(daemon.cfg.prune_interval, timedelta(minutes=1))
        self.runs: list[tuple[float, int]] = []  # (seconds, readings settled) of each

    def run_due(self, now: datetime) -> None:
        """Run the prune if it came due by `now` (between two cycles)."""
        if now < self.due:
            return
        t0 = time.perf_counter()
        done = self.daemon.prune_job()
        if not done:
            raise RuntimeError("the prune failed")
        self.runs.append((time.perf_counter() - t0, done["settled_readings"]))
        self.due += self.daemon.cfg.prune_interval


def _daemon(root: Path, clock: ManualClock, *, http: bool, poll: timedelta) -> Daemon:
    settings = Settings(database_url=f"sqlite:///{root / 'cg.db'}", policy_paths=[POLICIES],
                        poll_interval=poll, alerts={"console": True},
                        http={"port": 8787})
    assert settings.providers.sim is not None
    db = Database(settings.database_url)
    engine = Engine(settings, db, {"sim": SimProvider(settings.providers.sim, clock)},
                    load_policy_set(settings.policy_paths), clock,
                    alert_printer=lambda kind, subject, body: None)
    cfg = DaemonSettings(http_enabled=http, leader_election="auto")
    return Daemon(engine, settings, cfg, http_port=0)


@benchmark("daemon-soak", description="24 simulated hours of daemon cycles, with the hourly "
           "prune on the daemon's schedule (settling readings into blocks): time and memory.")
def daemon_soak() -> list[dict[str, object]]:
    logging.getLogger("costguard").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        clock = ManualClock(START)
        daemon = _daemon(Path(tmp), clock, http=False, poll=CYCLE)
        cycles = int(timedelta(hours=SOAK_HOURS) / CYCLE)
        prunes = Prunes(daemon, START)
        warm_rss = 0.0
        samples: list[float] = []
        started = time.perf_counter()
        cpu0 = time.process_time()
        for i in range(cycles):
            if daemon.cycle_job() is None:
                raise RuntimeError(f"cycle {i} failed: {daemon.state.last_error}")
            clock.advance(CYCLE)
            prunes.run_due(clock.now())
            if clock.now() - START == WARMUP:
                gc.collect()
                warm_rss = rss_mib()
            if i % 12 == 0:
                samples.append(rss_mib())
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        gc.collect()
        end_rss = rss_mib()
        daemon.leadership.release()
        daemon.engine.db.dispose()
    growth = (end_rss - warm_rss) / warm_rss * 100
    if growth >= 10:
        raise AssertionError(f"RSS grew {growth:.1f}% over the simulated day (limit 10%)")
    return [{"simulated_hours": SOAK_HOURS, "cycles": cycles, "seconds": seconds,
             "ms_per_cycle": seconds / cycles * 1000, "cpu_seconds": cpu,
             "rss_mib_after_warmup": warm_rss, "rss_mib_end": end_rss,
             "rss_mib_peak": max([*samples, end_rss]), "rss_growth_pct": growth,
             "prunes": len(prunes.runs),
             "readings_settled": sum(settled for _, settled in prunes.runs)}]


@benchmark("daemon-idle", description="CPU the running service uses between cycles, and "
           "scraped once a second (the scraper is a kept-alive client in the same process: "
           "its CPU is counted too).")
def daemon_idle() -> list[dict[str, object]]:
    logging.getLogger("costguard").setLevel(logging.WARNING)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        clock = ManualClock(START)
        daemon = _daemon(Path(tmp), clock, http=True, poll=timedelta(hours=1))
        daemon.start()
        try:
            deadline = time.monotonic() + 30
            while daemon.cycles_run < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert daemon.http is not None
            # one kept-alive client, as Prometheus scrapes: a fresh httpx.get per scrape
            # builds an SSL context each time (~50 ms of this process's CPU), which is the
            # client's cost, not the daemon's
            client = httpx.Client(base_url=f"http://127.0.0.1:{daemon.http.port}")
            client.get("/metrics")
            for scrape_every in (None, 1.0):
                window = 10.0
                cpu0, wall0 = time.process_time(), time.perf_counter()
                next_scrape = 0.0
                while time.perf_counter() - wall0 < window:
                    if scrape_every is not None and time.perf_counter() - wall0 >= next_scrape:
                        client.get("/metrics")
                        next_scrape += scrape_every
                    time.sleep(0.25)
                cpu = time.process_time() - cpu0
                wall = time.perf_counter() - wall0
                rows.append({"state": "idle between cycles" if scrape_every is None else
                             "idle, /metrics scraped", "wall_seconds": wall,
                             "cpu_seconds": cpu, "cpu_percent_of_one_core": cpu / wall * 100,
                             "rss_mib": rss_mib()})
            client.close()
        finally:
            daemon.shutdown()
            daemon.engine.db.dispose()
    return rows


# 140 simulated minutes: the reading window (the longest idle window, 1 h, plus the 15 minutes
# a reading stays past it) fills in the first 75; the daemon's hourly prune runs on its
# schedule (a minute in, then every hour): the one at 02:01 settles the first hour's readings
# into blocks; the last cycles, after it, show the steady figure
RSS_CYCLES = 28
# then the daemon is down this long: its next cycle reads the downtime's metrics (up to
# MAX_TELEMETRY_LOOKBACK), stores them and prices the downtime from the store: the
# highest its memory goes
DOWNTIME_HOURS = 6
FLAT_OVER = 4  # cycles at the end over which the growth is measured


def _rss_after_cycles(n: int, allocator: str = "glibc") -> dict[str, object]:
    """A fresh process (so the figure is this fleet's alone): the daemon's cycle over a
    simulated fleet of `n` instances, RSS after each cycle. `allocator` "jemalloc": the
    process runs as the image runs the daemon (`JEMALLOC_ENV`)."""
    code = f"""
import gc, json, logging, sys, tempfile, time
from datetime import timedelta
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from bench.daemon import START, POLICIES, Prunes, rss_mib
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.daemon.scheduler import Daemon
from costguard.daemon.settings import DaemonSettings
from costguard.demo.sim import SimProvider
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.store.db import Database
logging.getLogger("costguard").setLevel(logging.WARNING)
tmp = Path(tempfile.mkdtemp())
clock = ManualClock(START)
settings = Settings(database_url=f"sqlite:///{{tmp / 'cg.db'}}", policy_paths=[POLICIES],
                    alerts={{"console": False}}, providers={{"sim": {{"instances": {n}}}}})
engine = Engine(settings, Database(settings.database_url),
                {{"sim": SimProvider(settings.providers.sim, clock)}},
                load_policy_set(settings.policy_paths), clock, alert_printer=lambda *a: None)
daemon = Daemon(engine, settings, DaemonSettings(http_enabled=False), http_port=0)
start_rss = rss_mib()
rss, seconds = [], []
prunes = Prunes(daemon, START)
for _ in range({RSS_CYCLES}):
    t0 = time.perf_counter()
    assert daemon.cycle_job() is not None, daemon.state.last_error
    seconds.append(time.perf_counter() - t0)
    clock.advance(timedelta(minutes=5))
    prunes.run_due(clock.now())
    gc.collect()
    rss.append(rss_mib())
gpu = sum(1 for i in engine._current_instances() if i.has_gpu)
import resource
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
clock.advance(timedelta(hours={DOWNTIME_HOURS}))  # the daemon was down: the catch-up cycle
t0 = time.perf_counter()
assert daemon.cycle_job() is not None, daemon.state.last_error
down_s = time.perf_counter() - t0
down_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"start": start_rss, "rss": rss, "seconds": seconds, "gpu": gpu,
                  "prunes": prunes.runs,
                  "peak_before_downtime": before, "downtime_peak": down_peak,
                  "downtime_s": down_s}}))
"""
    import json
    import subprocess
    import sys

    from costguard.heap import JEMALLOC_ENV

    env = {**os.environ, **(JEMALLOC_ENV if allocator == "jemalloc" else {})}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=900, env=env)
    if allocator == "jemalloc" and "<jemalloc>" in done.stderr:  # a setting it refused
        raise RuntimeError(done.stderr[-2000:])
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return {"instances": n, "allocator": allocator, "gpu_instances": got["gpu"],
            "cycles": RSS_CYCLES,
            "rss_mib_at_start": round(got["start"]),
            "rss_mib_after_1st": round(got["rss"][0]),
            "rss_mib_after_6": round(got["rss"][5]),
            "rss_mib_after_last": round(got["rss"][-1]),
            f"growth_mib_per_cycle_last_{FLAT_OVER}": round(
                (got["rss"][-1] - got["rss"][-1 - FLAT_OVER]) / FLAT_OVER, 1),
            "last_cycle_s": round(got["seconds"][-1], 1),
            "prunes": len(got["prunes"]),
            "readings_settled": sum(settled for _, settled in got["prunes"]),
            "longest_prune_s": round(max(s for s, _ in got["prunes"]), 1),
            "under_120mb": got["rss"][-1] < 120,
            "peak_rss_mib_before_downtime": round(got["peak_before_downtime"]),
            f"peak_rss_mib_after_{DOWNTIME_HOURS}h_down": round(got["downtime_peak"]),
            f"cycle_s_after_{DOWNTIME_HOURS}h_down": round(got["downtime_s"], 1)}


@benchmark("daemon-rss", description=(
    "Resident memory of the daemon's cycles over simulated fleets of 1,000, 3,000 and 10,000 "
    "instances, each in a fresh process, 5-minute cycles for 140 simulated minutes: the hour "
    "of readings the idle policies look back on is held from the 75th, and the daemon's "
    "hourly prune runs on its schedule (a minute in, then every hour; the one at 02:01 "
    "settles the first hour's readings into blocks), so the last cycles are a daemon's "
    "steady state (the simulated cloud lives in the same process and counts too); then one "
    "cycle after 6 hours down, which reads and prices the downtime's metrics (its peak; the "
    "prune a restarted daemon runs a minute later is not in it). The last row runs 10,000 on "
    "jemalloc as the image does (deploy/Dockerfile), where the library is installed. "
    "Target (#22): < 120 MB at 10,000 instances."))
def daemon_rss() -> list[dict[str, object]]:
    from costguard.heap import jemalloc_installed

    rows = [_rss_after_cycles(n) for n in (1_000, 3_000, 10_000)]
    if jemalloc_installed():  # the image's allocator (deploy/Dockerfile)
        rows.append(_rss_after_cycles(10_000, "jemalloc"))
    else:
        rows.append({"instances": 10_000, "allocator": "jemalloc: not found (Debian: "
                     "apt-get install libjemalloc2), not measured"})
    return rows
