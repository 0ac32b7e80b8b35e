"""The engine's reading window: what a cycle just fetched is not read back, nothing is lost."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costguard.model import GpuMinute, TelemetrySource
from costguard.store.db import Database
from costguard.store.packed_view import WindowReading
from costguard.store.readings import write_minutes
from costguard.store.window import ReadingWindow

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
CW, AGENT = TelemetrySource.CLOUDWATCH, TelemetrySource.AGENT


def _utc(raw: Any) -> datetime:
    """A stored `minute` as the driver returns it, as an aware datetime."""
    value = raw if isinstance(raw, datetime) else datetime.fromisoformat(raw)
    return value.replace(tzinfo=UTC)


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
    # the window keeps no source: the values tell them apart (agent 50, CloudWatch 2 and 7)
    assert sorted({m.util_mean for m in a}) == [2.0, 7.0, 50.0]
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


def _full(iid: str, ago: int, gpu: int, **fields: object) -> GpuMinute:
    return GpuMinute.model_validate({
        "provider": "aws", "instance_id": iid, "gpu_index": gpu, "source": AGENT,
        "minute": NOW - timedelta(minutes=ago), **fields})


def _fields(m: object) -> tuple[object, ...]:
    return tuple(getattr(m, f) for f in WindowReading._fields)


def test_the_window_hands_back_every_field_the_classifier_reads_unchanged(db: Database) -> None:
    # None stays None (not 0, not NaN), integers stay integers (memory beyond 2**32,
    # a GPU index past 0), a 5-minute span keeps its span; fed and read-back alike
    fed = [_full("i-a", 10, 3, util_mean=0.0, util_max=99.5, sm_p95=12.25,
                 mem_used_bytes=85_899_345_920, process_count=0, top_process_pid=4_194_304,
                 top_process_bytes=2**40),
           _full("i-a", 5, 0, span_minutes=5, sm_mean=3.5, util_p95=None)]
    stored = [_full("i-b", 7, 1, util_mean=1.5, mem_total_bytes=1, host_cpu_pct=50.0)]
    with db.session() as s:
        write_minutes(s, fed + stored)
    window = ReadingWindow()
    window.add(fed, since=NOW - timedelta(minutes=30))
    with db.session() as s:
        window.refresh(s, [("aws", "i-a"), ("aws", "i-b")], NOW - timedelta(hours=1), NOW)
    got = window.minutes(("aws", "i-a"), NOW - timedelta(hours=1), NOW)
    assert [_fields(m) for m in got] == [_fields(m) for m in fed]
    assert all(type(m.mem_used_bytes) is int for m in got if m.mem_used_bytes is not None)
    assert all(m.minute.tzinfo is not None for m in got)
    b = window.minutes(("aws", "i-b"), NOW - timedelta(hours=1), NOW)
    assert [_fields(m) for m in b] == [_fields(m) for m in stored]


def test_a_minute_read_again_is_held_once_and_the_newest_copy_wins(db: Database) -> None:
    window = ReadingWindow(late=timedelta(minutes=5))
    with db.session() as s:
        write_minutes(s, [_m("i-b", ago, AGENT, 30.0) for ago in range(60, 0, -1)])
        window.refresh(s, [("aws", "i-b")], NOW - timedelta(hours=1), NOW)
    later = NOW + timedelta(minutes=5)
    with db.session() as s:  # an agent replay rewrites the last two minutes of the span
        write_minutes(s, [_m("i-b", ago, AGENT, 90.0) for ago in (2, 1)])
        for _ in range(12):  # an hour of cycles re-reading the late span each time
            window.refresh(s, [("aws", "i-b")], later - timedelta(hours=1), later)
    got = window.minutes(("aws", "i-b"), later - timedelta(hours=1), later)
    assert [m.util_mean for m in got].count(90.0) == 2
    assert len(got) == 55
    # re-read copies are not kept alongside (12 refreshes re-read 5 minutes each): what is
    # held beyond the 55 is the frozen quarter hour that has partly left the window, held
    # until all of it has (store/frozen.py), never handed out
    assert window.readings() <= 60


def _bytes_a_reading(window: ReadingWindow, minutes: list[GpuMinute]) -> float:
    """What `window` holds more per reading once `minutes` are added."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    window.add(minutes, since=NOW - timedelta(hours=1))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert window.readings() == len(minutes)
    return held / len(minutes)


