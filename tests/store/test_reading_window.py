"""The engine's reading window: what a cycle just fetched is not read back, nothing is lost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from costguard.model import GpuMinute, TelemetrySource
from costguard.store.db import Database
from costguard.store.readings import ReadingWindow, write_minutes

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
CW, AGENT = TelemetrySource.CLOUDWATCH, TelemetrySource.AGENT


def _m(iid: str, ago: int, source: TelemetrySource, util: float, gpu: int = 0) -> GpuMinute:
    return GpuMinute(provider="aws", instance_id=iid, gpu_index=gpu, source=source,
                     minute=NOW - timedelta(minutes=ago), util_mean=util)



def test_first_refresh_keeps_fed_minutes_and_reads_only_what_was_not_fed(db: Database) -> None:
    # before this process: an agent that went quiet 40 minutes ago, and CloudWatch minutes
    # fetched by an earlier run (older than this cycle's span)
    older = [_m("i-a", ago, AGENT, 50.0) for ago in range(60, 40, -1)]
    older += [_m("i-a", ago, CW, 7.0) for ago in range(40, 30, -1)]
    other = [_m("i-b", ago, CW, 1.0) for ago in range(60, 0, -1)]  # not fetched this cycle
    fetched = [_m("i-a", ago, CW, 2.0, gpu) for ago in range(30, 0, -1) for gpu in (0, 1)]
    with db.session() as s:
        write_minutes(s, older + other)
        write_minutes(s, fetched)  # this cycle's telemetry, stored ...
    window = ReadingWindow()
    window.add(fetched, since=NOW - timedelta(minutes=30))  # ... and fed through
    with db.session() as s:
        window.refresh(s, [("aws", "i-a"), ("aws", "i-b")], NOW - timedelta(hours=1), NOW)

    a = window.minutes(("aws", "i-a"), NOW - timedelta(hours=1), NOW)
    by_source = sorted({(m.source, m.util_mean) for m in a})
    assert by_source == [(AGENT, 50.0), (CW, 2.0), (CW, 7.0)]
    assert len(a) == 20 + 10 + 60  # old agent + earlier CloudWatch + this cycle's two GPUs
    assert len(window.minutes(("aws", "i-b"), NOW - timedelta(hours=1), NOW)) == 60


def test_an_agent_minute_stored_after_the_fetch_is_not_lost(db: Database) -> None:
    fetched = [_m("i-a", ago, CW, 2.0) for ago in range(30, 0, -1)]
    late_agent = [_m("i-a", 45, AGENT, 80.0)]  # an agent replay for an older minute
    with db.session() as s:
        write_minutes(s, fetched + late_agent)
    window = ReadingWindow()
    window.add(fetched, since=NOW - timedelta(minutes=30))
    with db.session() as s:
        window.refresh(s, [("aws", "i-a")], NOW - timedelta(hours=1), NOW)
    peaks = [m.util_mean for m in window.minutes(("aws", "i-a"), NOW - timedelta(hours=1), NOW)]
    assert 80.0 in peaks and len(peaks) == 31


def test_later_refreshes_read_only_the_late_span_of_instances_not_fed(db: Database) -> None:
    window = ReadingWindow(late=timedelta(minutes=5))
    with db.session() as s:
        write_minutes(s, [_m("i-b", ago, AGENT, 30.0) for ago in range(60, 0, -1)])
        window.refresh(s, [("aws", "i-b")], NOW - timedelta(hours=1), NOW)
    later = NOW + timedelta(minutes=5)
    new = [GpuMinute(provider="aws", instance_id="i-b", gpu_index=0, source=AGENT,
                     minute=later - timedelta(minutes=k), util_mean=31.0) for k in range(6, 0, -1)]
    with db.session() as s:
        write_minutes(s, new)
        window.refresh(s, [("aws", "i-b")], later - timedelta(hours=1), later)
    got = window.minutes(("aws", "i-b"), later - timedelta(hours=1), later)
    assert len(got) == 60  # 55 kept + 5 new; the 5 that left the window are gone
    assert sum(m.util_mean == 31.0 for m in got) == 6
