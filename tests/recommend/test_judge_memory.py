"""Judging a fleet's week of readings holds a few instances' readings at a time, never the
fleet's: a week of one GPU's minutes is 10,080 readings (~8 MB while judged), and the
report's waste section judges every GPU instance in the store; and the garbage collector
does not walk them every few hundred allocations while they are judged."""

from __future__ import annotations

import gc
import tracemalloc
from datetime import UTC, datetime, timedelta

import pytest

from costguard.model import GpuMinute, Instance, InstanceState, Lifecycle, TelemetrySource
from costguard.recommend.run import judge_instances, reads
from costguard.recommend.settings import RecommendSettings
from costguard.store.db import Database
from costguard.store.readings import write_minutes

NOW = datetime(2026, 11, 16, 12, tzinfo=UTC)
WEEK = timedelta(days=7)


def inst(iid: str, gpus: int = 1) -> Instance:
    return Instance(provider="aws", account="111122223333", region="us-east-1",
                    instance_id=iid, instance_type="g5.xlarge" if gpus == 1 else "g5.12xlarge",
                    lifecycle=Lifecycle.ON_DEMAND, state=InstanceState.RUNNING,
                    launch_time=NOW - timedelta(days=9), observed_at=NOW, gpu_count=gpus,
                    gpu_model="A10G")


def test_runs_stay_within_the_readings_of_one_read_and_a_large_instance_is_alone() -> None:
    week_of_one_gpu = 7 * 24 * 60
    fleet = [inst("i-a"), inst("i-b"), inst("i-big", gpus=4), inst("i-c")]
    runs = list(reads(fleet, NOW - WEEK, NOW, most=2 * week_of_one_gpu))
    assert [[i.instance_id for i in r] for r in runs] == [["i-a", "i-b"], ["i-big"], ["i-c"]]
    assert [i for r in runs for i in r] == fleet  # all of them, in order
    # a GPU-less instance still counts one series; a short window packs more per run
    assert len(list(reads([inst(f"i-{n}", gpus=0) for n in range(10)],
                          NOW - timedelta(hours=1), NOW, most=120))) == 5


def test_a_fleets_week_is_judged_a_few_instances_at_a_time(db: Database) -> None:
    # 24 instances with a week of 5-minute CloudWatch points each: 48,384 readings, ~155 MiB
    # held at the peak when they were read at once (~9 MiB a few at a time)
    fleet = [inst(f"i-{n:02d}") for n in range(24)]
    points = [GpuMinute(provider="aws", instance_id=i.instance_id,
                        source=TelemetrySource.CLOUDWATCH, span_minutes=5,
                        minute=NOW - WEEK + timedelta(minutes=5 * k),
                        util_mean=float(n % 3) * 30.0)
              for n, i in enumerate(fleet) for k in range(7 * 24 * 12)]
    with db.session() as s:
        for first in range(0, len(points), 10_000):
            write_minutes(s, points[first:first + 10_000])
    del points
    cfg = RecommendSettings()
    with db.session() as s:
        tracemalloc.start()
        judged = judge_instances(s, fleet, NOW, lambda i: None, cfg, {}, {})
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # the same verdicts as judging each instance alone
        alone = [judge_instances(s, [i], NOW, lambda i: None, cfg, {}, {})[0] for i in fleet]
    assert [r.fit.efficiency for r in judged] == [r.fit.efficiency for r in alone]
    assert {r.fit.efficiency.hours for r in judged} == {168.0}
    assert len({r.fit.efficiency.bottleneck for r in judged}) > 1  # the readings differ
    assert peak < 25 * 2**20, f"{peak / 2**20:.0f} MiB held while judging"


def test_judging_collects_the_youngest_generation_as_seldom_as_a_cycle_does(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a cycle too (`recommend`, the report, the console), judging raises the
    collector's threshold as a cycle does (costguard/heap.py), and puts it back after."""
    from costguard.heap import CYCLE_GEN0
    from costguard.recommend import run

    points = [GpuMinute(provider="aws", instance_id="i-a", source=TelemetrySource.CLOUDWATCH,
                        span_minutes=5, minute=NOW - timedelta(hours=1) + timedelta(minutes=5 * k),
                        util_mean=50.0) for k in range(12)]
    with db.session() as s:
        write_minutes(s, points)
    seen: list[int] = []
    real = run.judge

    def judge(*args: object, **kwargs: object) -> object:
        seen.append(gc.get_threshold()[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]  # judge's own arguments

    monkeypatch.setattr(run, "judge", judge)
    before = gc.get_threshold()
    assert before[0] < CYCLE_GEN0
    with db.session() as s:
        judge_instances(s, [inst("i-a")], NOW, lambda i: None, RecommendSettings(), {}, {})
    assert seen == [CYCLE_GEN0]
    assert gc.get_threshold() == before
