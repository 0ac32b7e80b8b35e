"""Readings that span several minutes (a cloud metric's period): stored as one row, read back
whole, and counted minute by minute wherever coverage is counted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import select

from costguard.minutes import covering, per_minute, slots
from costguard.model import GpuMinute, TelemetrySource, Verdict
from costguard.store.db import Database
from costguard.store.readings import read_minutes, write_minutes
from costguard.store.tables import GpuReadingRow
from costguard.store.window import ReadingWindow
from costguard.telemetry.classify import classify

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
CW = TelemetrySource.CLOUDWATCH


def _cw(ago: int, util: float, *, span: int = 5, gpu: int = 0, iid: str = "i-a") -> GpuMinute:
    return GpuMinute(provider="aws", instance_id=iid, gpu_index=gpu, source=CW,
                     minute=NOW - timedelta(minutes=ago), span_minutes=span,
                     util_mean=util, util_max=util + 1)


@pytest.fixture
def store(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


def test_every_field_round_trips_through_the_driver_level_write(store: Database) -> None:
    # at the window's very start: found only if its stored form compares like the bound one
    full = GpuMinute(provider="gcp", instance_id="vm-1", gpu_index=3, minute=NOW - HOUR,
                     source=TelemetrySource.AGENT, span_minutes=1, samples=60, util_mean=1.5,
                     util_p95=2.5, util_max=3.5, util_active_share=0.25, sm_mean=0.5,
                     sm_p95=0.75, sm_max=1.0, mem_used_bytes=20 * 2**30,
                     mem_total_bytes=80 * 2**30, power_w_mean=71.25, process_count=2,
                     top_process_pid=4242, top_process_bytes=19 * 2**30)
    sparse = _cw(10, 0.0)
    with store.session() as s:
        assert write_minutes(s, [full, sparse]) == 1 + 5  # GPU-minutes covered
    with store.session() as s:
        got = read_minutes(s, [("gcp", "vm-1"), ("aws", "i-a")], NOW - HOUR, NOW)
        # the ORM reads the same rows the same way (the minute column's own type included)
        orm = {(r.provider, r.minute) for r in s.exec(select(GpuReadingRow))}
    assert got[("gcp", "vm-1")] == [full]
    assert got[("aws", "i-a")] == [sparse]
    assert orm == {("gcp", full.minute), ("aws", sparse.minute)}


def test_the_same_key_twice_keeps_the_last_and_a_rewrite_replaces(store: Database) -> None:
    with store.session() as s:
        write_minutes(s, [_cw(10, 1.0, span=3), _cw(10, 2.0)])  # a point still filling, then whole
    with store.session() as s:
        write_minutes(s, [_cw(10, 4.0)])
    with store.session() as s:
        (only,) = read_minutes(s, [("aws", "i-a")], NOW - HOUR, NOW)[("aws", "i-a")]
    assert (only.util_mean, only.span_minutes) == (4.0, 5)


def test_a_reading_that_began_before_the_window_is_read_for_its_minutes_inside(
    store: Database,
) -> None:
    start = NOW - HOUR
    straddles = _cw(62, 1.0)  # 10:58-11:03: three of its minutes are inside
    before = _cw(65, 1.0)  # 10:55-11:00: ends where the window starts
    with store.session() as s:
        write_minutes(s, [straddles, before, _cw(70, 1.0, span=1)])
    with store.session() as s:
        got = read_minutes(s, [("aws", "i-a")], start, NOW)[("aws", "i-a")]
    assert got == [straddles]
    assert slots(straddles, start, NOW) == [start + timedelta(minutes=k) for k in range(3)]
    assert covering([straddles, before], start, NOW) == [straddles]


def test_five_minute_points_cover_an_hour_for_the_classifier() -> None:
    idle = [_cw(ago, 1.0, gpu=g) for ago in range(60, 0, -5) for g in (0, 1)]
    verdict = classify(idle, window_start=NOW - HOUR, window_end=NOW, gpu_count=2,
                       signal="util_gpu", below=5.0, min_coverage=0.8)
    assert verdict.verdict is Verdict.IDLE and verdict.coverage == 1.0
    # the same points minute by minute give the same verdict and coverage
    flat = [one for m in idle for one in per_minute(m)]
    assert len(flat) == 120 and {m.span_minutes for m in flat} == {1}
    again = classify(flat, window_start=NOW - HOUR, window_end=NOW, gpu_count=2,
                     signal="util_gpu", below=5.0, min_coverage=0.8)
    assert (again.verdict, again.coverage, again.evidence) == (
        verdict.verdict, verdict.coverage, verdict.evidence)
    # half the hour missing is no data, counted in minutes, not in points
    half = [m for m in idle if m.minute >= NOW - HOUR / 2]
    sparse = classify(half, window_start=NOW - HOUR, window_end=NOW, gpu_count=2,
                      signal="util_gpu", below=5.0, min_coverage=0.8)
    assert sparse.verdict is Verdict.NO_DATA and sparse.coverage == 0.5


def test_the_window_keeps_a_reading_until_its_last_minute_leaves(store: Database) -> None:
    window = ReadingWindow()
    window.add([_cw(62, 1.0)], since=NOW - HOUR)
    with store.session() as s:
        window.refresh(s, [("aws", "i-a")], NOW - HOUR, NOW)
    assert len(window.minutes(("aws", "i-a"), NOW - HOUR, NOW)) == 1
    later = NOW + timedelta(minutes=3)  # 10:58 + 5 min: its last minute is gone
    with store.session() as s:
        window.refresh(s, [("aws", "i-a")], later - HOUR, later)
    assert window.minutes(("aws", "i-a"), later - HOUR, later) == []


def test_minute_is_the_only_readings_column_the_driver_write_must_bind(store: Database) -> None:
    # write_minutes binds `minute` only; the other processors a dialect has are float
    # conversions of fields a GpuMinute already holds as floats
    from sqlalchemy import Float

    from costguard.store.upsert import driver_sql

    table = GpuReadingRow.__table__  # type: ignore[attr-defined]
    columns = [c.name for c in table.columns]
    _, _, procs = driver_sql(table.insert(), table, columns, store.engine.dialect)
    others = set(procs) - {"minute"}
    assert all(isinstance(table.c[name].type, Float) for name in others)
    m = _cw(3, 2)  # given as ints
    assert all(type(getattr(m, name)) is float for name in others if getattr(m, name) is not None)
