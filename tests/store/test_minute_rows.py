"""A call's readings as rows (`costguard.minute_rows`): stored and windowed exactly as the
readings they are, and handed out as those readings to anything else that asks."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete
from sqlmodel import select

from costguard.minute_rows import LEAD, MinuteRows, names_of
from costguard.model import GpuMinute, TelemetrySource
from costguard.store.db import Database
from costguard.store.readings import write_minutes
from costguard.store.tables import GpuReadingRow
from costguard.store.window import ReadingWindow
from tests.packed_readings import NOW, readings


def _reading(minute: int, **fields: Any) -> GpuMinute:
    return GpuMinute(provider="gcp", instance_id="vm-1", minute=NOW + timedelta(minutes=minute),
                     source=TelemetrySource.CLOUD_MONITORING, **fields)


def test_rows_hand_out_the_readings_they_hold() -> None:
    minutes = [_reading(0, util_mean=3.0), _reading(1, sm_max=9.5, host_cpu_pct=20.0)]
    rows = MinuteRows.of(minutes)
    assert rows.names == (*LEAD, "util_mean", "sm_max", "host_cpu_pct")
    assert rows == minutes and list(rows) == minutes and rows[1] == minutes[1]
    assert isinstance(rows[:1], MinuteRows) and rows[:1] == minutes[:1]
    assert rows + minutes[:1] == [*minutes, minutes[0]]  # as a list's `+`
    assert minutes[:1] + rows == [minutes[0], *minutes]
    assert rows != minutes[:1] and len(rows) == 2
    assert repr(rows) == "MinuteRows(2 readings of util_mean, sm_max, host_cpu_pct)"


def test_rows_are_named_in_the_readings_order_or_refused() -> None:
    assert names_of(["host_cpu_pct", "util_mean", "gpu_index"]) == (
        *LEAD, "util_mean", "host_cpu_pct")
    with pytest.raises(KeyError):
        names_of(["utilisation"])
    with pytest.raises(ValueError, match="not the names"):
        MinuteRows((*LEAD, "host_cpu_pct", "util_mean"), [])
    with pytest.raises(ValueError, match="not the names"):
        MinuteRows(("instance_id", "provider", *LEAD[2:]), [])


def test_only_rows_of_the_same_names_are_joined() -> None:
    a = MinuteRows.of([_reading(0, util_mean=1.0)])
    b = MinuteRows.of([_reading(1, util_mean=2.0)])
    assert MinuteRows.joined([a, b], a.names) == [*a, *b]
    with pytest.raises(ValueError, match="joined"):
        MinuteRows.joined([a, MinuteRows.of([_reading(2, sm_mean=1.0)])], a.names)


def _stored(db: Database) -> list[dict[str, Any]]:
    with db.session() as s:
        rows = s.exec(select(GpuReadingRow).order_by(
            GpuReadingRow.gpu_index, GpuReadingRow.minute)).all()
        return [r.model_dump() for r in rows]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(st.lists(readings(), max_size=10), min_size=1, max_size=3))
def test_rows_are_stored_as_the_readings_they_are(
        db: Database, batches: list[list[GpuMinute]]) -> None:
    """Batches written as rows leave the store as the same readings written as models:
    a repeated key's last copy, a later batch's copy replacing an earlier one whole (what it
    does not hold set none), the GPU-minutes counted."""
    def store(as_rows: bool) -> tuple[list[int], list[dict[str, Any]]]:
        with db.session() as s:
            s.execute(delete(GpuReadingRow))
        counts = []
        for batch in batches:
            with db.session() as s:
                counts.append(write_minutes(s, MinuteRows.of(batch) if as_rows else batch))
        return counts, _stored(db)

    assert store(as_rows=True) == store(as_rows=False)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(readings(), max_size=12), send=st.integers(1, 4))
def test_a_batch_sent_a_few_rows_at_a_time_is_stored_as_sent_whole(
        db: Database, batch: list[GpuMinute], send: int) -> None:
    """The store binds and sends a batch `_WRITE_BATCH` rows at a time (each bound row is a
    copy): sent `send` at a time, models and rows leave the store as sent all at once."""
    from costguard.store import readings as stored_readings

    def store(as_rows: bool, at_once: int) -> tuple[int, list[dict[str, Any]]]:
        with db.session() as s:
            s.execute(delete(GpuReadingRow))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(stored_readings, "_WRITE_BATCH", at_once)
            with db.session() as s:
                count = write_minutes(s, MinuteRows.of(batch) if as_rows else batch)
        return count, _stored(db)

    for as_rows in (True, False):
        assert store(as_rows, send) == store(as_rows, 10_000)


@settings(max_examples=150, deadline=None)
@given(batch=st.lists(readings(), max_size=16), expected=st.integers(0, 150))
def test_rows_are_windowed_as_the_readings_they_are(batch: list[GpuMinute], expected: int
                                                    ) -> None:
    """The window packs a reading's row into the record it packs the reading into, and
    leaves out the same early ones."""
    def hold(minutes: list[GpuMinute] | MinuteRows) -> tuple[Any, ...]:
        window = ReadingWindow()
        window.expect(NOW - timedelta(minutes=expected))
        window.add(minutes, since=NOW - timedelta(hours=1))
        held = window._by_ref.get(("aws", "i-1"))
        return (window._fed, None if held is None else bytes(held.data))

    assert hold(MinuteRows.of(batch)) == hold(batch)
