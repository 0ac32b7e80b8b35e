"""Fixtures: the real Google clients against local fakes (Compute REST, Monitoring gRPC)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp import GcpProvider

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture
def fake() -> Iterator[FakeGcp]:
    with FakeGcp() as running:
        yield running


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def make_provider(fake: FakeGcp, clock: ManualClock) -> Iterator[Callable[..., GcpProvider]]:
    made: list[GcpProvider] = []

    def make(**settings: Any) -> GcpProvider:
        settings.setdefault("projects", ["ml-prod"])
        provider = GcpProvider(fake.settings(**settings), clock=clock)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
