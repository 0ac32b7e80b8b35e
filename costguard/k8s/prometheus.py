"""A small client for the Prometheus HTTP API (`/api/v1/query`, `/api/v1/query_range`).

Only what costguard reads: instant vectors and range matrices, as `Series` (labels and
(unix seconds, value) points). Queries go as POST forms (a long PromQL expression never
meets a URL length limit); every answer is read up to `MAX_BYTES` and parsed under the
project's JSON rules, so a proxy answering gigabytes or a hostile server cannot fill the
daemon's memory. A range longer than `MAX_POINTS` steps is asked for in pieces
(Prometheus refuses more than 11,000 points per series). NaN and infinite samples (a
stale or broken exporter), and samples dated before 1970 or past the year 9000, are
dropped: no sample is not a zero. Errors are
`PrometheusError`, naming the cluster, the API's own error and never the token.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from pydantic import SecretStr

from costguard.bounded_read import read_at_most
from costguard.errors import CostguardError
from costguard.limited_json import JsonRefused, parse_json

MAX_BYTES = 128 * 2**20
MAX_POINTS = 10_000  # per series per request (Prometheus's own limit is 11,000)
# a sample's time outside [1970, 9000) is no sample: a datetime cannot hold year 10,000, and
# Prometheus writes none there
LATEST_S = 221_845_392_000.0


class PrometheusError(CostguardError):
    """A Prometheus query failed: unreachable, refused, or an answer of another shape."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)  # (unix s, value)

    def get(self, *names: str) -> str:
        """The first of `names` that this series carries with a value ('' for none)."""
        for name in names:
            value = self.labels.get(name)
            if value:
                return value
        return ""

    @property
    def last(self) -> float:
        return self.points[-1][1] if self.points else math.nan


class PrometheusClient:
    def __init__(self, url: str, *, cluster: str, token: SecretStr | None = None,
                 timeout: float = 30.0, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.cluster = cluster
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token.get_secret_value()}"
        self._client = httpx.Client(headers=headers, timeout=timeout, transport=transport,
                                    follow_redirects=False)
        self.calls = 0

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, expr: str, at: datetime) -> list[Series]:
        """An instant query at `at`: one point per series."""
        data = self._post("query", {"query": expr, "time": _ts(at)})
        if data.get("resultType") != "vector":
            raise self._error(f"expected a vector, got {data.get('resultType')!r}", expr)
        return [s for s in (self._series(item, "value", expr) for item in data["result"])
                if s.points]

    def query_range(self, expr: str, start: datetime, end: datetime, step: timedelta
                    ) -> list[Series]:
        """A range query over [start, end] at `step`, asked for in pieces of at most
        `MAX_POINTS` steps; a series' points from every piece, in time order."""
        seconds = step.total_seconds()
        if seconds <= 0:
            raise ValueError("step must be positive")
        merged: dict[tuple[tuple[str, str], ...], Series] = {}
        for lo, hi in _pieces(start.timestamp(), end.timestamp(), seconds):
            data = self._post("query_range", {"query": expr, "start": f"{lo:.3f}",
                                              "end": f"{hi:.3f}", "step": f"{seconds:g}"})
            if data.get("resultType") != "matrix":
                raise self._error(f"expected a matrix, got {data.get('resultType')!r}", expr)
            for item in data["result"]:
                series = self._series(item, "values", expr)
                key = tuple(sorted(series.labels.items()))
                if key in merged:
                    merged[key].points.extend(series.points)
                else:
                    merged[key] = series
        return [s for s in merged.values() if s.points]

    def _post(self, endpoint: str, form: dict[str, str]) -> dict[str, Any]:
        self.calls += 1
        where = f"{self.url}/api/v1/{endpoint}"
        try:
            with self._client.stream("POST", where, data=form) as response:
                body = read_at_most(response, MAX_BYTES)
                if len(body) > MAX_BYTES:
                    raise self._error(f"answer over {MAX_BYTES // 2**20} MiB; narrow the "
                                      "period or the cluster's selector", form["query"])
                status = response.status_code
        except httpx.HTTPError as exc:
            raise PrometheusError(
                f"kubernetes cluster {self.cluster}: cannot reach Prometheus at {self.url} "
                f"({type(exc).__name__}: {exc}); check prometheus_url") from None
        try:
            answer = parse_json(body, mend_text=True)
        except (JsonRefused, ValueError):
            answer = None
        if not isinstance(answer, dict):
            hint = (" (is prometheus_url the Prometheus API, not a login page?)"
                    if status == 200 else "")
            raise self._error(f"HTTP {status}, not a Prometheus API answer{hint}",
                              form["query"])
        if answer.get("status") != "success" or not isinstance(answer.get("data"), dict):
            kind = answer.get("errorType") or f"HTTP {status}"
            raise self._error(f"{kind}: {answer.get('error') or 'no error text'}",
                              form["query"])
        data: dict[str, Any] = answer["data"]
        if not isinstance(data.get("result"), list):
            raise self._error("no result list in the answer", form["query"])
        return data

    def _series(self, item: Any, key: str, expr: str) -> Series:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise self._error("a result without its labels", expr)
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        raw = [item.get(key)] if key == "value" else item.get(key)
        if not isinstance(raw, list):
            raise self._error(f"a result without {key}", expr)
        points = []
        for pair in raw:
            try:
                t, v = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                raise self._error(f"a sample that is not [time, value]: {pair!r:.60}",
                                  expr) from None
            if math.isfinite(v) and 0 <= t < LATEST_S:
                points.append((t, v))
        return Series(labels, points)

    def _error(self, what: str, expr: str) -> PrometheusError:
        shown = " ".join(expr.split())
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        return PrometheusError(f"kubernetes cluster {self.cluster}: Prometheus at {self.url}: "
                               f"{what} (query: {shown})")


def _ts(at: datetime) -> str:
    return f"{at.timestamp():.3f}"


def _pieces(start: float, end: float, step: float) -> Iterator[tuple[float, float]]:
    """[start, end] as pieces of at most MAX_POINTS steps that share no step."""
    lo = start
    while lo <= end:
        hi = min(end, lo + step * (MAX_POINTS - 1))
        yield lo, hi
        lo = hi + step
