"""The billing and anomaly sub-apps through Typer's CliRunner."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.costs.commands import anomaly_app, billing_app
from costguard.store.db import Database
from costguard.store.tables import AnomalyRow
from tests.costs.test_billing_import import HEADER, focus_line


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Database:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", url)
    monkeypatch.chdir(tmp_path)
    return Database(url)


def test_anomaly_expected_marks_it_and_an_unknown_id_is_a_clear_error(db: Database) -> None:
    with db.session() as s:
        row = AnomalyRow(rule="r", dimension="team", value="x", granularity="day",
                         bucket_start=datetime(2026, 3, 1, tzinfo=UTC), explanation="team x +$1",
                         detected_at=datetime(2026, 3, 2, tzinfo=UTC))
        s.add(row)
        s.flush()
        anomaly_id = row.id
    ok = CliRunner().invoke(anomaly_app, ["expected", str(anomaly_id)])
    assert ok.exit_code == 0 and "marked expected" in ok.output
    with db.session() as s:
        got = s.get(AnomalyRow, anomaly_id)
        assert got is not None and got.status == "expected"
    bad = CliRunner().invoke(anomaly_app, ["ack", "999"])
    assert bad.exit_code == 2 and "No anomaly by the id of 999" in bad.output
    assert "Traceback" not in bad.output


def test_billing_import_reports_lines_and_a_missing_file_is_a_clear_error(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "focus.csv"
    export.write_text(HEADER + focus_line("12.5", "research"))
    ok = CliRunner().invoke(billing_app, ["import", str(export)])
    assert ok.exit_code == 0, ok.output
    assert "1 line(s) imported" in ok.output and "$12.50" in ok.output
    missing = CliRunner().invoke(billing_app, ["import", str(tmp_path / "nope.csv")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
