"""metrics-refresh-day (bench/cost_gauges.py) on a small fleet: the refresh with the day's
hours kept gives the gauges read whole at every checkpoint (the bench refuses otherwise)."""

from __future__ import annotations

import pytest

import bench.cost_gauges as cost_gauges


def test_the_bench_s_kept_gauges_are_those_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cost_gauges, "INSTANCES", 40)
    rows = cost_gauges.metrics_refresh_day()
    assert [r["time"] for r in rows] == ["01:55", "06:55", "12:55", "23:55"]
    assert [r["intervals_today"] for r in rows] == [40 * 23, 40 * 83, 40 * 155, 40 * 287]
    assert all(r["same_gauges"] == "yes" for r in rows)
