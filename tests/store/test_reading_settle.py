"""Settling readings: an hour folded into its block and history reads back exactly as it did
from `gpu_readings`, whatever the window; a late reading is read and then merged; a run
killed part way loses nothing; retention prunes by hour. On SQLite and PostgreSQL."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from costguard.actions.prestop import agents_heard
from costguard.model import GpuMinute, TelemetrySource
from costguard.store import compact, hours
from costguard.store.block_tables import ReadingBlockRow, ReadingHourRow, ReadingSeriesRow
from costguard.store.db import Database
from costguard.store.readings import (
    _NAMES,
    instances_with_source,
    read_rows,
    write_minutes,
)
from costguard.store.tables import GpuReadingRow

NOW = datetime(2026, 11, 2, 12, 20, tzinfo=UTC)  # hours before 11:00 are settled
SETTLED = datetime(2026, 11, 2, 11, 0, tzinfo=UTC)
AGENT, CW, GCM = TelemetrySource.AGENT, TelemetrySource.CLOUDWATCH, TelemetrySource.CLOUD_MONITORING
REFS = [("aws", "i-a"), ("aws", "i-b"), ("gcp", "1234567890")]


def _agent(provider: str, iid: str, gpu: int, at: datetime, rng: random.Random) -> GpuMinute:
    util = round(rng.uniform(0, 100), 2)
    return GpuMinute(
        provider=provider, instance_id=iid, gpu_index=gpu, minute=at, source=AGENT,
        samples=60, util_mean=util, util_max=min(100.0, round(util + 3.5, 2)),
        sm_mean=round(util / 2, 2), sm_p95=round(util / 1.5, 2),
        mem_used_bytes=rng.randrange(2**36),
        mem_total_bytes=80 * 2**30, power_w_mean=round(rng.uniform(60, 700), 2),
        process_count=rng.randrange(3), host_cpu_pct=round(rng.uniform(0, 100), 2),
        host_cpus=96, kernel_idle_s=round(rng.uniform(0, 900), 1))


def _fleet(seed: int = 3) -> list[GpuMinute]:
    rng = random.Random(seed)
    out: list[GpuMinute] = []
    start = NOW - timedelta(hours=6)
    for minute in range(0, 6 * 60 + 20):
        at = start + timedelta(minutes=minute)
        for gpu in range(4):  # an agent's host, with a gap in the third hour
            if not 150 <= minute < 170:
                out.append(_agent("aws", "i-a", gpu, at, rng))
        if minute % 5 == 3:  # CloudWatch's 5-minute periods, some across an hour's end
            out.append(GpuMinute(provider="aws", instance_id="i-b", minute=at, source=CW,
                                 span_minutes=5, util_mean=round(rng.uniform(0, 9), 2)))
        if minute % 60 == 0:  # Cloud Monitoring's hour-long points, both GPUs
            for gpu in (0, 1):
                out.append(GpuMinute(provider="gcp", instance_id="1234567890", gpu_index=gpu,
                                     minute=at, source=GCM, span_minutes=60,
                                     sm_mean=round(rng.uniform(0, 3), 2),
                                     util_max=round(rng.uniform(0, 90), 2)))
    return out


def _read(db: Database, start: datetime, end: datetime, **kw: Any) -> list[Any]:
    with db.session() as s:
        return sorted((ref, tuple(values)) for ref, values in read_rows(s, REFS, start, end, **kw))


def _windows(rng: random.Random) -> list[tuple[datetime, datetime, dict[str, Any]]]:
    first = NOW - timedelta(hours=7)
    out: list[tuple[datetime, datetime, dict[str, Any]]] = [
        (first, NOW, {}), (SETTLED - timedelta(hours=2), SETTLED, {}),
        (SETTLED - timedelta(minutes=62), SETTLED + timedelta(minutes=5), {"spanning": False}),
    ]
    for _ in range(12):
        a = first + timedelta(seconds=rng.randrange(0, 8 * 3600))
        b = a + timedelta(seconds=rng.randrange(1, 4 * 3600))
        kw: dict[str, Any] = {"spanning": rng.random() < 0.7}
        if rng.random() < 0.4:
            kw["skip"] = (str(rng.choice([AGENT, CW, GCM])),
                          a + timedelta(minutes=rng.randrange(0, 120)))
        out.append((a, b, kw))
    return out


def _settle(db: Database, now: datetime = NOW, **kw: Any) -> compact.Compacted:
    return compact.compact(db.session, now, raw_since=now - timedelta(days=7), **kw)


def _head_minutes(db: Database) -> list[datetime]:
    with db.session() as s:
        return list(s.execute(select(GpuReadingRow.minute)).scalars())


def test_settled_hours_read_back_exactly_as_they_were_stored(db: Database) -> None:
    readings = _fleet()
    with db.session() as s:
        write_minutes(s, readings)
    windows = _windows(random.Random(11))
    before = [_read(db, a, b, **kw) for a, b, kw in windows]
    assert sum(map(len, before)) > 3_000

    done = _settle(db)

    assert done.readings == sum(1 for m in readings if m.minute < SETTLED)
    assert done.blocks == 3 * 5  # three instances x five settled hours (06:00 to 10:00)
    assert min(_head_minutes(db)) >= SETTLED  # only the hours not yet settled stay rows
    for (a, b, kw), want in zip(windows, before, strict=True):
        assert _read(db, a, b, **kw) == want, (a, b, kw)
    assert _settle(db).readings == 0  # nothing more to settle until the clock moves


def test_a_late_reading_is_read_at_once_and_merged_when_it_settles(db: Database) -> None:
    with db.session() as s:
        write_minutes(s, _fleet())
    _settle(db)
    late_at = SETTLED - timedelta(hours=2, minutes=47)  # i-a's agent reported then
    rng = random.Random(5)
    late = _agent("aws", "i-a", 2, late_at, rng)
    new = _agent("aws", "i-a", 9, late_at, rng)  # a GPU the block had not seen
    with db.session() as s:
        write_minutes(s, [late, new])
    window = (late_at - timedelta(minutes=1), late_at + timedelta(minutes=1))

    def at_minute() -> list[Any]:
        return [v for ref, v in _read(db, *window, spanning=False)
                if v[_FIELD["minute"]] == late_at and ref == ("aws", "i-a")]

    got = at_minute()  # gpu_readings' copy shadows the block's, and the new GPU is read
    assert sorted(v[_FIELD["gpu_index"]] for v in got) == [0, 1, 2, 3, 9]
    assert [v[_FIELD["util_mean"]] for v in got if v[_FIELD["gpu_index"]] == 2] == [
        late.util_mean]
    whole = _read(db, NOW - timedelta(hours=7), NOW)

    done = _settle(db)
    assert (done.readings, done.blocks) == (2, 1)
    assert min(_head_minutes(db)) >= SETTLED
    assert at_minute() == got and _read(db, NOW - timedelta(hours=7), NOW) == whole


_FIELD = {name: i for i, name in enumerate(_NAMES)}  # read_rows' fields by default


def test_a_compaction_killed_part_way_loses_nothing_and_the_next_run_finishes(
        db: Database) -> None:
    with db.session() as s:
        write_minutes(s, _fleet())
    whole = _read(db, NOW - timedelta(hours=7), NOW)
    seen: list[tuple[int, int]] = []

    def killed_after_one_batch(done: int, todo: int) -> None:
        seen.append((done, todo))
        if done == 1:
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        _settle(db, batch=1, progress=killed_after_one_batch)
    assert seen == [(0, 3), (1, 3)]  # aws i-a settled, the rest not begun
    assert _read(db, NOW - timedelta(hours=7), NOW) == whole
    with db.session() as s:
        assert len(compact.pending(s, compact.settled_before(NOW))) == 2
    again = _settle(db, batch=1)
    assert again.instances == 2
    assert _read(db, NOW - timedelta(hours=7), NOW) == whole
    assert min(_head_minutes(db)) >= SETTLED


def test_the_history_of_a_settled_hour_adds_up_its_minutes(db: Database) -> None:
    readings = [m for m in _fleet() if m.instance_id == "i-a" and m.gpu_index == 1
                and SETTLED - timedelta(hours=1) <= m.minute < SETTLED]
    with db.session() as s:
        write_minutes(s, readings)
    _settle(db)
    with db.session() as s:
        (payload,) = s.execute(select(ReadingHourRow.payload)).scalars()
    (gpu,) = hours.decode(payload)
    assert gpu.gpu_index == 1 and gpu.stats["minutes"] == 60
    assert gpu.mean("util") == pytest.approx(sum(m.util_mean or 0 for m in readings) / 60)
    assert gpu.value("util_peak") == max(m.util_max or 0 for m in readings)
    assert gpu.value("vram_peak") == max(m.mem_used_bytes or 0 for m in readings)
    assert sum(gpu.hists["sm_mean"]) == 60


def test_retention_prunes_blocks_history_and_series_by_hour(db: Database) -> None:
    with db.session() as s:
        write_minutes(s, _fleet())
    _settle(db)
    with db.session() as s:
        out = compact.prune(s, raw_since=SETTLED - timedelta(hours=2),
                            history_since=SETTLED - timedelta(hours=4))
        blocks_left = s.execute(select(func.min(ReadingBlockRow.hour))).scalar_one()
        hours_left = s.execute(select(func.min(ReadingHourRow.hour))).scalar_one()
    assert out["pruned_blocks"] == 3 * 3 and out["pruned_hours"] == 3  # 06-08 h; 06 h
    assert blocks_left == compact.hour_of(SETTLED) - 2
    assert hours_left == compact.hour_of(SETTLED) - 4
    # the minutes older than the raw window are gone from reads; the newer ones read as before
    assert not _read(db, NOW - timedelta(hours=7), SETTLED - timedelta(hours=2),
                     spanning=False)
    with db.session() as s:
        out = compact.prune(s, raw_since=NOW, history_since=NOW)
        assert s.execute(select(func.count()).select_from(ReadingSeriesRow)).scalar_one() == 0
    assert out["pruned_series"] == 3


def test_a_late_reading_past_the_raw_window_leaves_its_hours_history_as_it_was(
        db: Database) -> None:
    old = SETTLED - timedelta(hours=3)
    rng = random.Random(2)
    with db.session() as s:
        write_minutes(s, [_agent("aws", "i-a", 0, old + timedelta(minutes=k), rng)
                          for k in range(60)])
    _settle(db)
    with db.session() as s:
        compact.prune(s, raw_since=SETTLED, history_since=SETTLED - timedelta(days=30))
        history = s.execute(select(ReadingHourRow.payload)).scalars().all()
        write_minutes(s, [_agent("aws", "i-a", 0, old + timedelta(minutes=5), rng)])
    done = compact.compact(db.session, NOW, raw_since=SETTLED)
    assert done.late_dropped == 1 and done.blocks == 0
    with db.session() as s:
        assert s.execute(select(ReadingHourRow.payload)).scalars().all() == history
        assert not s.execute(select(ReadingBlockRow.hour)).all()
    assert not _head_minutes(db)


def test_who_reported_is_answered_from_settled_hours_to_the_minute(db: Database) -> None:
    rng = random.Random(4)
    at = SETTLED - timedelta(hours=2, minutes=30)  # 08:30, settled
    with db.session() as s:
        write_minutes(s, [_agent("aws", "i-a", 0, at, rng),
                          GpuMinute(provider="aws", instance_id="i-b", minute=at, source=CW,
                                    util_mean=1.0)])
    _settle(db)
    assert not _head_minutes(db)
    with db.session() as s:
        assert instances_with_source(s, "agent", at - timedelta(minutes=10)) == {("aws", "i-a")}
        assert instances_with_source(s, "agent", at) == {("aws", "i-a")}
        # since a minute after the reading, inside the same settled hour: not heard
        assert instances_with_source(s, "agent", at + timedelta(minutes=1)) == set()
        assert instances_with_source(s, "cloudwatch", at - timedelta(hours=1)) == {("aws", "i-b")}
        refs = {("aws", "i-a"), ("aws", "i-b"), ("aws", "i-z")}
        assert agents_heard(s, refs, NOW - timedelta(hours=24)) == {("aws", "i-a")}
        assert agents_heard(s, refs, at + timedelta(minutes=1)) == set()


def test_an_unreadable_block_is_left_out_of_reads_and_replaced_when_its_hour_settles_again(
        db: Database, caplog: pytest.LogCaptureFixture) -> None:
    with db.session() as s:
        write_minutes(s, [m for m in _fleet() if m.instance_id == "i-b"])
    _settle(db)
    hour = compact.hour_of(SETTLED) - 1
    with db.session() as s:
        s.execute(ReadingBlockRow.__table__.update().where(  # type: ignore[attr-defined]
            ReadingBlockRow.hour == hour).values(payload=b"\x01\x01garbage"))
    got = _read(db, SETTLED - timedelta(hours=1), SETTLED, spanning=False)
    assert got == [] and "unreadable" in caplog.text
    late = GpuMinute(provider="aws", instance_id="i-b", minute=SETTLED - timedelta(minutes=2),
                     source=CW, util_mean=4.0)
    with db.session() as s:
        write_minutes(s, [late])
    _settle(db)
    (only,) = _read(db, SETTLED - timedelta(hours=1), SETTLED, spanning=False)
    assert only[1][_FIELD["util_mean"]] == 4.0



def test_a_long_history_of_rows_moves_a_few_hours_a_transaction(db: Database) -> None:
    # a store from before blocks: two days of one host's rows; settled in 2-hour slices,
    # each its own transaction (never a whole store's rows in memory at once)
    rng = random.Random(8)
    start = SETTLED - timedelta(hours=48)
    with db.session() as s:
        write_minutes(s, [_agent("aws", "i-a", g, start + timedelta(minutes=k), rng)
                          for k in range(0, 48 * 60, 3) for g in range(2)])
    whole = _read(db, start, SETTLED)
    commits: list[int] = []

    def session_counting() -> Any:
        commits.append(1)
        return db.session()

    done = compact.compact(session_counting, NOW, raw_since=NOW - timedelta(days=7))
    assert done.blocks == 48 and done.readings == 48 * 20 * 2
    assert len(commits) == 1 + 1 + 48 // compact.SLICE  # pending, oldest, the slices
    assert _read(db, start, SETTLED) == whole


def test_a_row_from_a_source_blocks_have_no_code_for_stays_a_row(db: Database) -> None:
    # a row a newer costguard wrote (a source this one does not know): it stays readable as
    # a row and never fails the settling of the others
    with db.session() as s:
        write_minutes(s, [m for m in _fleet() if m.instance_id == "i-b"])
        s.execute(GpuReadingRow.__table__.insert().values(  # type: ignore[attr-defined]
            provider="aws", instance_id="i-b", gpu_index=3, source="future-exporter",
            minute=SETTLED - timedelta(hours=3), span_minutes=1, samples=1, util_mean=9.0))
    done = _settle(db)
    assert done.readings > 0 and done.blocks == 5
    assert _head_minutes(db).count(SETTLED - timedelta(hours=3)) == 1
    assert _settle(db).readings == 0  # and nothing to do the next hour
