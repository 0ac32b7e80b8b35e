"""What the k8s tests' Prometheus holds (tests/k8s/conftest.py starts it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tests.prom import PrometheusServer


@dataclass(frozen=True)
class History:
    server: PrometheusServer
    start: datetime  # the scenario's minute 0
    end: datetime  # one minute after its last sample

    @property
    def url(self) -> str:
        return self.server.url


def hours(n: float) -> timedelta:
    return timedelta(hours=n)
