"""Readings handed over before and stored are left out when they come back unchanged; until
the caller says it stored them, every reading comes back; only the recent ones are kept."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from costguard.providers.repeats import Repeats

T = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
HORIZON = timedelta(minutes=15)


def _row(minute: int, util: float, gpu: int = 0, **more: Any) -> dict[str, Any]:
    return {"instance_id": "i-1", "gpu_index": gpu, "minute": T + timedelta(minutes=minute),
            "util_mean": util, **more}


def _call(repeats: Repeats, end: int, rows: list[dict[str, Any]]) -> list[Any]:
    repeats.begin(T + timedelta(minutes=end))
    return repeats.fresh(rows)


def test_nothing_is_left_out_until_the_caller_says_it_stored_the_readings() -> None:
    repeats = Repeats(HORIZON)
    rows = [_row(0, 10.0), _row(5, 20.0)]
    assert _call(repeats, 10, rows) == rows
    assert _call(repeats, 10, rows) == rows  # not confirmed: all again
    repeats.stored()
    assert _call(repeats, 10, rows) == []
    assert len(repeats) == 2


def test_a_reading_changed_in_any_field_or_a_new_one_is_fresh() -> None:
    repeats = Repeats(HORIZON)
    _call(repeats, 10, [_row(0, 10.0), _row(5, 20.0), _row(5, 20.0, gpu=1)])
    repeats.stored()
    later = [_row(0, 10.0), _row(5, 20.5), _row(5, 20.0, gpu=1, host_cpu_pct=3.0),
             _row(10, 30.0)]
    assert _call(repeats, 15, later) == later[1:]


def test_the_same_values_under_other_field_names_are_not_a_repeat() -> None:
    repeats = Repeats(HORIZON)
    _call(repeats, 1, [{"instance_id": "i-1", "minute": T, "util_mean": 5.0, "util_max": 7.0}])
    repeats.stored()
    swapped = [{"instance_id": "i-1", "minute": T, "util_max": 5.0, "util_mean": 7.0}]
    assert _call(repeats, 1, swapped) == swapped


def test_a_call_never_confirmed_is_forgotten_at_the_next_call() -> None:
    repeats = Repeats(HORIZON)
    _call(repeats, 10, [_row(0, 10.0)])
    repeats.stored()
    _call(repeats, 10, [_row(0, 10.0), _row(5, 20.0)])  # its store failed: no `stored`
    again = [_row(0, 10.0), _row(5, 20.0)]
    assert _call(repeats, 10, again) == [_row(5, 20.0)]
    repeats.stored()  # confirming twice, or with nothing pending, changes nothing
    repeats.stored()
    assert _call(repeats, 10, again) == []


def test_only_the_horizon_before_the_latest_end_is_kept() -> None:
    repeats = Repeats(HORIZON)
    rows = [_row(m, float(m)) for m in range(0, 30, 5)]  # 0 .. 25
    _call(repeats, 30, rows)
    repeats.stored()
    assert len(repeats) == 3  # 15, 20, 25: older minutes are never asked again
    # a call over older minutes (a scope catching up) gets them all again
    assert _call(repeats, 30, rows) == rows[:3]
    # an earlier end does not move the horizon back
    assert _call(repeats, 20, rows) == rows[:3]


def test_an_instances_later_readings_replace_what_was_kept_of_it() -> None:
    repeats = Repeats(HORIZON)
    other = _row(20, 1.0, instance_id="i-2")
    _call(repeats, 30, [_row(15, 15.0), _row(20, 20.0), other])
    repeats.stored()
    _call(repeats, 35, [_row(20, 20.0), _row(25, 25.0)])  # the next cycle: i-1 only
    repeats.stored()
    assert len(repeats) == 3  # i-1's 20 and 25, i-2's 20
    assert _call(repeats, 35, [_row(15, 15.0), _row(20, 20.0), other]) == [_row(15, 15.0)]


def test_an_instance_no_call_asked_about_within_the_horizon_is_forgotten() -> None:
    repeats = Repeats(HORIZON)
    gone = _row(20, 1.0, instance_id="i-gone")
    _call(repeats, 30, [_row(20, 20.0), gone])
    repeats.stored()
    for end in (35, 40, 45):  # three cycles later, i-gone (stopped) was not asked about
        _call(repeats, end, [_row(end - 5, float(end))])
        repeats.stored()
    assert len(repeats) == 1
    assert _call(repeats, 50, [gone]) == [gone]


def test_a_failed_call_does_not_narrow_what_the_next_looks_up() -> None:
    repeats = Repeats(HORIZON)
    rows = [_row(m, float(m)) for m in range(15, 30, 5)]  # 15 .. 25: all kept
    _call(repeats, 30, rows)
    repeats.stored()
    _call(repeats, 35, [*rows, _row(30, 30.0)])  # stored nothing
    # asked again from where the stored call left off: what it kept is still known
    assert _call(repeats, 40, [*rows, _row(30, 30.0), _row(35, 35.0)]) == [
        _row(30, 30.0), _row(35, 35.0)]


def test_threads_of_one_call_share_what_they_saw() -> None:
    repeats = Repeats(HORIZON)
    scopes = [[_row(m, float(g), gpu=g) for m in range(0, 15, 5)] for g in range(8)]
    repeats.begin(T + HORIZON)
    with ThreadPoolExecutor(4) as pool:
        fresh = list(pool.map(repeats.fresh, scopes))
    assert fresh == scopes
    repeats.stored()
    assert len(repeats) == 24
    repeats.begin(T + HORIZON)
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(repeats.fresh, scopes)) == [[]] * 8
