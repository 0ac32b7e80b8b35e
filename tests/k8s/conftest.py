"""A real Prometheus (Debian's package) holding three hours of the scenario cluster's
metrics, once per test module that asks for it; skipped by name where the binaries are
missing ('Prometheus unavailable'), failed under CI=true."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.k8s.history import History
from tests.k8s.scenario import scenario
from tests.prom import PrometheusUnavailable, binaries, start_prometheus

HISTORY_MINUTES = 180


def _available() -> None:
    try:
        binaries()
    except PrometheusUnavailable as exc:
        if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
            pytest.fail(f"{exc} (CI=true: the Prometheus tests must run, not skip)",
                        pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    _available()
    now = int(time.time()) // 3600 * 3600  # on the hour: the report's hours are whole
    if time.time() - now < 120:
        now -= 3600  # samples may not be newer than Prometheus' own clock
    start = now - 60 * HISTORY_MINUTES
    folder: Path = tmp_path_factory.mktemp("prometheus")
    server = start_prometheus(folder, history=scenario().openmetrics(HISTORY_MINUTES, start))
    try:
        yield History(server, datetime.fromtimestamp(start, UTC),
                      datetime.fromtimestamp(now, UTC))
    finally:
        server.stop()


@pytest.fixture
def prometheus_available() -> None:
    _available()
