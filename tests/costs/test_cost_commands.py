"""The billing and anomaly sub-apps through Typer's CliRunner."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.billing.commands import billing_app
from costguard.costs.commands import anomaly_app
from costguard.store.db import Database
from costguard.store.tables import AnomalyRow
from tests.costs.test_billing_import import HEADER, focus_line


@pytest.fixture
def db(cli_store: Database) -> Database:
    return cli_store


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
    ok = CliRunner().invoke(billing_app, ["import", str(export)],
                            env={"COSTGUARD_POLICY_PATHS": "[]"})  # no policies configured
    assert ok.exit_code == 0, ok.output
    assert "1 line(s) imported" in ok.output and "$12.50" in ok.output
    missing = CliRunner().invoke(billing_app, ["import", str(tmp_path / "nope.csv")],
                                 env={"COSTGUARD_POLICY_PATHS": "[]"})
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_anomalies_and_budgets_as_json(db: Database, tmp_path: Path) -> None:
    import json

    from costguard.cli import app

    with db.session() as s:
        row = AnomalyRow(rule="team-daily", dimension="team", value="nlp", granularity="day",
                         bucket_start=datetime.now(UTC).replace(microsecond=0),
                         explanation="team nlp +$74.60", actual_micros=80_000_000,
                         baseline_micros=5_400_000, impact_micros=74_600_000,
                         causes=[{"instance": "i-1", "usd": 74.6}],
                         detected_at=datetime.now(UTC))
        s.add(row)
        s.flush()
        anomaly_id = row.id
    listed = CliRunner().invoke(anomaly_app, ["list", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    [item] = json.loads(listed.output)
    assert item["id"] == anomaly_id and item["impact_usd"] == 74.6 and "causes" not in item
    shown = json.loads(CliRunner().invoke(anomaly_app, ["show", str(anomaly_id),
                                                        "--format", "json"]).output)
    assert shown["causes"] == [{"instance": "i-1", "usd": 74.6}]
    policies = tmp_path / "budgets.yml"
    policies.write_text("attribution:\n  dimensions:\n    team: {keys: [team]}\n"
                        "budgets:\n  - {name: nlp-monthly, dimension: team, value: nlp, "
                        "monthly_usd: 1000}\n", encoding="utf-8")
    budgets = CliRunner().invoke(app, ["budget", "status", "--policies", str(policies),
                                       "--format", "json"])
    assert budgets.exit_code == 0, budgets.output
    [budget] = json.loads(budgets.output)
    assert budget["budget"] == "nlp-monthly" and budget["budget_usd"] == 1000
