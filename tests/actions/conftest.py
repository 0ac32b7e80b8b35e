"""Fixtures of the act-stage scenarios: a manual clock at T0, the scripted cloud on it, and the
engines a test makes (their databases disposed after it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from costguard.clock import ManualClock
from costguard.engine import Engine
from tests.fakes.cloud import T0, ScriptedCloud, full_cloud


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def cloud(clock: ManualClock) -> ScriptedCloud:
    return full_cloud(clock)


@pytest.fixture
def made() -> Iterator[list[Engine]]:
    engines: list[Engine] = []
    yield engines
    for e in engines:
        e.db.dispose()
