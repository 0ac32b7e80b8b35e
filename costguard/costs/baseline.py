"""Robust seasonal baselines: median of the same season slot, MAD of the residuals.

Pure functions over a series of bucket values, so detection can be tested on synthetic
series and replayed over history. A bucket is anomalous when it exceeds its slot's median
(same weekday for daily buckets, same hour of day for hourly ones) by more than
`sensitivity` robust deviations AND by at least `min_impact`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median

MAD_TO_SIGMA = 1.4826
MIN_SEASON_POINTS = 3  # fewer same-slot points than this: use all recent buckets instead


@dataclass(frozen=True)
class Season:
    step: timedelta  # bucket size
    period: int  # buckets per season (7 days, 24 hours)
    history: int  # buckets of history a baseline reads

    @classmethod
    def for_granularity(cls, granularity: str) -> Season:
        if granularity == "hour":
            return cls(timedelta(hours=1), 24, 24 * 14)
        return cls(timedelta(days=1), 7, 7 * 8)


@dataclass(frozen=True)
class Verdict:
    bucket: datetime
    actual: float
    baseline: float
    scale: float
    anomalous: bool

    @property
    def impact(self) -> float:
        return self.actual - self.baseline


def judge(series: Mapping[datetime, float], bucket: datetime, season: Season, *,
          sensitivity: float, min_impact: float,
          excluded: frozenset[datetime] = frozenset()) -> Verdict:
    """Compare `series[bucket]` with its seasonal baseline (missing buckets count as 0)."""
    actual = series.get(bucket, 0.0)
    past = [bucket - season.step * k for k in range(1, season.history + 1)]
    usable = [b for b in past if b not in excluded]
    same_slot = [series.get(b, 0.0) for b in usable
                 if round((bucket - b) / season.step) % season.period == 0]
    if len(same_slot) >= MIN_SEASON_POINTS:
        baseline = median(same_slot)
        residuals = _seasonal_residuals(series, usable, season)
    else:
        recent = [series.get(b, 0.0) for b in usable[:season.period * 2]]
        if len(recent) < MIN_SEASON_POINTS:
            return Verdict(bucket, actual, actual, 0.0, False)
        baseline = median(recent)
        residuals = [v - baseline for v in recent]
    scale = MAD_TO_SIGMA * median(abs(r) for r in residuals) if residuals else 0.0
    # Residuals are taken from in-sample slot medians (they understate the spread), and the
    # baseline is itself a median of few points (it has an error of its own): widen for both.
    n = max(len(same_slot), MIN_SEASON_POINTS)
    scale *= math.sqrt(n / (n - 1)) * math.sqrt(1 + math.pi / (2 * n))
    # a floor on the scale: a perfectly flat history would make any cent an anomaly
    scale = max(scale, 0.02 * abs(baseline))
    anomalous = actual - baseline > sensitivity * scale and actual - baseline >= min_impact
    return Verdict(bucket, actual, baseline, scale, anomalous and actual - baseline > 0)


def _seasonal_residuals(series: Mapping[datetime, float], buckets: Sequence[datetime],
                        season: Season) -> list[float]:
    """Each past bucket minus the median of its own season slot (weekly pattern removed)."""
    slots: dict[int, list[float]] = {}
    origin = buckets[0] if buckets else None
    for b in buckets:
        assert origin is not None
        slots.setdefault(round((origin - b) / season.step) % season.period, []).append(
            series.get(b, 0.0))
    medians = {k: median(v) for k, v in slots.items()}
    assert origin is not None
    return [series.get(b, 0.0) - medians[round((origin - b) / season.step) % season.period]
            for b in buckets]


def scan(series: Mapping[datetime, float], buckets: Sequence[datetime], season: Season, *,
         sensitivity: float, min_impact: float,
         expected: frozenset[datetime] = frozenset()) -> list[Verdict]:
    """Judge `buckets` in order; an anomaly found is left out of later baselines unless
    it was marked expected (then it is the new normal and counts like any bucket)."""
    excluded: set[datetime] = set()
    found: list[Verdict] = []
    for bucket in buckets:
        v = judge(series, bucket, season, sensitivity=sensitivity, min_impact=min_impact,
                  excluded=frozenset(excluded))
        if v.anomalous:
            found.append(v)
            if bucket not in expected:
                excluded.add(bucket)
    return found
