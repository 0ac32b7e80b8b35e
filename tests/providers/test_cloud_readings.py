"""`cloud_readings.validated`: each of a cloud's readings validated on its own, the invalid
ones dropped and named in one warning."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costguard.providers.cloud_readings import Dropped, busiest, validated, whole_bytes

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def _row(instance_id: str, minute: int, **fields: Any) -> dict[str, Any]:
    return {"provider": "aws", "instance_id": instance_id, "gpu_index": 0,
            "minute": T0 + timedelta(minutes=minute), "source": "cloudwatch",
            "util_mean": 10.0, **fields}


def test_valid_readings_come_back_in_order_and_nothing_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    rows = [_row("i-a", 0), _row("i-b", 1, span_minutes=5, util_max=30.0)]
    dropped = Dropped()
    with caplog.at_level(logging.DEBUG):
        got = validated(iter(rows), "acct/us-east-1", dropped)
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
        got = validated(rows, "acct/us-east-1/cloudwatch", dropped)
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
        assert validated([{**_row("i-x", 0), "minute": "soon"}], "gcp") == []
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
    row: dict[str, Any] = {"instance_id": "i-a"} if held is None else {"util_max": held}
    busiest(row, {"util_max": added})
    if math.isnan(kept):
        assert math.isnan(row["util_max"])
    else:
        assert row["util_max"] == kept


def test_busiest_merges_each_field_on_its_own() -> None:
    row: dict[str, Any] = {"util_mean": 30.0, "util_max": 60.0, "mem_used_bytes": 5}
    busiest(row, {"util_mean": 50.0, "util_max": 55.0, "mem_total_bytes": 9})
    assert row == {"util_mean": 50.0, "util_max": 60.0, "mem_used_bytes": 5,
                   "mem_total_bytes": 9}
