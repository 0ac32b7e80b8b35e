"""The demo's p4d that copies a dataset for 14 hours with its GPUs idle: idle spend the whole
time, its stop held back while the disk is busy (idle-but-busy), stopped once the copy is
done and nothing runs; `explain` says which, at each time."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard import cli_common
from costguard.cli import app
from costguard.clock import ManualClock

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
runner = CliRunner()
HOST = "research-p4d-copying-data"


def demo(tmp_path_factory: pytest.TempPathFactory, hours: int) -> Iterator[Path]:
    """A demo of `hours` (the copy began 2 hours before it): its directory, with the output
    in demo.out, the clock pinned while the tests read it."""
    path = tmp_path_factory.mktemp("wip")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(path)
        shutil.copytree(REPO / "policies", path / "policies")
        mp.delenv("COSTGUARD_CONFIG", raising=False)
        mp.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{path / 'configured.db'}")
        mp.setattr(cli_common, "CLOCK", ManualClock(NOW))
        result = runner.invoke(app, ["demo", "--hours", str(hours)], terminal_width=100)
        assert result.exit_code == 0, result.output
        (path / "demo.out").write_text(result.output, encoding="utf-8")
        yield path


@pytest.fixture
def copying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from demo(tmp_path_factory, 6)  # the copy still runs at the end


@pytest.fixture
def copied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from demo(tmp_path_factory, 20)  # the copy ended 8 hours before the end


def explain(*args: str) -> str:
    result = runner.invoke(app, ["--database", "costguard-demo.db", "explain", HOST, *args],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_while_the_copy_runs_the_stop_is_held_back(copying: Path) -> None:
    during = explain()
    assert ("idle-gpu-shutdown (enforce): idle on its GPUs, but the stop is held back, so "
            "nothing is due: idle-but-busy: host busy (last 10 min): disk up to 420.0 MB/s"
            in during)
    assert "Host busy (last 10 min): disk up to 420.0 MB/s" in during
    assert " stop done" not in during


def test_once_the_copy_is_done_it_is_warned_and_stopped(copied: Path) -> None:
    after = explain()
    assert "stop done: idle: " in after and "host quiet (last 10 min): CPU 3% (2.88 cores)" in (
        after)
    out = (copied / "demo.out").read_text()
    assert f"STOP {HOST}" in out
    assert ("Work in progress: 1 idle instance not stopped while its host showed work "
            "(idle-but-busy: still idle spend; explain says what held it back).") in " ".join(
        out.split())
