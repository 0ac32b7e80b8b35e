"""Efficiency verdicts over a week of readings, as a store holds them after a week.

efficiency-week: 1,000 single-GPU instances with a week of 5-minute CloudWatch points each
(2.0 M readings, SQLite). Measured, each in a fresh process (its CPU and peak RSS its
own): one cycle's judging (`stored.refresh`: the due instances up to
`recommend.judge_per_cycle` and `judge_gpu_minutes_per_cycle`), and the judging of every
GPU instance (`costguard recommend --fresh`), and what `costguard recommend`, the report's
waste section and the console cost once the daemon has judged and stored every verdict
(they take those). Then, as the daemon's hourly prune leaves a store, the week settled
into blocks (`costguard.store.compact`) and judged again; and with raw minutes kept a day
only, the week judged from the hourly history (`telemetry.efficiency_hours`). Last, what an
agent's fleet costs: 10 8-GPU hosts with a week of the agent's minutes (a reading per GPU and
minute, with SM activity and the host's figures), judged as `recommend --fresh` does. The other
benches hold an hour of readings, so they never showed what a week costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import benchmark

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
INSTANCES = 1_000
POINTS = 7 * 24 * 12  # a week of 5-minute points

_MEASURE = """
import json, sys, time
from datetime import datetime
from costguard.recommend import stored
from costguard.recommend.run import recommend
from costguard.recommend.settings import RecommendSettings
from costguard.store.db import Database
from costguard.store.inventory import current_instances
db = Database(sys.argv[1])
now = datetime.fromisoformat(sys.argv[2])
cfg = RecommendSettings()
with db.session() as s:
    instances = current_instances(s)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    taken = 0
    verdicts = {}
    if sys.argv[3] == "cycle":
        judged = stored.refresh(s, instances, now, lambda i: None, cfg)
    elif sys.argv[3] == "fresh":  # recommend --fresh: every instance's readings judged
        items = recommend(s, now, lambda i: None, cfg, fresh=True).items
        judged = len(items)
        # what the issue compares: bottleneck, GPUs used, fit
        verdicts = {r.fit.instance.instance_id: [
            str(r.fit.efficiency.bottleneck), r.fit.efficiency.underused,
            r.fit.efficiency.gpus_used, list(r.fit.efficiency.used_gpus),
            r.fit.to.instance_type if r.fit.to else None] for r in items}
    else:  # once the daemon has judged them all: its stored verdicts taken
        every = cfg.model_copy(update={"judge_per_cycle": 100_000,
                                       "judge_gpu_minutes_per_cycle": 10**9})
        stored.refresh(s, instances, now, lambda i: None, every)
        s.commit()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        recs = recommend(s, now, lambda i: None, cfg)
        judged, taken = len(recs.items) - recs.reused, recs.reused
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
# VmHWM, this process's own peak: ru_maxrss would count the parent's, forked before exec
hwm = next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmHWM:"))
print(json.dumps({"judged": judged, "taken": taken, "cpu_s": cpu, "wall_s": wall,
                  "peak_rss_mb": hwm / 1024, "verdicts": verdicts}))
