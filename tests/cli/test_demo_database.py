"""`costguard demo` keeps to a database of its own, tells the same story for a seed, and its
figures are the report's (#20 items 2 and 3)."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func
from sqlmodel import SQLModel, select
from typer.testing import CliRunner

from costguard import cli_common
from costguard.cli import app
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.daemon.metrics import DaemonMetrics
from costguard.report.run import spend_report
from costguard.store.db import Database
from costguard.store.tables import InstanceRow

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # a Tuesday
HOURS = 12
runner = CliRunner()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ManualClock]:
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    monkeypatch.delenv("COSTGUARD_CONFIG", raising=False)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'configured.db'}")
    clock = ManualClock(NOW)
    monkeypatch.setattr(cli_common, "CLOCK", clock)
    yield clock


def demo(*options: str) -> str:
    result = runner.invoke(app, [*options, "demo", "--hours", str(HOURS), "--quiet"])
    assert result.exit_code == 0, result.output
    return result.output


def story(output: str) -> str:
    """The demo's output without what may differ between runs: times, dates and paths."""
    output = re.sub(r"in [\d.]+ s", "in _ s", output)
    output = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d", "_", output)
    return re.sub(r"database: .*", "database: _", output)


def test_the_demo_never_writes_into_the_configured_database(
        workdir: ManualClock, tmp_path: Path) -> None:
    out = demo()
    assert not (tmp_path / "configured.db").exists()
    assert (tmp_path / "costguard-demo.db").exists()
    assert "costguard --database costguard-demo.db report" in " ".join(out.split())


def test_a_seed_tells_the_same_story_twice_and_on_any_day_and_hour(
        workdir: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = demo()
    again = demo()  # the same database, its earlier run's watermarks and all
    assert story(again) == story(first)
    workdir.set(NOW + timedelta(days=4, hours=7, minutes=41))  # a Saturday evening
    shutil.copytree(tmp_path / "policies", tmp_path / "saturday" / "policies")
    monkeypatch.chdir(tmp_path / "saturday")
    other_day = demo()
    assert story(other_day) == story(first)
    assert "instances stopped" in first


def test_the_demo_refuses_a_database_it_did_not_write(
        workdir: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    (tmp_path / "costguard.yaml").write_text("providers:\n  sim: {instances: 3, seed: 4}\n")
    assert runner.invoke(app, ["run", "--once"]).exit_code == 0  # real data (of a kind)
    before = _rows(tmp_path / "configured.db")
    assert before[InstanceRow.__tablename__] == 3
    result = runner.invoke(app, ["--database", str(tmp_path / "configured.db"), "demo",
                                 "--hours", "1", "--quiet"])
    assert result.exit_code == 2
    assert "holds data that no demo wrote" in result.output
    assert "Traceback" not in result.output
    assert _rows(tmp_path / "configured.db") == before  # nothing cleared, nothing added


def _rows(path: Path) -> dict[str, int]:
    db = Database(f"sqlite:///{path}")
    with db.session() as s:
        counts = {t.name: s.execute(select(func.count()).select_from(t)).scalar_one()
                  for t in SQLModel.metadata.sorted_tables}
    db.dispose()
    return counts


def _money(text: str) -> list[str]:
    return re.findall(r"\$[\d,]+\.\d\d", text)


def test_every_surface_shows_the_demo_s_figures(workdir: ManualClock, tmp_path: Path) -> None:
    out = demo()
    total_row = next(line for line in out.splitlines() if "│ total" in line)
    shown = _money(total_row)  # cost, idle cost, spot savings possible
    window = ["--since", (NOW - timedelta(hours=HOURS)).isoformat(),
              "--until", (NOW + timedelta(seconds=1)).isoformat()]
    read = ["--database", "costguard-demo.db", "report", "--by", "team", *window]
    doc = json.loads(runner.invoke(app, [*read, "--format", "json"]).output)
    total = doc["total"]
    assert shown == [f"${v:,.2f}" for v in (total["cost_usd"], total["idle_cost_usd"],
                                              total["spot_savings_possible_usd"])]
    assert total["spot_savings_possible_usd"] > 0
    csv_total = runner.invoke(app, [*read, "--format", "csv"]).output.strip().splitlines()[-1]
    assert csv_total.startswith(f"total,{total['cost_usd']:.2f},{total['idle_cost_usd']:.2f},")
    table = runner.invoke(app, read).output
    assert _money(next(line for line in table.splitlines() if "│ total" in line)) == shown
    page = tmp_path / "spend.html"
    assert runner.invoke(app, [*read, "--format", "html", "--output", str(page)]).exit_code == 0
    assert shown[0] in page.read_text()

    # a team's cost is the same to the micro-dollar whatever else it is grouped by
    settings = Settings()  # its catalog prices spot savings; the store is the demo's own
    db = Database(f"sqlite:///{tmp_path / 'costguard-demo.db'}", create=False)
    since, until = NOW - timedelta(hours=HOURS), NOW + timedelta(seconds=1)
    with db.session() as s:
        by_team = {r.key[0]: r.cost_micros for r in spend_report(s, settings, ["team"],
                                                                  since, until).rows}
        assert len(by_team) > 3 and round(sum(by_team.values()) / 1e6, 2) == total["cost_usd"]
        for finer in ("instance", "instance-type", "region"):
            summed: Counter[str] = Counter()
            for r in spend_report(s, settings, ["team", finer], since, until).rows:
                summed[r.key[0]] += r.cost_micros
            assert dict(summed) == by_team, finer
        # and /metrics' idle dollars over the last hour are `report --since 1h`'s
        metrics = DaemonMetrics()
        metrics.refresh_from_store(s, NOW)
        hour = json.loads(runner.invoke(app, [
            "--database", "costguard-demo.db", "report", "--format", "json",
            "--since", (NOW - timedelta(hours=1)).isoformat(),
            "--until", NOW.isoformat()]).output)["total"]
        gauge = metrics.idle_usd_per_hour._value.get()
        assert hour["idle_cost_usd"] > 0 and round(gauge, 2) == hour["idle_cost_usd"]
    db.dispose()
