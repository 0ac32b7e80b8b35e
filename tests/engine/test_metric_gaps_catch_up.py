"""A scope whose metrics fail while the rest of its provider answers is read again, from
where it was last read, once it reads; the scopes that answered are not read twice."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from itertools import pairwise

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.engine import behind
from costguard.engine.cycle import MAX_TELEMETRY_LOOKBACK
from costguard.engine.fetch import chunk_size, time_slices
from costguard.errors import ProviderError
from costguard.model import Gap, GpuMinute, Instance
from costguard.store import control
from costguard.store.db import Database
from costguard.store.readings import read_minutes
from costguard.store.tables import GapRow
from tests.engine.conftest import EngineFactory, run_for
from tests.fakes.cloud import T0, ScriptedCloud, always

Call = tuple[list[str], datetime, datetime]
STEP = timedelta(minutes=5)


def aws_scope(inst: Instance) -> str:
    return f"{inst.account}/{inst.region}"  # as providers/aws/readings.py names its gaps


def gcp_scope(inst: Instance) -> str:
    return inst.account  # the project, as providers/gcp/metrics.py names its gaps


class PartialMetrics:
    """Wraps the scripted cloud's `gpu_metrics` as AWS and GCP behave: the scopes in `down`
    are left out and listed in `cloud.metric_gaps`; with `raise_if_none_read` (GCP), a call
    where no scope reads raises."""

    def __init__(self, cloud: ScriptedCloud, scope_of: Callable[[Instance], str], *,
                 raise_if_none_read: bool = False) -> None:
        self.cloud, self.scope_of, self.raise_if_none = cloud, scope_of, raise_if_none_read
        self.down: set[str] = set()
        self.calls: list[Call] = []
        self.inner = cloud.gpu_metrics
        cloud.metric_gaps = []  # type: ignore[attr-defined]
        cloud.gpu_metrics = self.gpu_metrics  # type: ignore[method-assign]

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        self.calls.append((sorted(i.instance_id for i in instances), start, end))
        scopes = {self.scope_of(i) for i in instances}
        failed = sorted(scopes & self.down)
        if self.raise_if_none and failed and len(failed) == len(scopes):
            raise ProviderError("sim", failed[0], "PermissionDenied: monitoring.timeSeries.list")
        self.cloud.metric_gaps = [  # type: ignore[attr-defined]
            Gap(provider="sim", scope=s, error="AccessDenied: GetMetricData") for s in failed]
        return self.inner([i for i in instances if self.scope_of(i) not in self.down],
                          start, end)

    def of(self, iid: str) -> list[tuple[datetime, datetime]]:
        """The spans `iid` was asked for, in order."""
        return [(start, end) for ids, start, end in self.calls if iid in ids]


def two_regions(cloud: ScriptedCloud) -> None:
    """i-a in 111111111111/us-east-1, i-b in 222222222222/eu-west-1, both busy."""
    cloud.add("i-a", always("busy"))
    cloud.add("i-b", always("busy"))
    cloud.set("i-b", account="222222222222", region="eu-west-1", zone="eu-west-1a")


def stored_minutes(db: Database, iid: str, start: datetime, end: datetime) -> list[datetime]:
    with db.session() as s:
        found = read_minutes(s, [("sim", iid)], start, end)
    return sorted({m.minute for m in found.get(("sim", iid), [])})


def every_minute(start: datetime, end: datetime) -> list[datetime]:
    return [start + timedelta(minutes=n) for n in range((end - start) // timedelta(minutes=1))]


def contiguous(spans: list[tuple[datetime, datetime]], settle: timedelta) -> bool:
    """Each read starts where the one before ended, less the settle window: no re-read."""
    return all(nxt[0] == prev[1] - settle for prev, nxt in pairwise(spans))


@pytest.mark.parametrize(("scope_of", "raises", "settle"), [
    (aws_scope, False, timedelta(0)),
    (aws_scope, False, timedelta(minutes=10)),  # AWS and GCP ask again for their last 10 min
    (gcp_scope, True, timedelta(minutes=10)),
], ids=["aws", "aws-settle", "gcp"])
def test_a_scope_that_failed_is_read_from_where_it_was_once_it_reads_again(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database,
    scope_of: Callable[[Instance], str], raises: bool, settle: timedelta,
) -> None:
    two_regions(cloud)
    if settle:
        cloud.metrics_settle = settle  # type: ignore[attr-defined]
    metrics = PartialMetrics(cloud, scope_of, raise_if_none_read=raises)
    b_scope = scope_of(cloud.instances["i-b"])
    engine = make_engine()
    engine.run_cycle()  # the first cycle reads both
    clock.advance(STEP)
    first_b = metrics.of("i-b")[-1]

    metrics.down = {b_scope}  # region B's metrics fail for 30 minutes; A answers
    run_for(engine, clock, timedelta(minutes=30), STEP)
    back = clock.now()
    metrics.down = set()
    make_engine().run_cycle()  # a restarted process: what is behind is in the store

    # B's minutes of the outage are stored: it was read again from where its last good read
    # ended (less the settle window) ...
    assert stored_minutes(db, "i-b", first_b[0], back) == every_minute(first_b[0], back)
    last_b = metrics.of("i-b")[-1]
    assert last_b == (first_b[1] - settle, back)
    # ... and A, which answered every cycle, was never asked for the same span twice
    a_spans = metrics.of("i-a")
    assert len(a_spans) == 8 and contiguous(a_spans[1:], settle)
    # caught up: the next cycle reads B with everyone, from the shared watermark
    clock.advance(STEP)
    engine.run_cycle()
    assert metrics.calls[-1] == (["i-a", "i-b"], back - settle, clock.now())
    with db.session() as s:
        rows = list(s.exec(select(GapRow)))
    assert [(r.scope, r.resolved_at) for r in rows] == [(f"{b_scope} metrics", back)]


def test_a_scope_that_stays_down_reads_no_further_back_than_the_cap(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    two_regions(cloud)
    metrics = PartialMetrics(cloud, aws_scope)
    engine = make_engine()
    engine.run_cycle()
    clock.advance(STEP)
    metrics.down = {"222222222222/eu-west-1"}
    run_for(engine, clock, timedelta(hours=8), timedelta(minutes=30))
    for _, start, end in metrics.calls:
        assert end - start <= MAX_TELEMETRY_LOOKBACK
    b_spans = metrics.of("i-b")
    assert b_spans[2][0] == b_spans[1][0]  # behind since the start of its first failed read
    assert b_spans[-1][0] == b_spans[-1][1] - MAX_TELEMETRY_LOOKBACK  # capped, not growing
    metrics.down = set()
    back = clock.now()
    engine.run_cycle()
    assert metrics.of("i-b")[-1] == (back - MAX_TELEMETRY_LOOKBACK, back)
    assert stored_minutes(db, "i-b", back - MAX_TELEMETRY_LOOKBACK, back) == every_minute(
        back - MAX_TELEMETRY_LOOKBACK, back)
    # A was read once per cycle, from the watermark: never the long span B needed
    assert all(end - start <= timedelta(minutes=30) for start, end in metrics.of("i-a")[1:])


def test_a_scope_still_down_when_another_one_fails_is_read_from_its_own_time(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    """Two scopes fall behind at different times; each is read from its own, grouped."""
    two_regions(cloud)
    cloud.add("i-c", always("busy"))
    cloud.set("i-c", account="333333333333", region="ap-south-1", zone="ap-south-1a")
    metrics = PartialMetrics(cloud, aws_scope)
    engine = make_engine()
    engine.run_cycle()
    clock.advance(STEP)
    b_since = clock.now() - STEP  # the watermark its first failed read started from
    metrics.down = {"222222222222/eu-west-1"}
    run_for(engine, clock, timedelta(minutes=10), STEP)
    c_since = clock.now() - STEP
    metrics.down.add("333333333333/ap-south-1")
    run_for(engine, clock, timedelta(minutes=10), STEP)
    metrics.down = set()
    back = clock.now()
    engine.run_cycle()
    assert sorted(c for c in metrics.calls if c[2] == back) == [
        (["i-a"], back - STEP, back), (["i-b"], b_since, back), (["i-c"], c_since, back)]
    for iid, since in (("i-b", b_since), ("i-c", c_since)):
        assert stored_minutes(db, iid, since, back) == every_minute(since, back)


def test_a_provider_without_metric_gaps_reads_as_before(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-a", always("busy"))
    calls: list[tuple[datetime, datetime]] = []
    inner = cloud.gpu_metrics

    def gpu_metrics(instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        calls.append((start, end))
        return inner(instances, start, end)

    cloud.gpu_metrics = gpu_metrics  # type: ignore[method-assign]
    engine = make_engine()
    run_for(engine, clock, timedelta(minutes=20), STEP)
    assert contiguous(calls, timedelta(0)) and len(calls) == 4
    with db.session() as s:
        assert control.get(s, behind.key("sim")) is None  # nothing kept for it


def test_behind_scopes_of_instances_gone_from_the_inventory_are_dropped() -> None:
    now = T0
    floor = now - MAX_TELEMETRY_LOOKBACK
    cloud = ScriptedCloud(ManualClock(T0))
    a = cloud.add("i-a")
    lagging = {"111111111111/us-east-1": now - timedelta(hours=1),
               "999999999999/us-west-2": now - timedelta(hours=9)}
    # i-a's read of its behind scope failed again: it stays behind since when it was (capped)
    kept = behind.update(lagging, [(a, now - timedelta(hours=1), False)],
                         ["111111111111/us-east-1"], [a], floor)
    assert kept == {"111111111111/us-east-1": now - timedelta(hours=1)}
    # it read: caught up
    assert behind.update(lagging, [(a, now - timedelta(hours=1), False)], [], [a], floor) == {}
    # a gap that names no instance asked about is not kept (nothing could catch it up)
    assert behind.update({}, [(a, now, False)], ["888888888888/eu-north-1"], [a], floor) == {}


def test_a_provider_down_as_a_whole_keeps_the_watermark_and_what_is_behind(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    """GCP raises when no project of a call reads: the watermark stays, the scope that was
    already behind stays behind (its gap open), and both read their missed minutes later."""
    two_regions(cloud)
    metrics = PartialMetrics(cloud, gcp_scope, raise_if_none_read=True)
    engine = make_engine()
    engine.run_cycle()
    clock.advance(STEP)
    since = clock.now() - STEP
    metrics.down = {"222222222222"}
    run_for(engine, clock, timedelta(minutes=10), STEP)
    metrics.down = {"111111111111", "222222222222"}
    run_for(engine, clock, timedelta(minutes=10), STEP)
    metrics.down = set()
    back = clock.now()
    engine.run_cycle()
    assert sorted(c for c in metrics.calls if c[2] == back) == [
        (["i-a"], back - timedelta(minutes=15), back), (["i-b"], since, back)]
    for iid in ("i-a", "i-b"):
        assert stored_minutes(db, iid, since, back) == every_minute(since, back)
    with db.session() as s:
        rows = sorted(s.exec(select(GapRow)), key=lambda r: r.scope)
    assert [(r.scope, r.resolved_at) for r in rows] == [
        ("111111111111 metrics", back), ("222222222222 metrics", back)]


def test_a_chunk_holds_fewer_instances_the_longer_its_span() -> None:
    """What one call brings back grows with its span: a steady cycle's quarter hour asks
    5,000 instances at a time, a first cycle's hour 1,250, a long catch-up no fewer than
    500 (ten scopes of 50 still in flight at once; a third of that a call where three
    calls are in flight)."""
    assert chunk_size(T0, T0 + timedelta(minutes=15)) == 5_000
    assert chunk_size(T0, T0 + timedelta(minutes=45)) == 1_666
    assert chunk_size(T0, T0 + timedelta(hours=1)) == 1_250
    assert chunk_size(T0, T0 + timedelta(minutes=14, seconds=1)) == 5_000  # whole minutes
    assert chunk_size(T0, T0 + MAX_TELEMETRY_LOOKBACK) == 500
    assert chunk_size(T0, T0 + MAX_TELEMETRY_LOOKBACK, in_flight=3) == 166
    assert chunk_size(T0, T0 + timedelta(seconds=30)) == 75_000  # under a minute: one
    # providers read at once share it, and so do the calls in flight of each
    assert chunk_size(T0, T0 + timedelta(minutes=15), readers=2) == 2_500
    assert chunk_size(T0, T0 + timedelta(minutes=15), readers=2, in_flight=3) == 833
    assert chunk_size(T0, T0 + MAX_TELEMETRY_LOOKBACK, readers=2) == 500
    # calls that overlap: no more than one call asks without its span cut (37,500
    # instance-minutes for each of two providers: 104 instances over 6 hours), rather than
    # 166 whose span is then asked in two slices
    assert chunk_size(T0, T0 + MAX_TELEMETRY_LOOKBACK, readers=2, in_flight=3) == 104
    assert time_slices(T0, T0 + MAX_TELEMETRY_LOOKBACK, 104, readers=2) == [
        (T0, T0 + MAX_TELEMETRY_LOOKBACK)]


def test_metrics_are_asked_a_chunk_of_scopes_at_a_time_and_a_failing_chunk_is_its_gap(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks of whole scopes, each stored before the next is asked (an organisation's hour
    of readings is not held at once); a chunk whose call raises is a gap for its scopes and
    is read again from where it was, the others are stored."""
    monkeypatch.setattr("costguard.engine.fetch.TELEMETRY_CHUNK", 2)  # instance-minutes
    monkeypatch.setattr("costguard.engine.fetch.TELEMETRY_CHUNK_MIN", 2)  # so: 2 instances
    for n, region in enumerate(["us-east-1", "us-east-1", "eu-west-1", "ap-south-1"]):
        cloud.add(f"i-{n}", always("busy"))
        cloud.set(f"i-{n}", region=region, zone=f"{region}a")
    metrics = PartialMetrics(cloud, aws_scope, raise_if_none_read=True)
    stored_before_next: list[bool] = []
    inner = metrics.gpu_metrics

    def asked(instances: Sequence[Instance], start: datetime, end: datetime
              ) -> list[GpuMinute]:
        if metrics.calls:  # the previous chunk's readings are in the store already
            last = metrics.calls[-1][0][0]
            stored_before_next.append(bool(stored_minutes(db, last, start, end)))
        return inner(instances, start, end)

    cloud.gpu_metrics = asked  # type: ignore[method-assign]
    engine = make_engine()
    engine.run_cycle()
    first = [ids for ids, _, _ in metrics.calls]
    # us-east-1's two instances together, then eu-west-1 and ap-south-1 (2 a chunk)
    assert first == [["i-0", "i-1"], ["i-2", "i-3"]]
    assert all(stored_before_next)

    clock.advance(STEP)
    metrics.down = {"111111111111/eu-west-1", "111111111111/ap-south-1"}
    summary = engine.run_cycle()
    # the chunk of the two down scopes raised: its scopes are gaps, us-east-1 is stored
    assert sorted(g["scope"] for g in summary.gaps) == [
        "111111111111/ap-south-1 metrics", "111111111111/eu-west-1 metrics"]
    assert stored_minutes(db, "i-0", clock.now() - STEP, clock.now())
    assert not stored_minutes(db, "i-2", clock.now() - STEP, clock.now())
    metrics.down = set()
    clock.advance(STEP)
    engine.run_cycle()  # back: read from where it was
    assert stored_minutes(db, "i-2", clock.now() - 2 * STEP, clock.now()) == every_minute(
        clock.now() - 2 * STEP, clock.now())


