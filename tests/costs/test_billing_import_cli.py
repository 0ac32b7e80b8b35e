"""`costguard billing import` as a FinOps lead meets it: a file of which nothing was imported
fails, a partial import ends saying how much was skipped, no policy is needed to import a
bill, the next command suggested reads the bill's own period, and the messages name what
they mean (the second-hour issue)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.store.db import Database
from tests.costs.test_focus_real_exports import row, write_csv


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with no costguard.yaml and no policies, a store named by the env."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", url)
    Database(url).dispose()
    return tmp_path


def _import(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["billing", "import", *args])
    return result.exit_code, result.output


def test_a_file_of_which_nothing_was_imported_fails(bare: Path) -> None:
    # a published FOCUS example writes dates as 4/1/25: every line skipped, and exit 0 before
    path = write_csv(bare / "f.csv", [row(ChargePeriodStart="4/1/25"),
                                      row(ChargePeriodStart="4/2/25")])
    code, out = _import(str(path))
    assert code == 1, out
    assert "nothing imported: all 2 line(s) were skipped" in " ".join(out.split())
    code, _ = _import(str(path), "--format", "json")
    assert code == 1


def test_a_partial_import_ends_saying_how_much_was_skipped(bare: Path) -> None:
    path = write_csv(bare / "f.csv", [row(), row(BilledCost="ten"), row(BilledCost="3")])
    code, out = _import(str(path))
    assert code == 0, out
    last = [line for line in out.splitlines() if line.strip()][-1]
    assert last == "1 of 3 line(s) skipped (listed above; --strict refuses such a file)"


def test_a_bill_is_imported_without_any_policy(bare: Path) -> None:
    assert not (bare / "policies").exists() and not (bare / "costguard.yaml").exists()
    code, out = _import(str(write_csv(bare / "f.csv", [row()])))
    assert code == 0, out
    said = " ".join(out.split())
    assert "lines are attributed by the default rules" in said
    assert "1 line(s) imported" in said
    # a --policies that names nothing is still the user's mistake
    code, out = _import(str(bare / "f.csv"), "--policies", "nowhere")
    assert code == 2


def test_the_next_command_reads_the_bill_s_own_period(bare: Path) -> None:
    path = write_csv(bare / "f.csv", [
        row(ChargePeriodStart="2026-05-01T00:00:00Z", ChargePeriodEnd="2026-05-01T01:00:00Z"),
        row(ChargePeriodStart="2026-05-03T22:00:00Z", ChargePeriodEnd="2026-05-03T23:00:00Z")])
    code, out = _import(str(path))
    assert code == 0, out
    said = " ".join(out.split())
    assert ("costguard report --by team --compare billed --since 2026-05-01 --until "
            "2026-05-04") in said
    report = CliRunner().invoke(app, ["report", "--by", "team", "--compare", "billed",
                                      "--since", "2026-05-01", "--until", "2026-05-04"])
    assert report.exit_code == 0, report.output
    flat = " ".join(report.output.split())
    assert "$20.00" in flat  # the bill's two lines, not "$0.00, no bills imported"
    assert "Google Cloud standard export" not in flat  # an AWS bill: no Google hint


def test_not_a_billing_export_names_every_cur_spelling(bare: Path) -> None:
    path = bare / "notes.csv"
    path.write_text("name,amount\nx,1\n")
    code, out = _import(str(path))
    assert code == 2
    said = " ".join(out.split())
    assert "line_item_unblended_cost" in said and "lineItem/UnblendedCost" in said


def test_an_aws_profile_that_does_not_exist_is_one_line(
        bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`import-ce --profile` names a profile botocore does not have: it raised
    ProfileNotFound past the command (a traceback), before any call was made."""
    (bare / "aws-config").write_text("[profile finops]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(bare / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(bare / "aws-credentials"))
    result = CliRunner().invoke(app, ["billing", "import-ce", "--profile", "finnops"])
    assert result.exit_code == 2, result.exception  # a configuration error, as the rest
    assert result.exception is None or isinstance(result.exception, SystemExit)
    said = " ".join(result.output.split())
    assert "--profile 'finnops': no such AWS profile" in said, said
    assert "Traceback" not in result.output
