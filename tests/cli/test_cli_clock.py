"""Every `costguard` command reads the time from the CLI's clock (`cli_common.CLOCK`).

Each test pins that clock to a ManualClock months away from today and checks that the
command acts at the clock's time: the stamp it writes, the window it counts back, the age it
reports. Against the wall clock each of these would be off by months.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select
from typer.testing import CliRunner

from costguard import cli_common
from costguard.cli import app
from costguard.clock import ManualClock
from costguard.store import control
from costguard.store.db import Database
from costguard.store.tables import ControlRow, CycleRow, PolicyStateRow
from tests.fakes.cloud import BUSY, full_cloud
from tests.fakes.scenario import idle_stop_policy, journal, make_engine, run_for

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # the day the commands believe it is
T0 = NOW - timedelta(hours=2)  # the stored history starts here...
LAST = T0 + timedelta(minutes=70)  # ...and its last cycle ran here (5-minute cycles)
POLICY = idle_stop_policy(max_snooze="1d")

runner = CliRunner()


@dataclass
class Store:
    url: str
    policy: Path
    clock: ManualClock  # the CLI's clock (set to NOW)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ManualClock]:
    """An empty working directory with its own SQLite store and the CLI's clock at NOW."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COSTGUARD_CONFIG", raising=False)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'cg.db'}")
    clock = ManualClock(NOW)
    monkeypatch.setattr(cli_common, "CLOCK", clock)
    yield clock


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workdir: ManualClock) -> Store:
    """History written by real cycles from T0 to LAST: i-idle (idle for a day already) is
    warned at T0 and stopped 15 minutes later; i-busy is busy throughout."""
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "idle.yml").write_text(POLICY)
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", json.dumps([str(policies)]))
    cloud = full_cloud(ManualClock(T0))
    cloud.add("i-idle", launched=T0 - timedelta(days=1))
    cloud.add("i-busy", BUSY, launched=T0 - timedelta(days=1))
    engine = make_engine(url, POLICY, cloud)
    run_for(engine, cloud.clock, LAST - T0 + timedelta(minutes=5))
    engine.db.dispose()
    return Store(url, policies / "idle.yml", workdir)


def _utc(when: datetime | None) -> datetime | None:
    return None if when is None else when.replace(tzinfo=UTC)


def test_pause_and_resume_stamp_the_switch_with_the_clock(workdir: ManualClock) -> None:
    assert runner.invoke(app, ["pause"]).exit_code == 0
    db = Database(f"sqlite:///{Path.cwd() / 'cg.db'}")
    with db.session() as s:
        row = s.get(ControlRow, control.PAUSED)
        assert row is not None and row.value == "true" and _utc(row.updated_at) == NOW
    workdir.advance(timedelta(hours=3))
    assert runner.invoke(app, ["resume"]).exit_code == 0
    with db.session() as s:
        row = s.get(ControlRow, control.PAUSED)
        assert row is not None and row.value == "false"
        assert _utc(row.updated_at) == NOW + timedelta(hours=3)
    db.dispose()


def test_snooze_lasts_from_the_clock(store: Store) -> None:
    result = runner.invoke(app, ["snooze", "i-busy", "--for", "4h", "--reason", "eval",
                                 "--by", "ana", "--no-tag"])
    assert result.exit_code == 0, result.output
    assert "snoozed until 2026-03-10 16:00 UTC" in result.output
    db = Database(store.url)
    with db.session() as s:
        st = s.get(PolicyStateRow, ("idle", "sim", "i-busy"))
    assert st is not None and _utc(st.snooze_until) == NOW + timedelta(hours=4)
    (entry,) = [j for j in journal(db, "i-busy") if j.action == "snooze"]
    assert _utc(entry.intent_at) == NOW  # journalled when the clock says it happened
    db.dispose()


def test_audit_since_counts_back_from_the_clock(store: Store) -> None:
    start = NOW - timedelta(minutes=110)  # T0 + 10 min: after the warning, before the stop
    result = runner.invoke(app, ["audit", "--since", "110m", "--format", "json"])
    assert result.exit_code == 0, result.output
    events = json.loads(result.output)
    assert events, "the stop at T0 + 15 min is inside the clock's last 110 minutes"
    assert all(datetime.fromisoformat(e["at"]) >= start for e in events)
    assert ("stop", "done") in [(e["kind"], e["status"]) for e in events]
    table = runner.invoke(app, ["audit", "--since", "110m"], terminal_width=200)
    assert "Audit since 2026-03-10 10:10 UTC" in table.output
    everything = json.loads(runner.invoke(app, ["audit", "--since", "3h", "--format",
                                                "json"]).output)
    assert len(everything) > len(events)  # the finding and warning at T0 too
    store.clock.advance(timedelta(days=1))
    later = runner.invoke(app, ["audit", "--since", "110m", "--format", "json"])
    assert json.loads(later.output) == []  # a day on, the same window holds nothing


def test_simulate_replays_up_to_the_clock(store: Store) -> None:
    result = runner.invoke(app, ["simulate", "--policy", str(store.policy), "--since", "3h",
                                 "--step", "5m", "--format", "json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.output)
    assert datetime.fromisoformat(report["until"]) == NOW
    assert datetime.fromisoformat(report["since"]) == NOW - timedelta(hours=3)
    assert report["warnings"] >= 1  # the history it replayed is there


def test_status_ages_the_last_cycle_by_the_clock(store: Store) -> None:
    store.clock.set(LAST + timedelta(minutes=2))
    result = runner.invoke(app, ["status", "--format", "json"])
    assert result.exit_code == 0, result.output  # healthy: 2 minutes < 3 poll intervals
    info = json.loads(result.output)
    assert info["healthy"] and info["seconds_since_last_good_cycle"] == 120.0
    store.clock.set(LAST + timedelta(hours=1))
    stale = runner.invoke(app, ["status", "--format", "json"])
    assert stale.exit_code == 1 and json.loads(stale.output)[
        "seconds_since_last_good_cycle"] == 3600.0


def test_report_window_is_counted_back_from_the_clock(store: Store) -> None:
    def total(since: str) -> float:
        out = runner.invoke(app, ["report", "--by", "team", "--since", since, "--format",
                                  "json"])
        assert out.exit_code == 0, out.output
        return float(json.loads(out.output)["total"]["cost_usd"])

    assert total("3h") > 0  # T0..LAST lies within the clock's last 3 hours
    assert total("30m") == 0  # nothing ran in the clock's last 30 minutes


def test_run_once_cycles_at_the_clock(workdir: ManualClock, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    (tmp_path / "costguard.yaml").write_text("providers:\n  sim: {instances: 3}\n")
    result = runner.invoke(app, ["run", "--once", "--format", "json"])
    assert result.exit_code == 0, result.output
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    with db.session() as s:
        (cycle,) = s.exec(select(CycleRow)).all()
    db.dispose()
    assert _utc(cycle.started_at) == NOW and _utc(cycle.finished_at) == NOW


def test_demo_ends_at_the_clock(workdir: ManualClock, tmp_path: Path) -> None:
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    result = runner.invoke(app, ["demo", "--hours", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "cg.db").exists()  # the configured store is never the demo's
    db = Database(f"sqlite:///{tmp_path / 'costguard-demo.db'}")
    with db.session() as s:
        starts = [_utc(c.started_at) for c in s.exec(
            select(CycleRow).order_by(col(CycleRow.id)))]
    db.dispose()
    assert starts[0] == NOW - timedelta(hours=2) and starts[-1] == NOW  # "the last 2 hours"
    assert len(starts) == 13  # 10-minute cycles, both ends included
