"""Verdicts from the hourly history equal the verdicts from raw minutes: the same bottleneck,
GPUs used and cheaper fit for every instance of a varied fleet (agents on 1 to 8 GPUs,
hosts near the CPU threshold, GPUs left unused, coverage gaps, CloudWatch-only hosts), with
some hours settled into history and the last ones still rows. And a window past the raw
minutes kept is judged from the history."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from costguard.model import GpuMinute, Instance, InstanceState, Lifecycle, TelemetrySource
from costguard.recommend.run import judge_instances
from costguard.recommend.settings import RecommendSettings
from costguard.store import compact
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.readings import read_minutes, write_minutes
from costguard.telemetry.efficiency import judge
from costguard.telemetry.efficiency_hours import (
    history_reaches_further,
    judge_hours,
    read_hours,
)

END = datetime(2026, 11, 20, 12, tzinfo=UTC)
START = END - timedelta(hours=10)
CFG = RecommendSettings(min_hours=6)
TYPES = {1: ("g5.xlarge", "A10G", 24), 4: ("g5.12xlarge", "A10G", 24),
         8: ("p4d.24xlarge", "A100", 40), 2: ("g6.12xlarge", "L4", 24)}
GIB = 2**30


def _fleet(n: int, seed: int, *, launches: bool = False
           ) -> tuple[list[Instance], list[GpuMinute]]:
    rng = random.Random(seed)
    fleet: list[Instance] = []
    readings: list[GpuMinute] = []
    for k in range(n):
        gpus = rng.choice([1, 1, 2, 4, 8])
        itype, model, mem = TYPES[gpus]
        inst = Instance(provider="aws", account="111122223333", region="us-east-1",
                        instance_id=f"i-{k:05d}", instance_type=itype,
                        lifecycle=Lifecycle.ON_DEMAND, state=InstanceState.RUNNING,
                        launch_time=START - timedelta(days=3), observed_at=END,
                        gpu_count=gpus, gpu_model=model)
        fleet.append(inst)
        if rng.random() < 0.15:  # CloudWatch only: utilization, 5-minute periods
            level = rng.choice([0.5, 4.0, 8.0, 60.0])
            readings += [GpuMinute(provider="aws", instance_id=inst.instance_id, gpu_index=g,
                                   minute=START + timedelta(minutes=5 * p), span_minutes=5,
                                   source=TelemetrySource.CLOUDWATCH,
                                   util_mean=round(level + rng.uniform(0, 6), 2))
                         for p in range(120) for g in range(gpus)]
            continue
        busy = [rng.choice([0.0, 0.0, 3.0, 20.0, 55.0, 90.0]) for _ in range(gpus)]
        if rng.random() < 0.15:
            busy = [0.0] * gpus  # idle
        silent = gpus // 2 if gpus > 1 and rng.random() < 0.15 else 0  # GPUs never read
        cpu = rng.choice([5.0, 40.0, 70.0, 74.0, 78.0, 95.0])
        gap = rng.random() < 0.2  # readings missing for a stretch: coverage near the bar
        sm_missing = rng.random() < 0.2  # a GPU without SM activity (no GPM)
        # `launches`: some launched part way through the window's first hour (or its second)
        launched = rng.choice([0, 0, 0, rng.randrange(1, 60), rng.randrange(61, 120)]
                              ) if launches else 0
        for minute in range(launched, 600):
            if gap and 100 <= minute < 100 + rng.choice([60, 130, 300, 300]):
                continue
            at = START + timedelta(minutes=minute)
            host_cpu = round(min(100.0, max(0.0, cpu + rng.uniform(-8, 8))), 2)
            # the host's figures: the same in each of its GPUs' readings, as the agent sends
            iowait, hot = round(rng.uniform(0, 3), 2), rng.randrange(0, 4)
            for g in range(silent, gpus):
                if busy[g] == 0.0:  # an idle GPU: a little noise, never 5 %
                    mean = round(rng.uniform(0, 1), 2)
                    peak = round(mean + rng.uniform(0, 2), 2)
                else:
                    mean = round(min(100.0, max(0.0, busy[g] + rng.uniform(-3, 6))), 2)
                    burst = rng.random() < 0.02
                    peak = round(min(100.0, mean + (30.0 if burst else rng.uniform(0, 4))), 2)
                readings.append(GpuMinute(
                    provider="aws", instance_id=inst.instance_id, gpu_index=g, minute=at,
                    source=TelemetrySource.AGENT, samples=60, util_mean=mean, util_max=peak,
                    sm_mean=None if sm_missing else round(mean * 0.8, 2),
                    sm_max=None if sm_missing else round(peak * 0.8, 2),
                    mem_used_bytes=int((busy[g] / 100 + 0.05) * mem * GIB * rng.uniform(.9, 1)),
                    mem_total_bytes=mem * GIB, host_cpu_pct=host_cpu,
                    host_iowait_pct=iowait, host_cpus=48 * gpus,
                    host_hot_cores=hot, host_mem_used_bytes=64 * GIB,
                    host_mem_total_bytes=192 * GIB))
    return fleet, readings


@pytest.fixture
def store(tmp_path: object) -> Database:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    return Database(f"sqlite:///{tmp_path / 'h.db'}")


def _first_hour_whole(minutes: list[GpuMinute]) -> bool:
    """Whether the instance has a reading in every minute from its first to that hour's
    end (none: nothing to place)."""
    covered = {m.minute + timedelta(minutes=k) for m in minutes for k in range(m.span_minutes)}
    if not covered:
        return True
    first = min(covered)
    end = first.replace(minute=0) + timedelta(hours=1)
    return all(first + timedelta(minutes=k) in covered
               for k in range(int((end - first) / timedelta(minutes=1))))


def _verdict(e: object) -> tuple[object, ...]:
    from costguard.telemetry.efficiency import Efficiency

    assert isinstance(e, Efficiency)
    return (e.bottleneck, e.underused, e.gpus_used, e.used_gpus, e.signal,
            e.host_cpu_p95 is None)


def _settled_fleet(store: Database, n: int, seed: int
                   ) -> tuple[list[Instance], list[tuple[str, str]]]:
    """`_fleet(n, seed)` (some launched late) stored and settled up to 10:00, raw minutes
    kept: eight hours in blocks and history, the last two still rows."""
    fleet, readings = _fleet(n, seed=seed, launches=True)
    with store.session() as s:
        record_inventory(s, "aws", fleet, END, complete=True)
        write_minutes(s, readings)
    compact.compact(store.session, END - timedelta(minutes=60),
                    raw_since=END - timedelta(days=7))
    return fleet, [("aws", i.instance_id) for i in fleet]


def test_verdicts_from_history_equal_verdicts_from_raw_minutes(store: Database) -> None:
    fleet, refs = _settled_fleet(store, 40, seed=5)
    with store.session() as s:
        raw = read_minutes(s, refs, START, END)
        hours = read_hours(s, refs, START, END)
    # launched in the second hour (one read from its third: a gap right after its launch)
    assert {len(h) for h in hours.values()} == {8, 9, 10}
    seen, spans = set(), set()
    for inst in fleet:
        ref = ("aws", inst.instance_id)
        a = judge(raw.get(ref, []), window_start=START, window_end=END,
                  gpu_count=inst.gpu_count, settings=CFG)
        b = judge_hours(hours.get(ref, []), window_start=START, window_end=END,
                        gpu_count=inst.gpu_count, settings=CFG)
        assert _verdict(b) == _verdict(a), inst.instance_id
        assert b.coverage == a.coverage and b.hours == a.hours
        # the share of its time it ran (what a fit saves) counts from its first reading,
        # which history places by its hour's minutes with readings: exact where the
        # instance read on to that hour's end, else less than an hour later
        if _first_hour_whole(raw.get(ref, [])):
            assert b.span_hours == a.span_hours
            spans.add(a.span_hours)
        else:
            assert a.span_hours - 1 < b.span_hours < a.span_hours
        assert b.vram_peak_bytes == a.vram_peak_bytes
        assert b.paid_active_share == pytest.approx(a.paid_active_share, abs=1.5e-4)
        if a.gpu_mean is not None:
            assert b.gpu_mean == pytest.approx(a.gpu_mean, abs=0.01)
        if a.host_cpu_p95 is not None:  # the bucket holding the p95
            assert b.host_cpu_p95 is not None and b.host_cpu_p95 <= a.host_cpu_p95
            assert a.host_cpu_p95 - b.host_cpu_p95 <= 5
            assert (b.host_cpu_mean, b.host_iowait_mean, b.host_hot_cores) == pytest.approx(
                (a.host_cpu_mean, a.host_iowait_mean, a.host_hot_cores), abs=0.01)
        seen.add(a.bottleneck)
    # the fleet reaches every verdict the rules give, so the equality means something
    assert len(seen) >= 7, seen
    assert len(spans) >= 5  # launched at several minutes of the hour


def test_a_window_past_the_raw_minutes_kept_is_judged_from_history(store: Database) -> None:
    fleet, readings = _fleet(12, seed=9)
    with store.session() as s:
        record_inventory(s, "aws", fleet, END, complete=True)
        write_minutes(s, readings)
    with store.session() as s:
        before = {r.fit.instance.instance_id: r.fit for r in judge_instances(
            s, fleet, END, lambda i: None, CFG.model_copy(update={"window": END - START}),
            {}, {})}
        assert not history_reaches_further(s, START)
    compact.compact(store.session, END + timedelta(hours=1), raw_since=START)
    with store.session() as s:
        out = compact.prune(s, raw_since=START + timedelta(hours=4), history_since=START)
        assert out["pruned_blocks"] == 4 * len(fleet)
        assert history_reaches_further(s, START)
        assert not history_reaches_further(s, START + timedelta(hours=4))
        after = {r.fit.instance.instance_id: r.fit for r in judge_instances(
            s, fleet, END, lambda i: None, CFG.model_copy(update={"window": END - START}),
            {}, {})}
    assert set(after) == set(before)
    for iid, fit in before.items():
        assert _verdict(after[iid].efficiency) == _verdict(fit.efficiency), iid
        assert (after[iid].to and after[iid].to.name) == (fit.to and fit.to.name), iid
        # from history: the VRAM peak, never a p99 (not kept hour by hour)
        if fit.efficiency.vram_peak_bytes is not None:
            assert after[iid].efficiency.vram_p99_bytes is None
            assert after[iid].efficiency.vram_peak_bytes == fit.efficiency.vram_peak_bytes


def test_readings_read_for_judging_are_the_stored_minutes_and_judge_the_same(
        store: Database) -> None:
    """`read_shaped` (plain tuples, no validation) hands the verdict what `read_minutes`
    does, from raw rows and settled blocks alike, each reading field by field, and the
    verdicts (evidence and figures included) are the same."""
    from costguard.store.readings import read_shaped
    from costguard.telemetry.efficiency import JudgedRow

    fleet, refs = _settled_fleet(store, 30, seed=11)
    with store.session() as s:
        minutes = read_minutes(s, refs, START, END)
        shared: dict[object, datetime] = {}
        rows = {**read_shaped(s, refs[:10], START, END, JudgedRow, minutes=shared),
                **read_shaped(s, refs[10:], START, END, JudgedRow, minutes=shared)}
    assert rows.keys() == minutes.keys() and sum(map(len, rows.values())) > 10_000
    for inst in fleet:
        ref = ("aws", inst.instance_id)
        got, want = rows.get(ref, []), minutes.get(ref, [])
        assert [tuple(r) for r in got] == [
            tuple(getattr(m, f) for f in JudgedRow._fields) for m in want], ref
        assert all(type(r.source) is TelemetrySource for r in got)
        a = judge(want, window_start=START, window_end=END, gpu_count=inst.gpu_count,
                  settings=CFG)
        b = judge(got, window_start=START, window_end=END, gpu_count=inst.gpu_count,
                  settings=CFG)
        assert a == b, ref
