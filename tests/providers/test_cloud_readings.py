"""`cloud_readings.validated`: each of a cloud's readings validated on its own, the invalid
ones dropped and named in one warning."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from costguard.minute_rows import LEAD, MinuteRows, names_of
from costguard.model import GpuMinute
from costguard.providers import cloud_readings
from costguard.providers.cloud_readings import Dropped, busiest, validated, whole_bytes

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


NAMES = names_of(("util_mean", "util_max", "mem_used_bytes", "host_cpu_pct"))


def _fields(instance_id: str, minute: int, **fields: Any) -> dict[str, Any]:
    return {"provider": "aws", "instance_id": instance_id, "gpu_index": 0,
            "minute": T0 + timedelta(minutes=minute), "source": "cloudwatch",
            "span_minutes": 1, "samples": 1, "util_mean": 10.0, **fields}


def _row(instance_id: str, minute: int, **fields: Any) -> tuple[Any, ...]:
    """A reading's row (`costguard.minute_rows`), as a provider builds it."""
    given = _fields(instance_id, minute, **fields)
    return tuple(given.get(name) for name in NAMES)


def test_valid_readings_come_back_in_order_and_nothing_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    rows = [_row("i-a", 0), _row("i-b", 1, span_minutes=5, util_max=30.0)]
    dropped = Dropped()
    with caplog.at_level(logging.DEBUG):
        got = validated(NAMES, rows, "acct/us-east-1", dropped)
    assert dropped.count == 0
    assert [(m.instance_id, m.span_minutes, m.util_max) for m in got] == [
        ("i-a", 1, None), ("i-b", 5, 30.0)]
    assert caplog.records == []


@pytest.mark.parametrize(("bad", "more"), [(1, ""), (3, ""), (4, "; and 1 more"),
                                          (5, "; and 2 more")])
def test_invalid_readings_are_dropped_and_the_first_three_named_in_one_warning(
        caplog: pytest.LogCaptureFixture, bad: int, more: str) -> None:
    rows = [_row("i-ok", 0)]
    rows += [_row(f"i-bad{n}", n, gpu_index=2**40) for n in range(bad)]
    rows += [_row("i-ok", 9)]
    dropped = Dropped()
    dropped.add(2)  # an earlier scope's of the same call
    with caplog.at_level(logging.WARNING, logger="costguard.providers.cloud_readings"):
        got = validated(NAMES, rows, "acct/us-east-1/cloudwatch", dropped)
    assert dropped.count == 2 + bad
    assert [(m.instance_id, m.minute) for m in got] == [
        ("i-ok", T0), ("i-ok", T0 + timedelta(minutes=9))]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    why = [f"i-bad{n} GPU 1099511627776 at 2026-11-02 12:0{n}Z: gpu_index 1099511627776: "
           "Input should be less than or equal to 2147483647" for n in range(min(bad, 3))]
    plural = "reading" if bad == 1 else "readings"
    assert record.getMessage() == (
        f"acct/us-east-1/cloudwatch: {bad} GPU {plural} dropped, not valid readings (no data, "
        f"never idle): {'; '.join(why)}{more}")


def test_a_reading_whose_minute_is_no_time_is_named_as_it_came(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="costguard.providers.cloud_readings"):
        row = _row("i-x", 0)
        assert validated(NAMES, [(*row[:3], "soon", *row[4:])], "gcp") == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert "i-x GPU 0 at soon: minute 'soon': Input should be a valid datetime" in line


def test_a_byte_count_is_whole_and_never_negative_and_nan_stays_for_validation() -> None:
    assert [(v, type(v)) for v in map(whole_bytes, (1073741824.7, 0.0, -5.0))] == [
        (1073741824, int), (0, int), (0, int)]
    assert whole_bytes(float("inf")) == float("inf")
    nan = whole_bytes(float("nan"))
    assert nan != nan  # as it came: validation refuses it, int() of it raised


@pytest.mark.parametrize(("held", "added", "kept"), [
    (None, 7.0, 7.0),  # nothing held yet: the other series' figure
    (7.0, 3.0, 7.0),  # the busier stays
    (3.0, 7.0, 7.0),  # the busier replaces
    (7.0, 7.0, 7.0),
    (7.0, None, 7.0),  # the other series has no such figure: what is held stays
    (7.0, math.nan, math.nan),  # a NaN from either side is kept, for validation to refuse
    (math.nan, 7.0, math.nan),
])
def test_busiest_keeps_the_larger_figure_of_two_series_and_any_nan(
        held: float | None, added: float | None, kept: float) -> None:
    row: list[Any] = ["i-a", held]
    busiest(row, [(1, added)])
    if math.isnan(kept):
        assert math.isnan(row[1])
    else:
        assert row[1] == kept