def test_the_window_holds_an_agents_reading_in_about_fifty_bytes(db: Database) -> None:
    # the daemon's memory at fleet scale is this window (an hour of every GPU's minutes):
    # as GpuMinute models it was ~2 KB a reading, 1.8 GB at 10,000 instances
    minutes = [_full(f"i-{n}", ago, gpu, util_mean=1.0, util_max=2.0, mem_used_bytes=10**9,
                     process_count=1)
               for n in range(50) for gpu in range(4) for ago in range(60, 0, -1)]
    assert len(minutes) == 12_000
    held = _bytes_a_reading(ReadingWindow(), minutes)
    assert held < 60, f"{held:.0f} bytes a reading"


def test_a_cloud_read_instance_is_held_narrow_until_an_agent_reading_widens_it(
        db: Database) -> None:
    # a cloud's readings carry four percentages (utilisation's and SM activity's mean and
    # maximum) and their source, no percentile, memory or process figure: held in 18 bytes,
    # not 46; an agent's reading of the same instance widens its rows, nothing held changes
    cloud = [_full(f"i-{n}", ago, gpu, source=CW, util_mean=1.5, util_max=2.0,
                   sm_mean=0.25, sm_max=0.75)
             for n in range(50) for gpu in range(4) for ago in range(60, 0, -1)]
    window = ReadingWindow()
    held = _bytes_a_reading(window, cloud)
    assert held < 24, f"{held:.0f} bytes a reading"

    agent = _full("i-0", 30, 1, util_mean=40.0, mem_used_bytes=3 * 2**30, process_count=2,
                  top_process_pid=77, top_process_bytes=2**30)
    with db.session() as s:
        write_minutes(s, [agent])
    with db.session() as s:  # read back from the store (what another process wrote)
        window.refresh(s, [(m.provider, m.instance_id) for m in cloud],
                       NOW - timedelta(hours=1), NOW)
    got = {(m.gpu_index, m.minute): _fields(m)
           for m in window.minutes(("aws", "i-0"), NOW - timedelta(hours=1), NOW)}
    want = {(m.gpu_index, m.minute): _fields(m) for m in cloud if m.instance_id == "i-0"}
    want[(1, agent.minute)] = _fields(agent)  # the newer copy of that minute wins
    assert got == want
    assert window.readings() == len(cloud)
    other = window.minutes(("aws", "i-1"), NOW - timedelta(hours=1), NOW)
    assert sorted(map(_fields, other)) == sorted(
        _fields(m) for m in cloud if m.instance_id == "i-1")


@pytest.mark.parametrize("agent_only", ["util_p95", "sm_p95", "mem_used_bytes",
                                        "process_count", "top_process_pid",
                                        "top_process_bytes"])
def test_a_figure_a_narrow_row_has_no_place_for_widens_it(agent_only: str) -> None:
    # each figure only the agent measures, alone, is kept (a narrow row would drop it) and
    # lands in its own field, the others None
    window = ReadingWindow()
    cloud = _full("i-a", 10, 0, source=CW, util_mean=1.5, util_max=2.0, sm_mean=0.5,
                  sm_max=0.75)
    agent = _full("i-a", 5, 0, util_mean=None, **{agent_only: 7})
    window.add([cloud, agent], since=NOW - timedelta(hours=1))
    got = window.minutes(("aws", "i-a"), NOW - timedelta(hours=1), NOW)
    assert [_fields(m) for m in got] == [_fields(cloud), _fields(agent)]
    assert getattr(got[1], agent_only) == 7 and got[1].util_mean is None


def test_minutes_fetched_again_each_cycle_do_not_pile_up(db: Database) -> None:
    # CloudWatch's last 10 minutes are fetched again every 5-minute cycle (metrics settle):
    # the window holds each minute once, whatever the overlap
    window = ReadingWindow()
    for cycle in range(24):  # two hours of cycles, an hour's window
        now = NOW + timedelta(minutes=5 * cycle)
        fetched = [GpuMinute(provider="aws", instance_id="i-a", gpu_index=gpu, source=CW,
                             minute=now - timedelta(minutes=ago), util_mean=float(cycle))
                   for gpu in range(8) for ago in range(15, 0, -1)]
        window.add(fetched, since=now - timedelta(minutes=15))
        with db.session() as s:
            window.refresh(s, [("aws", "i-a")], now - timedelta(hours=1), now)
        got = window.minutes(("aws", "i-a"), now - timedelta(hours=1), now)
        assert len(got) == 8 * min(60, 15 + 5 * cycle)
        assert window.readings() <= 2 * 8 * 75, (cycle, window.readings())


