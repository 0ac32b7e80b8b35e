"""`costguard status` and `costguard db backup`, through Typer's runner."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from costguard.clock import ManualClock, SystemClock
from costguard.daemon.commands import commands_app
from costguard.daemon.health import gather_status
from costguard.store.db import Database
from costguard.store.tables import CycleRow
from tests.daemon.daemon_helpers import START, build_engine, scripted_cloud

runner = CliRunner()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'cg.db'}")
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    return tmp_path


def _cycle(db_path: Path, clock: ManualClock | SystemClock) -> None:
    db = Database(f"sqlite:///{db_path}")
    build_engine(db, scripted_cloud(clock), clock).run_cycle()
    db.dispose()


def test_status_is_healthy_after_a_recent_cycle(env: Path) -> None:
    _cycle(env / "cg.db", SystemClock())
    result = runner.invoke(commands_app(), ["status", "--format", "json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["healthy"] and info["last_cycle"]["status"] == "ok"
    assert info["paused"] is False and info["unresolved_action_intents"] == 0


def test_status_names_the_cloud_readings_the_last_cycle_dropped(env: Path) -> None:
    _cycle(env / "cg.db", SystemClock())
    plain = runner.invoke(commands_app(), ["status"])
    assert "dropped" not in plain.output
    db = Database(f"sqlite:///{env / 'cg.db'}")
    with db.session() as s:
        (row,) = s.exec(select(CycleRow)).all()
        row.summary = {**row.summary, "readings_dropped": {"aws": 3}}
        s.add(row)
        s.commit()
    db.dispose()
    result = runner.invoke(commands_app(), ["status"])
    assert result.exit_code == 0, result.output
    assert ("cloud GPU readings dropped by the last cycle, not valid readings (no data, never "
            "idle; the log names them): aws 3") in " ".join(result.output.split())
    info = json.loads(runner.invoke(commands_app(), ["status", "--format", "json"]).output)
    assert info["last_cycle"]["readings_dropped"] == {"aws": 3}


def test_status_exits_1_and_says_so_when_no_cycle_ran_lately(env: Path) -> None:
    _cycle(env / "cg.db", ManualClock(START))  # long ago
    result = runner.invoke(commands_app(), ["status"])
    assert result.exit_code == 1
    assert "not cycling" in result.output and "last cycle: #1 ok" in result.output


def test_status_on_a_missing_schema_tells_how_to_fix_it(env: Path) -> None:
    sqlite3.connect(env / "cg.db").close()
    result = runner.invoke(commands_app(), ["status"])
    assert result.exit_code == 2 and "costguard db upgrade" in result.output
    assert "Traceback" not in result.output


def test_gather_status_counts_alerts_by_delivery_state(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    clock = ManualClock(START)
    engine = build_engine(db, scripted_cloud(clock), clock, alerts={"console": False})
    for _ in range(3):
        engine.run_cycle()
        clock.advance(timedelta(minutes=1))
    info = gather_status(db, clock.now(), 60)
    # the three stops' alerts, whatever their delivery state (no channel is configured here)
    assert info["healthy"] and sum(info["alerts"].values()) >= 3


def test_backup_copies_a_live_sqlite_database(env: Path) -> None:
    _cycle(env / "cg.db", SystemClock())
    result = runner.invoke(commands_app(), ["backup", str(env / "copy.db")])
    assert result.exit_code == 0, result.output
    copy = sqlite3.connect(env / "copy.db")
    assert copy.execute("SELECT count(*) FROM instances").fetchone() == (5,)
    copy.close()


def test_backup_without_a_database_explains(env: Path) -> None:
    result = runner.invoke(commands_app(), ["backup", str(env / "copy.db")])
    assert result.exit_code == 2 and "no SQLite database file" in result.output


def test_backup_dumps_postgresql_with_pg_dump(pg_url: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", pg_url)
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    Database(pg_url).dispose()
    result = runner.invoke(commands_app(), ["backup", str(tmp_path / "cg.dump")])
    if "pg_dump is not installed" in result.output:
        pytest.skip("no pg_dump here")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cg.dump").read_bytes().startswith(b"PGDMP")  # custom format


def test_compact_settles_a_stores_readings_and_prunes_them_by_retention(env: Path) -> None:
    from datetime import UTC, datetime

    from costguard.model import GpuMinute, TelemetrySource
    from costguard.store.block_tables import ReadingBlockRow, ReadingHourRow
    from costguard.store.readings import write_minutes
    from costguard.store.tables import GpuReadingRow

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    db = Database(f"sqlite:///{env / 'cg.db'}")
    # a store from before 0020: ten days of readings, one every ten minutes, as rows
    old = [GpuMinute(provider="aws", instance_id="i-old", minute=now - timedelta(minutes=m),
                     source=TelemetrySource.AGENT, util_mean=float(m % 100))
           for m in range(1, 10 * 24 * 60, 10)]
    with db.session() as s:
        write_minutes(s, old)
    result = runner.invoke(commands_app(), ["compact"])
    assert result.exit_code == 0, result.output
    with db.session() as s:
        rows = s.exec(select(GpuReadingRow.minute)).all()
        blocks = s.exec(select(ReadingBlockRow.hour)).all()
        history = s.exec(select(ReadingHourRow.hour)).all()
    db.dispose()
    settled = [m for m in old if m.minute < now - timedelta(hours=1)
               and m.minute.replace(minute=0) < (now - timedelta(hours=1)).replace(minute=0)]
    assert len(rows) == len(old) - len(settled)  # the hours still settling stay rows
    # every settled hour has its history; blocks only within the raw window (7 days)
    assert len(history) == len({m.minute.replace(minute=0) for m in settled})
    assert 7 * 24 - 2 <= len(blocks) <= 7 * 24 + 1
    assert f"{len(settled):,} readings settled into {len(history):,} instance-hours" in (
        " ".join(result.output.split()))
    again = runner.invoke(commands_app(), ["compact"])
    assert "0 readings settled" in again.output


def test_compact_on_a_store_not_upgraded_says_to_upgrade_it(env: Path) -> None:
    Database(f"sqlite:///{env / 'cg.db'}").dispose()
    con = sqlite3.connect(env / "cg.db")
    con.execute("UPDATE alembic_version SET version_num = '0019'")
    con.commit()
    con.close()
    result = runner.invoke(commands_app(), ["compact"])
    assert result.exit_code == 2
    assert "not up to date" in result.output and "costguard db upgrade" in result.output