def test_busiest_merges_each_figure_on_its_own() -> None:
    row: list[Any] = [30.0, 60.0, 5, None]
    busiest(row, [(0, 50.0), (1, 55.0), (3, 9)])
    assert row == [50.0, 60.0, 5, 9]


# what a cloud's answer may put in a reading's place: numbers in and out of bounds, not a
# number at all, text, none
_ANY_VALUE = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-2, max_value=2**64), st.sampled_from(["5.5", "x", ""]),
    st.booleans())


def _any_row() -> st.SearchStrategy[tuple[Any, ...]]:
    lead = st.tuples(
        st.sampled_from(["aws", "gcp", "azure"]), st.sampled_from(["i-a", "i-b"]),
        st.one_of(st.integers(min_value=-1, max_value=2**40), st.none()),
        st.one_of(st.just(T0), st.just("soon"), st.none()),
        st.sampled_from(["cloudwatch", "cloud-monitoring", "nvml"]),
        st.integers(min_value=0, max_value=61), st.integers(min_value=0, max_value=2))
    values = st.tuples(*[_ANY_VALUE] * (len(NAMES) - len(LEAD)))
    return st.tuples(lead, values).map(lambda parts: parts[0] + parts[1])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(_any_row(), max_size=6))
def test_rows_are_kept_and_refused_as_a_model_per_reading_keeps_and_refuses_them(
        rows: list[tuple[Any, ...]]) -> None:
    """The column checks are the model's: a row is kept when its reading validates as a
    `GpuMinute`, with the values the model holds, and refused for the error the model
    reports first."""
    kept: list[GpuMinute] = []
    why: list[str] = []
    for row in rows:
        try:
            kept.append(GpuMinute.model_validate(dict(zip(NAMES, row, strict=True))))
        except ValidationError as exc:
            first = exc.errors()[0]
            at = "2026-11-02 12:00Z" if row[3] == T0 else row[3]
            why.append(f"{row[1]} GPU {row[2]} at {at}: {first['loc'][0]} "
                       f"{first.get('input')!r}: {first['msg']}")
    dropped = Dropped()
    with patch.object(cloud_readings, "NAMED", len(rows)), \
            patch.object(cloud_readings.log, "warning") as warned:
        got = validated(NAMES, rows, "scope", dropped)
    assert isinstance(got, MinuteRows) and got.names == NAMES
    assert got.rows == [tuple(getattr(m, n) for n in NAMES) for m in kept]
    assert [m.model_dump() for m in got] == [m.model_dump() for m in kept]
    assert dropped.count == len(why)
    if why:
        (call,) = warned.call_args_list
        assert call.args[4] == "; ".join(why)
    else:
        warned.assert_not_called()


def test_rows_of_another_shape_than_their_names_are_a_mistake_not_readings() -> None:
    row = _row("i-a", 0)
    with pytest.raises(ValueError, match="argument"):  # one row short of the others
        validated(NAMES, [row, row[:-1]], "scope")
    with pytest.raises(ValueError, match="argument"):  # one row longer than the others
        validated(NAMES, [row, (*row, 1.0)], "scope")
    with pytest.raises(ValueError, match="argument"):  # every row one value short
        validated(NAMES, [row[:-1], row[:-1]], "scope")
    with pytest.raises(ValueError, match="argument"):  # ... or one too many
        validated(NAMES, [(*row, 1.0)], "scope")


def test_a_value_of_any_length_is_named_cut_short_never_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    # a dimension or label anyone may write: a GPU index of 5,000 digits (more than Python
    # prints) and an instance id of a kilobyte are refused and named, the line stays short
    row = _row("i-" + "x" * 1000, 0)
    forged = (*row[:2], 10**5000, *row[3:])
    huge_mem = _row("i-b", 1, mem_used_bytes=10**300)
    with caplog.at_level(logging.WARNING, logger="costguard.providers.cloud_readings"):
        assert validated(NAMES, [forged, huge_mem], "scope") == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"i-{'x' * 35}... GPU <a number of 5000 digits> at 2026-11-02 12:00Z: gpu_index " \
           "<a number of 5000 digits>: Input should be" in line
    assert f"i-b GPU 0 at 2026-11-02 12:01Z: mem_used_bytes {'1' + '0' * 36}...: " in line
    assert len(line) < 600


@pytest.mark.parametrize(("value", "quoted", "shown"), [
    ("x" * 40, False, "x" * 40),  # as long as a line shows: whole
    ("x" * 41, False, "x" * 37 + "..."),
    ("ab", True, "'ab'"),
    (7, False, "7"),
])
def test_a_value_is_shown_whole_up_to_the_limit(value: object, quoted: bool, shown: str) -> None:
    assert cloud_readings._shown(value, quoted=quoted) == shown
