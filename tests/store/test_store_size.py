"""`costguard db size`: each table's rows and bytes, and what a reading costs as a row, in a
block and as history, measured from the store itself; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, func, inspect, select, update
from typer.testing import CliRunner

from costguard.config import Settings
from costguard.daemon.commands import commands_app
from costguard.daemon.size_text import size_text
from costguard.model import GpuMinute, TelemetrySource
from costguard.store import compact, size
from costguard.store.block_tables import ReadingBlockRow, ReadingHourRow
from costguard.store.db import Database
from costguard.store.readings import write_minutes
from costguard.store.tables import GpuReadingRow

NOW = datetime(2026, 11, 2, 12, 20, tzinfo=UTC)  # hours before 11:00 settle
START = NOW - timedelta(hours=3, minutes=20)  # 09:00: two hours settle, 11:00-12:20 stay rows


def _readings() -> list[GpuMinute]:
    out = []
    for m in range(200):
        at = START + timedelta(minutes=m)
        out += [GpuMinute(provider="aws", instance_id="i-agent", gpu_index=gpu, minute=at,
                          source=TelemetrySource.AGENT, util_mean=float(m % 97),
                          mem_used_bytes=2**30 * gpu) for gpu in range(4)]
        if m % 5 == 0:  # CloudWatch's 5-minute points: a reading of five minutes
            out.append(GpuMinute(provider="aws", instance_id="i-cw", minute=at,
                                 source=TelemetrySource.CLOUDWATCH, span_minutes=5,
                                 util_mean=float(m % 7)))
    return out


def _filled(db: Database) -> None:
    with db.session() as s:
        write_minutes(s, _readings())
    done = compact.compact(db.session, NOW, raw_since=NOW - timedelta(days=7))
    # 09:00 and 10:00 of both instances: the agent's 4 GPUs x 120 minutes, 24 CloudWatch
    # points of five minutes
    assert (done.blocks, done.readings) == (4, 4 * 120 + 24)


def test_size_counts_what_each_layout_holds_and_costs(db: Database) -> None:
    _filled(db)
    got = size.measure(db)
    rows, per_row = got.raw_rows()
    assert rows == 4 * 80 + 16  # 11:00 to 12:20 is not settled yet
    assert per_row is not None and per_row > 0
    # every block decoded (fewer than the sample): their readings and the minutes they cover
    assert (got.blocks.blobs, got.blocks.items, got.blocks.minutes) == (4, 4 * 120 + 24,
                                                                      4 * 120 + 24 * 5)
    # history: a GPU-hour per GPU and hour, of each instance that has one
    assert (got.history.blobs, got.history.items) == (4, 4 * 2 + 1 * 2)
    blocks, series = got.table("reading_blocks"), got.table("reading_series")
    assert blocks is not None and series is not None
    assert (blocks.rows, series.rows) == (4, 2)
    assert blocks.bytes and series.bytes
    assert got.settled_per_minute() == pytest.approx(
        (blocks.bytes + series.bytes) / (4 * 120 + 24 * 5))
    history = got.table("reading_hours")
    assert history is not None and history.bytes
    assert got.history_per_gpu_hour() == pytest.approx(history.bytes / 10)
    assert got.oldest_block == got.oldest_history == START
    assert got.total_bytes >= sum(t.bytes or 0 for t in got.tables) > 0
    assert {t.name for t in got.tables} >= {"gpu_readings", "instances", "action_journal"}


def test_a_sample_decodes_the_newest_blocks_only_and_counts_a_garbled_one(
        db: Database) -> None:
    _filled(db)
    newest = size.measure(db, sample=2)
    assert newest.blocks.blobs == 2 and newest.blocks.items == 4 * 60 + 12  # 10:00's
    with db.session() as s:
        s.execute(update(ReadingBlockRow).where(ReadingBlockRow.hour == compact.hour_of(
            START)).values(payload=b"\x01\x01\xff\xff\xff\x7fnot zstd"))
        s.execute(update(ReadingHourRow).values(payload=b"\x00"))
        # an hour no date holds (a row garbled past any year): no oldest hour, no crash
        s.execute(update(ReadingHourRow).where(ReadingHourRow.hour == compact.hour_of(
            START)).values(hour=-(2**31 - 1)))
    got = size.measure(db)
    assert got.oldest_history is None and got.oldest_block == START
    assert (got.blocks.blobs, got.blocks.unreadable) == (2, 2)
    assert (got.history.blobs, got.history.unreadable, got.history_per_gpu_hour()) == (0, 4,
                                                                                        None)
    assert any("(all 4 decoded; 2 did not decode)" in line
               for line in size_text(got, Settings()))


def test_sqlite_says_how_much_of_its_file_is_free_pages(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    _filled(db)
    before = size.measure(db)
    with db.session() as s:  # what a prune past the raw window does
        s.execute(delete(ReadingBlockRow))
    after = size.measure(db)
    db.dispose()
    assert before.free_bytes is not None and after.free_bytes is not None
    blocks = before.table("reading_blocks")
    assert blocks is not None and blocks.bytes
    assert after.total_bytes == before.total_bytes  # the file does not shrink
    assert after.free_bytes - before.free_bytes >= blocks.bytes - 2 * 4096  # its root pages
    assert "of it free (reused as the store grows)" in size_text(after, Settings())[0]


def test_an_empty_store_has_nothing_to_measure_per_reading(db: Database) -> None:
    got = size.measure(db)
    assert got.raw_rows() == (0, None)
    assert got.settled_per_minute() is None and got.history_per_gpu_hour() is None
    assert got.oldest_block is None
    text = "\n".join(size_text(got, Settings()))
    assert "(no blocks yet)" in text and "(no hours yet)" in text


def test_sqlite_without_dbstat_gives_the_files_size(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    _filled(db)
    monkeypatch.setattr(size, "_DBSTAT", "SELECT name, SUM(pgsize) FROM dbstat_not_built "
                        "GROUP BY name")
    got = size.measure(db)
    db.dispose()
    assert got.measured.startswith("unknown")
    assert all(t.bytes is None for t in got.tables) and got.settled_per_minute() is None
    assert got.total_bytes == (tmp_path / "cg.db").stat().st_size
    assert got.blocks.items == 4 * 120 + 24  # what the blocks hold is still measured
    assert "?" in "\n".join(size_text(got, Settings()))


def test_the_command_prints_80_columns_and_json(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'cg.db'}")
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    _filled(db)
    with db.session() as s:
        rows = s.execute(select(func.count()).select_from(GpuReadingRow)).scalar_one()
    db.dispose()
    runner = CliRunner()
    plain = runner.invoke(commands_app(), ["size"])
    assert plain.exit_code == 0, plain.output
    assert f"not settled yet: {rows:,} GPU-minutes as rows" in plain.output
    assert "raw minutes, kept 7 days (accounting.readings_raw):\n" \
        "    4 instance-hours in blocks from 2026-11-02 09:00 UTC, " in plain.output
    assert "hourly history, kept 395 days (accounting.readings_history):\n" \
        "    4 instance-hours from 2026-11-02 09:00 UTC, " in plain.output
    assert "    126 readings a block, " in plain.output  # 504 readings in 4 blocks
    assert "    2.5 GPU-hours each, " in plain.output and "(all 4 decoded)" in plain.output
    assert max(len(line) for line in plain.output.splitlines()) <= 80
    data = json.loads(runner.invoke(commands_app(), ["size", "--format", "json"]).output)
    assert data["readings"]["rows_gpu_minutes"] == rows
    assert data["readings"]["blocks_sample"]["gpu_minutes"] == 4 * 120 + 24 * 5
    assert data["total_bytes"] == (tmp_path / "cg.db").stat().st_size


def test_the_command_lists_every_table_the_store_has(tmp_path: Path) -> None:
    """In a process of its own, as a user runs it: a table whose module the command did not
    import (alert deliveries, bills, daily roll-ups, verdicts, prices) was left out."""
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    db = Database(url)
    with db.engine.connect() as con:
        tables = set(inspect(con).get_table_names()) - {"alembic_version"}
    db.dispose()
    run = "from costguard.cli import app; app()"
    done = subprocess.run([sys.executable, "-c", run, "--database", url, "db", "size",
                           "--format", "json"], capture_output=True, text=True, timeout=120,
                          check=True, cwd=tmp_path)
    listed = {t["name"] for t in json.loads(done.stdout)["tables"]}
    assert {"alert_deliveries", "billing_costs", "prices", "efficiency_verdicts"} <= tables
    assert listed == tables


def test_the_command_on_a_store_not_upgraded_says_so(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'none.db'}")
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    out = CliRunner().invoke(commands_app(), ["size"])
    assert out.exit_code != 0
    assert "Traceback" not in out.output