def test_a_long_span_is_cut_into_slices_only_for_a_scope_larger_than_a_chunk() -> None:
    hour = timedelta(hours=1)
    assert time_slices(T0, T0 + hour, 1_000) == [(T0, T0 + hour)]  # 1,000 x 60 <= 75,000
    # after a downtime: 500 instances x 150 minutes a call
    m = timedelta(minutes=1)
    assert time_slices(T0, T0 + MAX_TELEMETRY_LOOKBACK, 500) == [
        (T0, T0 + 150 * m), (T0 + 150 * m, T0 + 300 * m), (T0 + 300 * m, T0 + 360 * m)]
    # a huge scope: never finer than a quarter hour, contiguous to the end
    cut = time_slices(T0, T0 + MAX_TELEMETRY_LOOKBACK, 100_000)
    assert len(cut) == 24 and cut[0][0] == T0 and cut[-1][1] == T0 + MAX_TELEMETRY_LOOKBACK
    assert all(a[1] == b[0] for a, b in pairwise(cut))
    # providers read at once share the instance-minutes
    assert time_slices(T0, T0 + hour, 1_000, readers=2) == [(T0, T0 + 37 * m),
                                                            (T0 + 37 * m, T0 + hour)]


def test_a_scope_larger_than_a_chunk_is_read_a_slice_at_a_time_after_a_downtime(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk keeps its scope whole, so one scope was one call over the whole downtime:
    its answer held at once (5 GB for a simulated 10,000-instance scope over 6 hours).
    Each call now brings at most the chunk's instance-minutes; every minute is stored."""
    monkeypatch.setattr("costguard.engine.fetch.TELEMETRY_CHUNK", 60)  # instance-minutes
    monkeypatch.setattr("costguard.engine.fetch.TELEMETRY_CHUNK_MIN", 2)
    for n in range(4):  # one scope of 4: larger than a chunk of 2
        cloud.add(f"i-{n}", always("busy"))
    metrics = PartialMetrics(cloud, aws_scope)
    engine = make_engine()
    engine.run_cycle()
    down_since = clock.now()
    clock.advance(timedelta(hours=1))  # the daemon was down
    metrics.calls.clear()
    engine.run_cycle()
    spans = [(start, end) for _, start, end in metrics.calls]
    assert [ids for ids, _, _ in metrics.calls] == [["i-0", "i-1", "i-2", "i-3"]] * 4
    assert spans == time_slices(down_since, clock.now(), 4)  # 15 minutes each
    assert all(end - start == timedelta(minutes=15) for start, end in spans)
    for n in range(4):
        assert stored_minutes(db, f"i-{n}", down_since, clock.now()) == every_minute(
            down_since, clock.now())
