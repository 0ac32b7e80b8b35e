"""The charts' spend per day is the report's spend for that day, whether the day is rolled
up (read in one grouped query, from the daily rows or the per-day summary) or still raw."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bench.console import current_intervals
from bench.costs import START, year_of_rollups
from costguard.report.queries import daily_series, spend
from costguard.store.db import Database

DAYS = 12


@pytest.mark.parametrize(("dim", "filters"), [
    ("team", {}), ("instance-type", {"team": "research"}), ("instance", {}),
    ("lifecycle", {"instance": "i-00000003"}), ("team", {"team": "unattributed"}),
])
def test_each_day_is_the_report_s_spend_for_that_day(
        tmp_path: Path, dim: str, filters: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the bench's bulk loader binds SQLite's parameters: this store is SQLite
    db = Database(f"sqlite:///{tmp_path / 'series.db'}")
    monkeypatch.setattr("bench.console.INSTANCES", 40)
    year_of_rollups(db, 40, DAYS)  # rolled up to START + DAYS
    current_intervals(db, timedelta(days=DAYS))  # then 10 raw minutes
    since = START + timedelta(days=3, hours=5)  # a window that starts inside a day
    until = START + timedelta(days=DAYS, minutes=10)
    with db.session() as s:
        series = daily_series(s, dim, since, until, filters)
        expected: dict[str, dict[object, tuple[int, int]]] = {}
        day = START + timedelta(days=3)
        while day < until:
            for row in spend(s, [dim], max(day, since), min(day + timedelta(days=1), until),
                             filters).rows:
                expected.setdefault(row.key[0], {})[day] = (row.cost_micros,
                                                            row.idle_cost_micros)
            day += timedelta(days=1)
    assert series == expected
    assert sum(len(days) for days in series.values()) >= DAYS - 3
    if not filters:  # the raw day after the watermark is there too
        assert any(START + timedelta(days=DAYS) in days for days in series.values())
    db.dispose()