"""


def _seed(url: str) -> int:
    """The fleet and its week of readings; returns how many readings were written."""
    from costguard.model import GpuMinute, Instance, InstanceState, Lifecycle, TelemetrySource
    from costguard.store.db import Database
    from costguard.store.inventory import record_inventory
    from costguard.store.readings import write_minutes

    db = Database(url)
    fleet = [Instance(provider="aws", account="111122223333", region="us-east-1",
                      instance_id=f"i-{n:05d}", instance_type="g5.xlarge",
                      lifecycle=Lifecycle.ON_DEMAND, state=InstanceState.RUNNING,
                      launch_time=NOW - timedelta(days=9), observed_at=NOW, gpu_count=1,
                      gpu_model="A10G", tags={"team": f"team-{n % 8}"})
             for n in range(INSTANCES)]
    with db.session() as s:
        record_inventory(s, "aws", fleet, NOW, complete=True)
    start = NOW - timedelta(days=7)
    written = 0
    for first in range(0, INSTANCES, 50):
        points = [GpuMinute(provider="aws", instance_id=inst.instance_id,
                            source=TelemetrySource.CLOUDWATCH, span_minutes=5,
                            minute=start + timedelta(minutes=5 * k),
                            # a third busy, a third barely used, a third idle
                            util_mean=(60.0, 8.0, 0.5)[n % 3] + (k % 7))
                  for n, inst in enumerate(fleet[first:first + 50], start=first)
                  for k in range(POINTS)]
        with db.session() as s:
            write_minutes(s, points)
        written += len(points)
    db.dispose()
    return written


AGENT_HOSTS = 10
AGENT_GPUS = 8
AGENT_MINUTES = 7 * 24 * 60


def _seed_agent(url: str) -> int:
    """`AGENT_HOSTS` 8-GPU hosts with a week of the agent's minutes each (every GPU's, with
    SM activity, memory and the host's figures, as the agent sends them); returns how many
    readings were written."""
    import random

    from costguard.model import GpuMinute, Instance, InstanceState, Lifecycle, TelemetrySource
    from costguard.store.db import Database
    from costguard.store.inventory import record_inventory
    from costguard.store.readings import write_minutes

    db = Database(url)
    rng = random.Random(8)
    fleet = [Instance(provider="aws", account="111122223333", region="us-east-1",
                      instance_id=f"i-8{n:04d}", instance_type="p4d.24xlarge",
                      lifecycle=Lifecycle.ON_DEMAND, state=InstanceState.RUNNING,
                      launch_time=NOW - timedelta(days=9), observed_at=NOW,
                      gpu_count=AGENT_GPUS, gpu_model="A100", tags={"team": "train"})
             for n in range(AGENT_HOSTS)]
    with db.session() as s:
        record_inventory(s, "aws", fleet, NOW, complete=True)
    start = NOW - timedelta(days=7)
    written = 0
    for n, inst in enumerate(fleet):
        busy = (70.0, 30.0, 0.5)[n % 3]  # busy, barely used, idle hosts
        for day in range(7):
            points = []
            for k in range(day * 1440, (day + 1) * 1440):
                minute = start + timedelta(minutes=k)
                host = {"host_cpu_pct": round(rng.uniform(10, 60), 2), "host_iowait_pct": 1.5,
                        "host_cpus": 96, "host_hot_cores": 1,
                        "host_mem_used_bytes": 300 * 2**30, "host_mem_total_bytes": 1152 * 2**30}
                for g in range(AGENT_GPUS):
                    util = round(min(100.0, busy + rng.uniform(0, 20)), 2)
                    points.append(GpuMinute(
                        provider="aws", instance_id=inst.instance_id, gpu_index=g,
                        minute=minute, source=TelemetrySource.AGENT, samples=60,
                        util_mean=util, util_max=min(100.0, util + 5), sm_mean=util * 0.8,
                        sm_max=min(100.0, util * 0.8 + 5), mem_used_bytes=20 * 2**30,
                        mem_total_bytes=40 * 2**30, **host))
            with db.session() as s:
                write_minutes(s, points)
            written += len(points)
    db.dispose()
    return written


def _settle(url: str, raw: timedelta) -> None:
    """Settle the store's readings as the daemon's hourly prune would at NOW, keeping raw
    minutes for `raw`."""
    from costguard.store import compact
    from costguard.store.db import Database

    db = Database(url)
    try:
        compact.compact(db.session, NOW, raw_since=NOW - raw)
        with db.session() as s:
            compact.prune(s, raw_since=NOW - raw, history_since=NOW - timedelta(days=395))
    finally:
        db.dispose()


@benchmark("efficiency-week",
           description="Efficiency verdicts over a week of readings: 1,000 single-GPU "
                       "instances, a week of 5-minute points each (2.0 M readings, SQLite); "
                       "one cycle's judging, judging every GPU instance (costguard recommend "
                       "--fresh), and recommend taking the verdicts the daemon stored (the "
                       "report's waste section, the console), each in a fresh process; then "
                       "judging every GPU instance again with the week settled into blocks, "
                       "and from the hourly history with raw minutes kept a day, each "
                       "instance's verdict (bottleneck, underused, GPUs used, the fit's type) "
                       "compared with the one judged from the raw rows. Target (#63): every "
                       "one the same. Last, 10 8-GPU hosts with a week of the agent's minutes "
                       "(every GPU's, with the host's figures: 0.8 M readings) judged as "
                       "recommend --fresh does.")
def efficiency_week() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'week.db'}"
        started = time.perf_counter()
        readings = _seed(url)
        seed_s = time.perf_counter() - started
        labels = {
            "cycle": "one cycle (judge_per_cycle, judge_gpu_minutes_per_cycle)",
            "fresh": "every GPU instance (recommend --fresh)",
            "stored": "every GPU instance, the daemon's verdicts stored (recommend, report)",
        }
        runs: list[tuple[str, str, timedelta | None]] = [
            (what, label, None) for what, label in labels.items()]
        # as the daemon keeps them: the hours settled into blocks (raw, 7 days), then with
        # raw minutes kept a day only, the week judged from the hourly history
        runs += [("fresh", "every GPU instance (recommend --fresh), the week settled into "
                  "blocks", timedelta(days=8)),
                 ("fresh", "every GPU instance (recommend --fresh), the week from the hourly "
                  "history (raw minutes kept a day)", timedelta(days=1))]
        from_minutes: dict[str, list[object]] = {}  # the first --fresh run's, on raw rows
        for what, label, raw in runs:
            if raw is not None:
                _settle(url, raw)
            got = _measure(url, what)
            if what == "fresh" and not from_minutes:
                from_minutes = got["verdicts"]
            rows.append(_row(label, got, readings, POINTS, seed_s) | {
                "verdicts_as_from_raw_rows": (same_verdicts(from_minutes, got["verdicts"])
                                              if raw is not None else "")})
        # the agent's minutes: every GPU of a host, every minute, with the host's figures
        agent_url = f"sqlite:///{Path(tmp) / 'agent.db'}"
        started = time.perf_counter()
        agent_readings = _seed_agent(agent_url)
        agent_seed_s = time.perf_counter() - started
        rows.append(_row(f"{AGENT_HOSTS} 8-GPU hosts with the agent's minutes (recommend "
                         "--fresh)", _measure(agent_url, "fresh"), agent_readings,
                         AGENT_GPUS * AGENT_MINUTES, agent_seed_s))
    return rows


def _measure(url: str, what: str) -> dict[str, Any]:
    """`_MEASURE` in a fresh process (its CPU and peak its own)."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, url, NOW.isoformat(), what],
                          capture_output=True, text=True, check=True, timeout=900)
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def _row(label: str, got: dict[str, Any], readings: int, per_instance: int,
         seed_s: float) -> dict[str, object]:
    """A table row: `per_instance`, the readings of each instance judged."""
    return {"judging": label,
            "instances_judged": got["judged"],
            "verdicts_taken_stored": got["taken"],
            "readings_in_store": readings,
            "cpu_s": round(got["cpu_s"], 2), "wall_s": round(got["wall_s"], 2),
            "peak_rss_mb": round(got["peak_rss_mb"]),
            "us_per_reading_judged": round(got["cpu_s"] / (got["judged"] * per_instance) * 1e6,
                                           1) if got["judged"] else "",
            "seed_s": round(seed_s, 1)}


def same_verdicts(raw: dict[str, list[object]], other: dict[str, list[object]]) -> str:
    """How many instances `other` judged as `raw` did (bottleneck, underused, GPUs used and
    which, the fit's type), in words, naming the first that differ."""
    differ = sorted(i for i in raw.keys() | other.keys() if raw.get(i) != other.get(i))
    said = f"{sum(other.get(i) == v for i, v in raw.items()):,} of {len(raw):,}"
    if differ:
        said += f" (differ: {', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''})"
    return said
