"""hourly-checks (bench/hourly_checks.py) on a small fleet: the checks with what they read
kept find what the checks read whole find (the bench refuses otherwise), the hourly rule's
anomaly included."""

from __future__ import annotations

import pytest

import bench.hourly_checks as hourly_checks


def test_the_bench_s_kept_checks_find_what_whole_ones_find(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hourly_checks, "INSTANCES", 30)
    rows = hourly_checks.hourly_checks()
    assert [r["time"] for r in rows] == ["22:05", "23:05"]
    assert [r["anomalies_found"] for r in rows] == [0, 1]
    assert all(r["same_results"] == "yes" for r in rows)