def test_a_later_refresh_does_not_read_again_the_longer_readings_it_holds(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # a GPU stopped after an hour of 5-minute CloudWatch points, fed as they were fetched
    points = [GpuMinute(provider="aws", instance_id="i-s", source=CW, span_minutes=5,
                        minute=NOW - timedelta(minutes=5 * k), util_mean=1.0)
              for k in range(12, 0, -1)]
    window = ReadingWindow(late=timedelta(minutes=5))
    with db.session() as s:
        write_minutes(s, points)
        window.add(points, since=NOW - timedelta(hours=1))
        window.refresh(s, [("aws", "i-s")], NOW - timedelta(hours=1), NOW)
    later = NOW + timedelta(minutes=5)
    agent = _m("i-s", -3, AGENT, 0.0)  # the agent, stored by another writer meanwhile
    with db.session() as s:
        write_minutes(s, [agent])
        execute, read = s.execute, []

        def counting(*args: Any, **kwargs: Any) -> Any:
            rows = execute(*args, **kwargs).freeze()
            # the minute as the driver sent it (the store reads it raw): text on SQLite
            read.extend(_utc(row.minute) for row in rows.data)
            return rows()

        monkeypatch.setattr(s, "execute", counting)
        window.refresh(s, [("aws", "i-s")], later - timedelta(hours=1), later)
    # rows the store sent: the agent's minute and the point that began in the late span,
    # none of the older points it covers
    assert sorted(read) == [NOW - timedelta(minutes=5), agent.minute]
    got = window.minutes(("aws", "i-s"), later - timedelta(hours=1), later)
    assert len(got) == 12  # 11 points still in the window, and the agent's minute


def test_readings_that_end_before_the_expected_span_are_stored_but_not_held() -> None:
    """After a downtime a cycle reads hours of metrics: the window holds only its span."""
    hours = [_m("i-a", ago, CW, 3.0) for ago in range(180, 0, -1)]
    window = ReadingWindow()
    window.expect(NOW - timedelta(hours=1))
    window.add(hours, since=NOW - timedelta(hours=3))
    assert window.readings() == 60
    # a 5-minute point that began before the span but reaches into it is kept
    window.add([GpuMinute(provider="aws", instance_id="i-b", source=CW, span_minutes=5,
                          minute=NOW - timedelta(minutes=62), util_mean=1.0),
                GpuMinute(provider="aws", instance_id="i-b", source=CW, span_minutes=5,
                          minute=NOW - timedelta(minutes=65), util_mean=1.0)],
               since=NOW - timedelta(hours=3))
    assert [m.minute for m in window.minutes(("aws", "i-b"), NOW - timedelta(hours=3), NOW)
            ] == [NOW - timedelta(minutes=62)]


def _counting_selects(db: Database) -> list[str]:
    from sqlalchemy import event

    statements: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", before)
    return statements


def test_a_span_older_than_the_window_is_read_from_the_store_a_batch_at_a_time(
        db: Database) -> None:
    from costguard.minutes import covering
    from costguard.store.readings import read_minutes
    from costguard.store.window import SpanReader

    # five instances with three hours stored; the window holds the last hour
    stored = [_m(f"i-{n}", ago, CW, float(n), gpu) for n in range(5)
              for ago in range(180, 0, -1) for gpu in (0, 1)]
    with db.session() as s:
        write_minutes(s, stored)
    window = ReadingWindow()
    with db.session() as s:
        window.refresh(s, [("aws", f"i-{n}") for n in range(5)], NOW - timedelta(hours=1), NOW)
        expected = read_minutes(s, [("aws", f"i-{n}") for n in range(5)],
                                NOW - timedelta(hours=3), NOW)
    selects = _counting_selects(db)
    old, recent = NOW - timedelta(hours=3), NOW - timedelta(minutes=30)
    order = [("aws", f"i-{n}") for n in (3, 1, 4, 0, 2)]  # the order accrual asks in
    with db.session() as s:
        reader = SpanReader(s, NOW, window, batch=2)
        # i-4 is charged since half an hour ago (inside the window), the rest since 3 h
        reader.expect([(ref, recent if ref[1] == "i-4" else old) for ref in order])
        for ref in order:
            start = recent if ref[1] == "i-4" else old
            got = reader(ref, start, NOW)
            want = covering(expected[ref], start, NOW)
            assert sorted((r.gpu_index, r.minute, r.util_mean) for r in got) == sorted(
                (m.gpu_index, m.minute, m.util_mean) for m in want)
            assert len(reader._held) <= 2  # never more than a batch's instances held
    # i-4 from the window; the other four from the store, two instances per read: each read
    # one of gpu_readings and one of which settled hours have blocks (none here)
    assert len([q for q in selects if "FROM gpu_readings" in q]) == 2
    assert len([q for q in selects if "JOIN reading_blocks" in q]) == 2
    assert len(selects) == 4


def test_without_a_window_every_span_is_read_from_the_store(db: Database) -> None:
    from costguard.store.window import SpanReader

    with db.session() as s:
        write_minutes(s, [_m("i-a", ago, CW, 9.0) for ago in range(30, 0, -1)])
    with db.session() as s:
        reader = SpanReader(s, NOW)
        reader.expect([(("aws", "i-a"), NOW - timedelta(minutes=10))])
        got = reader(("aws", "i-a"), NOW - timedelta(minutes=10), NOW)
        # an instance accrual did not announce is read on its own
        alone = reader(("aws", "i-z"), NOW - timedelta(minutes=10), NOW)
    assert [r.minute for r in got] == [NOW - timedelta(minutes=k) for k in range(10, 0, -1)]
    assert len(alone) == 0


def test_agent_only_hands_out_the_agents_readings_from_the_window_and_the_store(
        db: Database) -> None:
    # accounting.idle_evidence: agent; the agent measured the even minutes, CloudWatch the odd
    from costguard.store.window import SpanReader

    stored = [_m("i-a", ago, AGENT if ago % 2 == 0 else CW, 1.0) for ago in range(120, 0, -1)]
    with db.session() as s:
        write_minutes(s, stored)
    window = ReadingWindow()
    with db.session() as s:
        window.refresh(s, [("aws", "i-a")], NOW - timedelta(hours=1), NOW)
        for start in (NOW - timedelta(minutes=30), NOW - timedelta(hours=2)):
            # inside the window, then from the store
            every = SpanReader(s, NOW, window)(("aws", "i-a"), start, NOW)
            agents = SpanReader(s, NOW, window, agent_only=True)(("aws", "i-a"), start, NOW)
            assert {r.source for r in every} == {CW, AGENT}
            assert sorted(r.minute for r in agents) == sorted(
                m.minute for m in stored if m.source is AGENT and m.minute >= start)


@pytest.mark.parametrize("step", [53, 6 * 60 + 7], ids=["53m", "6h7m"])
def test_sliding_readings_hand_out_what_the_store_holds_while_holding_a_slice(
        db: Database, step: int) -> None:
    # a backtest's readings: two days of two instances (one in 5-minute readings, one in
    # minutes with a second GPU), stepped through as a replay does: every slice asked for
    # is what the store holds for it, and only a slice is held
    from costguard.store.readings import read_minutes
    from costguard.store.window import SlidingReadings

    start = NOW - timedelta(days=2)
    minutes = [_full("i-5", ago, 0, span_minutes=5, util_max=float(ago % 97))
               for ago in range(2 * 24 * 60, 0, -5)]
    minutes += [_full("i-1", ago, gpu, util_max=float((ago + gpu) % 89), process_count=gpu)
                for ago in range(2 * 24 * 60, 0, -1) for gpu in (0, 1)]
    with db.session() as s:
        write_minutes(s, minutes)
    refs = [("aws", "i-5"), ("aws", "i-1")]
    with db.session() as s:
        held = SlidingReadings(s, refs)
        most = 0
        t = start + timedelta(minutes=47)
        while t < NOW:
            held.hold(t - timedelta(minutes=45), t)
            most = max(most, held.readings())
            for ref in refs:
                for lo in (t - timedelta(minutes=45), t - timedelta(minutes=3)):
                    got = sorted(_fields(r) for r in held.minutes(ref, lo, t))
                    want = sorted(_fields(r) for r in read_minutes(s, [ref], lo, t)[ref])
                    assert got == want, (ref, lo, t)
            t += timedelta(minutes=step)
        # 45 minutes back and an hour ahead, of three GPUs' minutes, give or take a chunk
        assert most <= 3 * (45 + 60 + 60)
        # reading ahead: two days, in minute order, a 5-minute reading that began before
        # the start included
        ahead = list(held.scan(("aws", "i-5"), start + timedelta(minutes=3), NOW))
        assert [r.minute for r in ahead] == sorted(r.minute for r in ahead)
        stored = read_minutes(s, [("aws", "i-5")], start + timedelta(minutes=3), NOW)
        assert _fields(ahead[0]) == _fields(min(stored[("aws", "i-5")],
                                                key=lambda m: m.minute))
        assert ahead[0].minute == start
        assert len(ahead) == 2 * 24 * 12


def test_each_instance_is_held_from_its_own_start_and_a_longer_one_is_read_again(
        db: Database) -> None:
    from costguard.store.window import SpanReader

    # two hours stored of each; i-vm's kind looks back 45 minutes, i-nb's two hours
    with db.session() as s:
        write_minutes(s, [_m(iid, ago, AGENT, 3.0) for iid in ("i-vm", "i-nb")
                          for ago in range(120, 0, -1)])
    vm, nb = ("aws", "i-vm"), ("aws", "i-nb")
    starts = {vm: NOW - timedelta(minutes=45), nb: NOW - timedelta(hours=2)}
    fed = [_m("i-vm", ago, CW, 4.0) for ago in range(120, 0, -1)]
    window = ReadingWindow()
    window.expect(NOW - timedelta(hours=2), starts)
    window.add(fed, since=NOW - timedelta(hours=2))  # fed minutes older than its start: dropped
    with db.session() as s:
        window.refresh(s, [vm, nb], NOW - timedelta(hours=2), NOW, starts)
    assert window.start == NOW - timedelta(hours=2)
    assert window.readings() == 45 + 120  # not i-vm's two hours
    held = window.minutes(vm, NOW - timedelta(hours=2), NOW)
    assert min(m.minute for m in held) == NOW - timedelta(minutes=45)
    assert len(window.minutes(nb, NOW - timedelta(hours=2), NOW)) == 120
    assert window.holds(nb, NOW - timedelta(hours=1))
    assert not window.holds(vm, NOW - timedelta(hours=1))
    assert window.holds(vm, NOW - timedelta(minutes=45))
    # accrual's span of i-vm that begins before its start comes from the store
    with db.session() as s:
        reader = SpanReader(s, NOW, window)
        reader.expect([(vm, NOW - timedelta(hours=1)), (nb, NOW - timedelta(hours=1))])
        assert len(reader(vm, NOW - timedelta(hours=1), NOW)) == 60
        assert reader._held.keys() == {vm}  # i-nb's hour was in the window
        assert len(reader(nb, NOW - timedelta(hours=1), NOW)) == 60
    # i-vm's kind now looks back further (a policy reloaded): its whole span is read again
    starts[vm] = NOW - timedelta(minutes=90)
    with db.session() as s:
        window.refresh(s, [vm, nb], NOW - timedelta(hours=2), NOW, starts)
    assert min(m.minute for m in window.minutes(vm, NOW - timedelta(hours=2), NOW)) == (
        NOW - timedelta(minutes=90))
    assert window.readings() == 90 + 120


def test_percentages_are_held_to_a_hundredth_rounded_down_as_settled_blocks_keep_them(
        db: Database) -> None:
    from costguard.store import compact
    from costguard.telemetry.classify import classify

    # the window holds a percentage as hundredths of a point (two bytes), rounded down: the
    # grid the settled blocks keep, so the window hands out what the store will once the
    # hour settles, and a threshold on the grid compares the same on either copy
    values = [4.999, 5.0, 12.345, 0.004, 99.999, 100.0, 0.0, 33.3333]
    old = NOW - timedelta(hours=3)  # an hour that settles
    fed = [GpuMinute(provider="aws", instance_id="i-g", gpu_index=0, source=CW,
                     minute=old + timedelta(minutes=k), util_mean=v, util_max=v, sm_mean=v,
                     sm_max=v) for k, v in enumerate(values)]
    window = ReadingWindow()
    window.add(fed, since=old)
    with db.session() as s:
        write_minutes(s, fed)
        window.refresh(s, [("aws", "i-g")], old, old + timedelta(minutes=10))
    held = window.minutes(("aws", "i-g"), old, old + timedelta(minutes=10))
    assert [m.util_mean for m in held] == [4.99, 5.0, 12.34, 0.0, 99.99, 100.0, 0.0, 33.33]
    assert all(m.util_max == m.sm_mean == m.sm_max == m.util_mean for m in held)
    assert all(m.util_p95 is None and m.mem_used_bytes is None for m in held)

    compact.compact(db.session, NOW, raw_since=NOW - timedelta(days=7))
    with db.session() as s:
        again = ReadingWindow()
        again.refresh(s, [("aws", "i-g")], old, old + timedelta(minutes=10))
    settled = again.minutes(("aws", "i-g"), old, old + timedelta(minutes=10))
    assert [_fields(m) for m in settled] == [_fields(m) for m in held]

    # below 5 %: the 4.999 minute is idle on either copy, the 5.0 one is not
    def verdict(minutes: list[Any], at: datetime) -> str:
        return str(classify(minutes, window_start=at, window_end=at + timedelta(minutes=1),
                            gpu_count=1, below=5.0, min_coverage=0.5).verdict)

    got = []
    for k in (0, 1):
        at = old + timedelta(minutes=k)
        mine = verdict([m for m in held if m.minute == at], at)
        assert mine == verdict([m for m in fed if m.minute == at], at)
        got.append(mine == "idle")
    assert got == [True, False]


def test_a_percentage_remembered_on_the_grid_is_the_one_computed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    from costguard.store import packed as w

    # the packer looks a percentage's grid point up among those it has computed, forgetting
    # them all past a size: whatever it remembers or forgets, the point is `_pct`'s
    monkeypatch.setattr(w, "_ON_GRID_MAX", 50)
    rng = random.Random(7)
    values = [rng.choice([rng.uniform(0, 100), float(rng.randint(0, 100)),
                          rng.randint(0, 10_000) / 100, None]) for _ in range(2_000)]
    for i in range(0, len(values) - 6, 6):
        six = values[i:i + 6]
        m = _full("i-p", 5, 0, util_mean=six[0], util_max=six[1], sm_mean=six[2],
                  sm_max=six[3], util_p95=six[4], sm_p95=six[5])
        assert w.pack_minute(m)[4:10] == tuple(map(w._pct, six))
    assert len(w._ON_GRID) <= 51 + 6


def test_minutes_fed_through_the_window_alone_are_frozen_each_quarter_hour(
        db: Database) -> None:
    # an instance whose readings this process fetches (`add`: nothing re-read, nothing
    # late) is compacted by no re-read: its quarter hours freeze as soon as they can, and
    # what is held unfrozen is never more than the last half hour (it was up to an hour)
    window = ReadingWindow()
    ref = ("aws", "i-a")
    for cycle in range(30):  # two and a half hours of 5-minute cycles
        now = NOW + timedelta(minutes=5 * cycle)
        fetched = [GpuMinute(provider="aws", instance_id="i-a", gpu_index=gpu, source=AGENT,
                             minute=now - timedelta(minutes=ago), util_mean=float(ago),
                             mem_used_bytes=2**30)
                   for gpu in range(8) for ago in range(5, 0, -1)]
        window.add(fetched, since=now - timedelta(minutes=5))
        with db.session() as s:
            window.refresh(s, [ref], now - timedelta(hours=1), now)
        rows = window._by_ref[ref]
        unfrozen = {t for _, t, *_ in rows.row.iter_unpack(bytes(rows.data))}
        assert max(unfrozen) - min(unfrozen) < 30 * 60, (cycle, len(unfrozen))
        got = window.minutes(ref, now - timedelta(hours=1), now)
        assert len(got) == 8 * min(60, 5 + 5 * cycle)
