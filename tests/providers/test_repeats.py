"""Readings handed over before and stored are left out when they come back unchanged; until
the caller says it stored them, every reading comes back; only the recent ones are kept."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from costguard.minute_rows import names_of
from costguard.providers.repeats import Receipt, Repeats

T = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
HORIZON = timedelta(minutes=15)


NAMES = names_of(("util_mean", "util_max", "host_cpu_pct"))
Row = tuple[Any, ...]


def _row(minute: int, util: float, gpu: int = 0, **more: Any) -> Row:
    """A reading's row (`costguard.minute_rows`), as a provider builds it."""
    fields = {"provider": "aws", "instance_id": "i-1", "gpu_index": gpu,
              "minute": T + timedelta(minutes=minute), "source": "cloudwatch",
              "span_minutes": 1, "samples": 1, "util_mean": util, **more}
    return tuple(fields.get(name) for name in NAMES)


class _Calls:
    """Calls of one `Repeats`, one after another: `stored()` confirms the last one."""

    def __init__(self, repeats: Repeats) -> None:
        self.repeats = repeats
        self.last: Receipt | None = None

    def __call__(self, end: int, rows: list[Row]) -> list[Row]:
        self.last = self.repeats.begin(T + timedelta(minutes=end))
        return self.last.fresh(rows)

    def stored(self) -> None:
        self.repeats.stored(self.last)


def test_nothing_is_left_out_until_the_caller_says_it_stored_the_readings() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    rows = [_row(0, 10.0), _row(5, 20.0)]
    assert call(10, rows) == rows
    assert call(10, rows) == rows  # not confirmed: all again
    call.stored()
    assert call(10, rows) == []
    assert len(repeats) == 2


def test_a_reading_changed_in_any_field_or_a_new_one_is_fresh() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    call(10, [_row(0, 10.0), _row(5, 20.0), _row(5, 20.0, gpu=1)])
    call.stored()
    later = [_row(0, 10.0), _row(5, 20.5), _row(5, 20.0, gpu=1, host_cpu_pct=3.0),
             _row(10, 30.0)]
    assert call(15, later) == later[1:]


def test_the_same_values_in_other_fields_are_not_a_repeat() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    call(1, [_row(0, 5.0, util_max=7.0)])
    call.stored()
    swapped = [_row(0, 7.0, util_max=5.0)]
    assert call(1, swapped) == swapped
    none_yet = [_row(0, 5.0, util_max=None, host_cpu_pct=7.0)]
    assert call(1, none_yet) == none_yet


def test_a_call_never_confirmed_is_forgotten_at_the_next_call() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    call(10, [_row(0, 10.0)])
    call.stored()
    call(10, [_row(0, 10.0), _row(5, 20.0)])  # its store failed: no `stored`
    again = [_row(0, 10.0), _row(5, 20.0)]
    assert call(10, again) == [_row(5, 20.0)]
    call.stored()  # confirming twice, or with nothing pending, changes nothing
    call.stored()
    assert call(10, again) == []


def test_only_the_horizon_before_the_latest_end_is_kept() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    rows = [_row(m, float(m)) for m in range(0, 30, 5)]  # 0 .. 25
    call(30, rows)
    call.stored()
    assert len(repeats) == 3  # 15, 20, 25: older minutes are never asked again
    # a call over older minutes (a scope catching up) gets them all again
    assert call(30, rows) == rows[:3]
    # an earlier end does not move the horizon back
    assert call(20, rows) == rows[:3]


def test_an_instances_later_readings_replace_what_was_kept_of_it() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    other = _row(20, 1.0, instance_id="i-2")
    call(30, [_row(15, 15.0), _row(20, 20.0), other])
    call.stored()
    call(35, [_row(20, 20.0), _row(25, 25.0)])  # the next cycle: i-1 only
    call.stored()
    assert len(repeats) == 3  # i-1's 20 and 25, i-2's 20
    assert call(35, [_row(15, 15.0), _row(20, 20.0), other]) == [_row(15, 15.0)]


def test_an_instance_no_call_asked_about_within_the_horizon_is_forgotten() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    gone = _row(20, 1.0, instance_id="i-gone")
    call(30, [_row(20, 20.0), gone])
    call.stored()
    for end in (35, 40, 45):  # three cycles later, i-gone (stopped) was not asked about
        call(end, [_row(end - 5, float(end))])
        call.stored()
    assert len(repeats) == 1
    assert call(50, [gone]) == [gone]


def test_a_failed_call_does_not_narrow_what_the_next_looks_up() -> None:
    repeats = Repeats(HORIZON)
    call = _Calls(repeats)
    rows = [_row(m, float(m)) for m in range(15, 30, 5)]  # 15 .. 25: all kept
    call(30, rows)
    call.stored()
    call(35, [*rows, _row(30, 30.0)])  # stored nothing
    # asked again from where the stored call left off: what it kept is still known
    assert call(40, [*rows, _row(30, 30.0), _row(35, 35.0)]) == [
        _row(30, 30.0), _row(35, 35.0)]


def test_threads_of_one_call_share_what_they_saw() -> None:
    repeats = Repeats(HORIZON)
    scopes = [[_row(m, float(g), gpu=g) for m in range(0, 15, 5)] for g in range(8)]
    receipt = repeats.begin(T + HORIZON)
    with ThreadPoolExecutor(4) as pool:
        fresh = list(pool.map(receipt.fresh, scopes))
    assert fresh == scopes
    repeats.stored(receipt)
    assert len(repeats) == 24
    receipt = repeats.begin(T + HORIZON)
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(receipt.fresh, scopes)) == [[]] * 8


def test_overlapping_calls_each_confirm_only_their_own_readings_in_any_order() -> None:
    """The engine asks for the next chunk of a fleet while it stores the last one: a call
    confirmed counts its own readings as handed over, whatever began or ended since; one
    never confirmed (its store failed) leaves its readings to come back."""
    repeats = Repeats(HORIZON)
    a_rows = [_row(m, 1.0) for m in range(0, 15, 5)]
    b_rows = [_row(m, 2.0, instance_id="i-2") for m in range(0, 15, 5)]
    c_rows = [_row(m, 3.0, instance_id="i-3") for m in range(0, 15, 5)]
    end = T + HORIZON
    a, b, c = repeats.begin(end), repeats.begin(end), repeats.begin(end)
    assert (a.fresh(a_rows), c.fresh(c_rows), b.fresh(b_rows)) == (a_rows, c_rows, b_rows)
    repeats.stored(b)  # b first, then a; c's store failed
    repeats.stored(a)
    repeats.stored(a)  # twice changes nothing
    repeats.stored(None)  # nor does a list no call of a `Repeats` returned
    assert len(repeats) == 6
    again = repeats.begin(end)
    assert again.fresh([*a_rows, *b_rows, *c_rows]) == c_rows
