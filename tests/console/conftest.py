"""The console's fixtures: one demo store per worker (the demo takes ~15 s), copied for each
test that writes (snooze, stop now), and the daemon's app served over it on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from costguard import cli_common
from costguard.clock import ManualClock
from tests.console.harness import NOW, fill_demo_store

ADMIN = {"X-Forwarded-User": "ann@example.com", "X-Forwarded-Groups": "ml, finops"}
READER = {"X-Forwarded-User": "bob@example.com", "X-Forwarded-Groups": "ml"}
PROXY = {"auth": "proxy", "admin_group": "finops"}


@pytest.fixture(scope="session")
def demo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console-demo") / "demo.db"
    fill_demo_store(path)
    return path


@pytest.fixture
def store(demo_file: Path, tmp_path: Path) -> str:
    """A copy of the demo store of this test's own: writes stay in the test."""
    copy = tmp_path / "demo.db"
    shutil.copyfile(demo_file, copy)
    return f"sqlite:///{copy}"


@pytest.fixture
def cli_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[ManualClock]:
    """The CLI's clock at the console's `now`, so both read the same window."""
    clock = ManualClock(NOW)
    monkeypatch.setattr(cli_common, "CLOCK", clock)
    monkeypatch.delenv("COSTGUARD_CONFIG", raising=False)
    yield clock
