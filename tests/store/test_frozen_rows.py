"""The reading window's frozen chunks (store/frozen.py): an instance's rows that freeze
their old readings hand out exactly what rows that never freeze do, whatever arrives in
whatever order, and hold the old readings in fewer bytes."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from costguard.model import GpuMinute, TelemetrySource
from costguard.store import frozen
from costguard.store.packed import FREEZE_AFTER, Rows, pack_minute
from tests.packed_readings import NOW

T0 = int(NOW.timestamp())


def _reading(gpu: int, minute: int, util: float, agent: bool) -> tuple[int, ...]:
    # a (GPU, minute) always spans the same minutes (a 5-minute point on the fives, one
    # minute otherwise), whoever read it
    span = 5 if minute % 5 == 0 else 1
    extra = {"mem_used_bytes": 2**30 + minute, "process_count": 1} if agent else {}
    return pack_minute(GpuMinute(
        provider="aws", instance_id="i-1", gpu_index=gpu, span_minutes=span,
        minute=NOW + timedelta(minutes=minute), util_mean=util, util_max=util,
        source=TelemetrySource.AGENT if agent else TelemetrySource.CLOUDWATCH, **extra))


# what happens to one instance's rows: readings arrive (a cycle's minutes, a re-read of
# the last ones, a late or caught-up one), the window's start moves on and compacts, views
readings_st = st.tuples(st.integers(0, 3), st.integers(0, 150),
                        st.sampled_from([0.0, 3.0, 40.0]), st.booleans())
step = st.one_of(
    st.tuples(st.just("cycle"), st.integers(1, 12), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("cycle"), st.integers(4, 6), st.integers(0, 10), st.just(False)),
    st.tuples(st.just("late"), readings_st),
    st.tuples(st.just("compact"), st.integers(0, 10)),
    st.tuples(st.just("view"), st.integers(0, 60), st.integers(1, 90)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=10, max_size=80), st.integers(1, 4), st.booleans())
def test_rows_that_freeze_hand_out_what_rows_that_do_not_do(
        steps: list[tuple[object, ...]], gpus: int, compact_each_cycle: bool) -> None:
    plain, freezing = Rows(), Rows()
    newest, start = 0, 0  # minutes after T0: the newest read, the window's start
    for kind, *args in steps:
        if kind == "cycle":  # the next minutes of every GPU, and the last few read again
            ahead, again, agent = args
            for minute in range(max(0, newest - again), newest + ahead):
                for gpu in range(gpus):
                    row = _reading(gpu, minute, float((minute * 7 + gpu) % 50), agent)
                    plain.append(row)
                    freezing.append(row)
            newest += ahead
            if compact_each_cycle:  # as the window compacts an instance it re-read
                start = max(start, newest - 60)
                plain.compact(T0 + start * 60)
                freezing.compact(T0 + start * 60, freeze=True)
            _same(plain, freezing, start, newest + 1)
        elif kind == "late":
            (gpu, minute, util, agent), = args
            row = _reading(gpu, minute, util, agent)
            plain.append(row)
            freezing.append(row)
        elif kind == "compact":  # the window moves on (an hour behind the newest, or less)
            start = max(start, newest - 60 + args[0])
            plain.compact(T0 + start * 60)
            freezing.compact(T0 + start * 60, freeze=True)
        else:
            _same(plain, freezing, start + args[0], start + args[0] + args[1])
    _same(plain, freezing, start, newest + 200)


def _same(plain: Rows, freezing: Rows, lo: int, hi: int) -> None:
    """Both hand out the same readings of [lo, hi) (minutes after T0)."""
    def got(rows: Rows) -> dict[tuple[int, object], object]:
        return {(r.gpu_index, r.minute): r for r in rows.view(T0 + lo * 60, T0 + hi * 60)}
    assert got(freezing) == got(plain)


def _hour(rows: Rows, gpus: int, *, agent: bool) -> None:
    """An hour and a quarter of minutes, a 5-minute cycle at a time, the window's start an
    hour behind (as `ReadingWindow.refresh` compacts)."""
    for cycle in range(15):
        for minute in range(cycle * 5, cycle * 5 + 5):
            for gpu in range(gpus):
                rows.append(_reading(gpu, minute, float((minute * 13 + gpu * 7) % 100), agent))
        rows.compact(T0 + (cycle * 5 + 5 - 60) * 60, freeze=True)


def test_an_eight_gpu_hosts_hour_is_held_mostly_frozen_in_fewer_bytes() -> None:
    rows = Rows()
    _hour(rows, 8, agent=True)
    frozen_records = sum(frozen.head_of(c).records for c in rows.chunks)
    # the whole quarter hours that ended a quarter hour before the newest minute (74): 15-44
    assert len(rows.chunks) == 2 and frozen_records == 8 * 30
    held = len(rows.data) + sum(len(c) for c in rows.chunks)
    assert held < 0.75 * len(rows) * rows.row.size, (held, len(rows) * rows.row.size)
    # the unfrozen part is the last quarter hour or so, whatever the hour before held
    newest = max(frozen.head_of(c).last for c in rows.chunks)
    assert newest < T0 + 75 * 60 - FREEZE_AFTER


def test_a_reading_read_again_for_a_frozen_minute_replaces_the_frozen_one() -> None:
    rows = Rows()
    _hour(rows, 2, agent=False)
    assert rows.chunks
    again = _reading(1, 30, 99.0, False)
    rows.append(again)
    for compact in (False, True):
        if compact:
            rows.compact(T0 + 15 * 60, freeze=True)
        got = [r for r in rows.view(T0 + 30 * 60, T0 + 31 * 60) if r.gpu_index == 1]
        assert [r.util_mean for r in got] == [99.0]
    assert len(rows.view(T0 + 15 * 60, T0 + 75 * 60)) == 2 * 60
    assert len(rows) == 2 * 60  # the frozen copy is not held beside the new one


def test_what_has_left_the_window_goes_a_quarter_hour_after() -> None:
    rows = Rows()
    _hour(rows, 4, agent=False)
    total = len(rows)
    rows.compact(T0 + 40 * 60, freeze=True)  # 25 minutes more have left
    assert len(rows) < total
    assert all(frozen.head_of(c).first >= T0 + (40 * 60 - FREEZE_AFTER) for c in rows.chunks)
    assert rows.oldest >= T0 + 40 * 60 - FREEZE_AFTER
    rows.compact(T0 + 80 * 60, freeze=True)  # all of it has
    assert not rows.chunks and len(rows) == 0


def test_a_chunk_partly_out_of_the_window_keeps_the_readings_still_in_it() -> None:
    # one GPU read a minute at a time, compacted every 5-minute cycle an hour back: the
    # first chunk (minutes 0-28) is frozen again without what has left once its first
    # minute is a quarter hour out; the minutes still in the window are all handed out
    plain, freezing = Rows(), Rows()
    for newest in range(5, 155, 5):
        for minute in range(newest - 5, newest):
            row = _reading(0, minute, float(minute % 9), False)
            plain.append(row)
            freezing.append(row)
        start = max(0, newest - 60)
        plain.compact(T0 + start * 60)
        freezing.compact(T0 + start * 60, freeze=True)
        _same(plain, freezing, start, newest)
        assert len(freezing.view(T0 + start * 60, T0 + newest * 60)) == newest - start
        assert freezing.oldest >= T0 + (start - 20) * 60  # held at most a quarter hour more


def test_rows_whose_readings_have_all_left_are_not_ripe_again_until_a_new_one() -> None:
    # readings that had all left the window when first compacted (an instance that stopped
    # reporting, read late): the window does not compact it every cycle for nothing
    rows = Rows()
    for minute in range(30):
        rows.append(_reading(0, minute, 1.0, False))
    assert rows.ripe()
    rows.compact(T0 + 200 * 60, freeze=True)
    assert len(rows) == 0 and not rows.ripe()
    for minute in range(230, 250):
        rows.append(_reading(0, minute, 1.0, False))
    assert rows.ripe()
